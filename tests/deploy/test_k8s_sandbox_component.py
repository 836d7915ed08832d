"""The production sandbox component (deploy/k8s/components/sandbox-gvisor): what an operator relies on
when skill scripts run one pod per run on gVisor. The run's pod carries the same numbers as the bwrap
sandbox's defaults (read from ``SandboxLimits``, so the two cannot drift), lets nothing in or out,
runs non-root on a read-only root, and the toolrunner may manage pods in the sandbox namespace only.

Reads the manifests with pyyaml; the component is also built on top of base with `kustomize` (or
`kubectl kustomize`) when one is on PATH, skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from knowsphere_toolrunner.sandbox import SandboxLimits

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
COMPONENT = K8S / "components" / "sandbox-gvisor"
NAMESPACE = "knowsphere-sandbox"
LIMITS = SandboxLimits()
MIB = 1024 * 1024
QUANTITY = {"Mi": MIB, "Gi": 1024 * MIB}


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((COMPONENT / name).read_text()):
            if doc:
                found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def byte_size(quantity: str) -> int:
    for suffix, factor in QUANTITY.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def run_pod() -> dict[str, Any]:
    template = objects()[("PodTemplate", "skill-run")]
    assert template["metadata"]["namespace"] == NAMESPACE
    return dict(template["template"]["spec"])


def test_runs_are_scheduled_on_gvisor() -> None:
    runtime = objects()[("RuntimeClass", "gvisor")]
    assert runtime["handler"] == "runsc"
    assert run_pod()["runtimeClassName"] == runtime["metadata"]["name"]


def test_the_run_pod_has_the_sandbox_limits() -> None:
    pod = run_pod()
    assert pod["activeDeadlineSeconds"] == LIMITS.wall_time_seconds
    (container,) = pod["containers"]
    assert byte_size(container["resources"]["limits"]["memory"]) == LIMITS.max_run_memory_bytes
    assert "cpu" in container["resources"]["limits"]
    sizes = {v["name"]: byte_size(v["emptyDir"]["sizeLimit"]) for v in pod["volumes"]}
    assert sizes == {"workspace": LIMITS.workspace_bytes, "tmp": LIMITS.tmp_bytes}
    assert all(v["emptyDir"]["medium"] == "Memory" for v in pod["volumes"])
    quota = objects()[("ResourceQuota", "skill-runs")]
    assert int(quota["spec"]["hard"]["pods"]) == LIMITS.max_concurrent_runs


def test_the_run_pod_is_locked_down() -> None:
    pod = run_pod()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["restartPolicy"] == "Never" and pod["dnsPolicy"] == "None"
    assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/workspace", "/tmp"}


def test_nothing_goes_in_or_out_of_the_sandbox_namespace() -> None:
    policy = objects()[("NetworkPolicy", "deny-all")]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["podSelector"] == {}
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]  # no rule allows anything
    namespace = objects()[("Namespace", NAMESPACE)]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_toolrunner_manages_pods_in_the_sandbox_namespace_only() -> None:
    role = objects()[("Role", "toolrunner-skill-runs")]
    assert role["metadata"]["namespace"] == NAMESPACE
    resources = {resource for rule in role["rules"] for resource in rule["resources"]}
    assert resources == {"pods", "pods/log", "configmaps", "podtemplates"}  # no secrets, no exec
    # The run's ConfigMap is created and deleted; no other ConfigMap can be read.
    assert [r["verbs"] for r in role["rules"] if "configmaps" in r["resources"]] == [["create", "delete"]]
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
    assert ("ClusterRole", "toolrunner-skill-runs") not in objects()
    binding = objects()[("RoleBinding", "toolrunner-skill-runs")]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("ServiceAccount", "toolrunner")]


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def test_the_component_builds_on_top_of_base() -> None:
    command = kustomize_command()
    if command is None:
        pytest.skip("neither kustomize nor kubectl is on PATH: the component is not built")
    with tempfile.TemporaryDirectory() as folder:
        # kustomize refuses absolute paths: the base and the component are named relative to the folder.
        (Path(folder) / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(K8S / "base", folder)],
                    "components": [os.path.relpath(COMPONENT, folder)],
                }
            )
        )
        result = subprocess.run([*command, folder], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(result.stdout) if d}
    assert set(objects()) <= built
    assert ("Deployment", "toolrunner") in built and ("ServiceAccount", "toolrunner") in built
