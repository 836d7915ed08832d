"""deploy/k8s/components/nats-auth: every Deployment on the NATS bus authenticates with a seed of its
own, the identity whose permissions ``knowsphere_runtime.nats_permissions`` defines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from knowsphere_runtime.nats_permissions import LOCAL_CLIENT, NATS_PERMISSIONS

COMPONENT = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "components" / "nats-auth"


def _patches() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((COMPONENT / "deployments.yaml").read_text())
    return {doc["metadata"]["name"]: doc for doc in docs if doc}


def test_it_is_a_component_patching_exactly_the_deployments_that_use_nats() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert [p["path"] for p in kustomization["patches"]] == ["deployments.yaml"]
    assert set(_patches()) == set(NATS_PERMISSIONS) - {LOCAL_CLIENT}


def test_each_deployment_reads_its_own_seed_from_its_own_secret() -> None:
    for name, patch in _patches().items():
        pod = patch["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        seed = Path(env["KS_NATS_NKEY_SEED_FILE"])
        assert seed.name == f"{name}.nk"
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(seed.parent)]
        assert mount["readOnly"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"] == {"secretName": f"knowsphere-nats-{name}", "defaultMode": 0o400}
