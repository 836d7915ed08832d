"""What each component of the stack is: its command, environment, log, ports and health checks.

:class:`ComponentSpec` is plain data, so the supervisor can run any command (stand-ins in tests, the
real services under ``make up``). :func:`build_components` turns a :class:`StackConfig` into the
ordered list of specs; the environment it builds for each service is the wiring contract that the
services' settings read (``KS_<NAME>_*``).

A replicated service runs as several components (:mod:`knowsphere_stack.layout`): each instance has its
own name, log, gRPC port and data dir, and the same identity as its service: its identity key, NATS
nkey, TLS certificate and ``OTEL_SERVICE_NAME`` (``service.instance.id`` tells the instances apart in
traces). A caller of a replicated service gets every instance's address in ``KS_<X>_<PEER>_ADDR``, and
its channel spreads calls over them. Further instances start once the first is healthy: it has created
the tables they share.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from knowsphere_stack.binaries import nats_binary, temporal_binary
from knowsphere_stack.config import INGESTION_WORKER, LOOPBACK, SERVICE_NAMES, StackConfig
from knowsphere_stack.health import GrpcHealthCheck, HealthCheck, HttpCheck, TcpCheck, UptimeCheck
from knowsphere_stack.layout import (
    ServiceInstance,
    grpc_addresses,
    nats_nodes,
    service_instances,
)
from knowsphere_stack.local_llm import DEFAULT_PORT as LOCAL_LLM_PORT
from knowsphere_stack.tls import ensure_tls_certificates, tls_env, tls_files

NATS = "nats"
TEMPORAL = "temporal"

TEMPORAL_NAMESPACE = "default"
TEMPORAL_HEALTH_SERVICE = "temporal.api.workflowservice.v1.WorkflowService"

NATS_CLIENTS: frozenset[str] = frozenset(
    {"gateway", "conversation", "ingestion", "memory", "modelhub", "retrieval"}
)
"""Services that talk to NATS and get ``KS_<NAME>_NATS_URL``: those whose settings have ``nats_url``
(modelhub announces model changes on it, retrieval hears them; memory consumes turn completions)."""

STREAM_REPLICAS_ENV = "KS_NATS_STREAM_REPLICAS"
"""How many servers keep each JetStream stream (``knowsphere_runtime.streams.StreamSettings``)."""
OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"

PEERS: dict[str, tuple[str, ...]] = {
    "gateway": ("conversation", "retrieval", "ingestion", "memory", "toolrunner", "modelhub"),
    "conversation": ("retrieval", "memory", "toolrunner", "modelhub"),
    "ingestion": ("retrieval", "modelhub"),
    "retrieval": ("modelhub",),
    "memory": ("modelhub",),
    "toolrunner": ("retrieval", "modelhub"),
}
"""gRPC peers of each service, given as ``KS_<NAME>_<PEER>_ADDR=host:port`` (``host:port,host:port`` when
the peer has replicas)."""

WORKER_MODULE = "knowsphere_ingestion.worker"
WORKER_MIN_UPTIME = 2.0
"""The worker serves no port: it counts as healthy once it has stayed up this many seconds."""

MASTER_KEY_ENV = "MASTER_KEY"
SECRET_KEEPERS = frozenset({"modelhub", "conversation", "gateway"})
"""Services that keep tenants' secrets encrypted with the one MASTER_KEY (model keys; external
applications' keys; WeCom channel secrets)."""
MASTER_KEY_BYTES = 32


class ComponentSpec(BaseModel):
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="Set on top of the inherited environment.")
    cwd: str | None = None
    log_path: Path
    ports: dict[str, int] = Field(default_factory=dict, description="Label -> port, for display.")
    health: list[HealthCheck] = Field(default_factory=list)
    depends_on: list[str] = Field(
        default_factory=list, description="Components that must be healthy before this one starts."
    )


def nats_component(
    data_dir: Path,
    port: int,
    monitor_port: int,
    *,
    log_path: Path | None = None,
    config_file: Path | None = None,
    name: str = NATS,
    clustered: bool = False,
) -> ComponentSpec:
    """``nats-server`` with JetStream stored in ``data_dir``, client and monitoring ports on loopback;
    with ``config_file`` (which sets the same, and authorization: :mod:`knowsphere_stack.nats_auth`)
    started from that file instead. A ``clustered`` server is healthy once JetStream has a meta leader
    (``/healthz``), which needs a majority of the servers up; a single one once JetStream is on."""
    data_dir = Path(data_dir)
    healthz = "/healthz" if clustered else "/healthz?js-enabled-only=true"
    return ComponentSpec(
        name=name,
        argv=[str(nats_binary()), "-c", str(config_file)]
        if config_file is not None
        else [
            str(nats_binary()),
            "--jetstream",
            "--store_dir",
            str(data_dir),
            "--addr",
            LOOPBACK,
            "--port",
            str(port),
            "--http_port",
            str(monitor_port),
        ],
        log_path=log_path or data_dir / "nats-server.log",
        ports={"client": port, "monitor": monitor_port},
        health=[
            TcpCheck(host=LOOPBACK, port=port),
            HttpCheck(url=f"http://{LOOPBACK}:{monitor_port}{healthz}"),
        ],
    )


def temporal_component(
    data_dir: Path,
    port: int,
    ui_port: int,
    http_port: int,
    metrics_port: int,
    *,
    headless: bool = False,
    log_path: Path | None = None,
) -> ComponentSpec:
    """``temporal server start-dev`` persisting to ``data_dir/temporal.db``, every port explicit."""
    data_dir = Path(data_dir)
    argv = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--ip",
        LOOPBACK,
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--http-port",
        str(http_port),
        "--metrics-port",
        str(metrics_port),
        "--db-filename",
        str(data_dir / "temporal.db"),
        # WAL with NORMAL sync: commits are not fsynced one by one (checkpoints are); a crash of the
        # server loses nothing, a power cut at worst the last moments, never the file.
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=normal",
        "--log-level",
        "warn",
        # The UI would otherwise fetch a news feed from the internet.
        "--ui-disable-news-fetch",
    ]
    if headless:
        argv.append("--headless")
    ports = {"grpc": port, "http": http_port, "metrics": metrics_port}
    if not headless:
        ports["ui"] = ui_port
    return ComponentSpec(
        name=TEMPORAL,
        argv=argv,
        log_path=log_path or data_dir / "temporal.log",
        ports=ports,
        health=[GrpcHealthCheck(address=f"{LOOPBACK}:{port}", service=TEMPORAL_HEALTH_SERVICE)],
    )


def ensure_master_key(data_dir: Path) -> str:
    """The master key of tenants' secrets kept in ``<data>/secrets/master.key``, generated (mode 0600)
    on first use."""
    secrets_dir = Path(data_dir) / "secrets"
    secrets_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets_dir, 0o700)
    key_path = secrets_dir / "master.key"
    if not key_path.exists():
        key = base64.urlsafe_b64encode(secrets.token_bytes(MASTER_KEY_BYTES)).decode("ascii")
        try:
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # written concurrently by another launcher: use theirs
        else:
            with os.fdopen(fd, "w") as out:
                out.write(key + "\n")
    key = key_path.read_text().strip()
    if not key:
        raise ValueError(f"{key_path} is empty; delete it to generate a new master key or write one into it")
    return key


LOCAL_CLIENT_ISSUER = "local-client"
"""The key of local tools that call the services directly (``Stack.sign_as_local_client``)."""


def ensure_identity_keys(config: StackConfig, issuers: Sequence[str]) -> Path:
    """The services' identity keys (``config.identity_keys_dir``, by default ``<data>/secrets/identity``):
    ``<issuer>.key`` (mode 0600) for each and ``trusted/`` with every public key; missing ones are
    generated, existing ones kept (a key put there by hand, such as a client's, is trusted too)."""
    from knowsphere_runtime.identity_token import generate_keys

    folder = config.identity_dir
    generate_keys(folder, [*issuers, LOCAL_CLIENT_ISSUER])
    return folder


def identity_env(identity_dir: Path | None, issuer: str) -> dict[str, str]:
    """The ``KS_IDENTITY_*`` settings that make ``issuer`` sign with its key and trust the others'."""
    if identity_dir is None:
        return {}
    return {
        "KS_IDENTITY_SIGNING_KEY_FILE": str(identity_dir / f"{issuer}.key"),
        "KS_IDENTITY_TRUSTED_KEYS_DIR": str(identity_dir / "trusted"),
    }


def missing_service_modules(config: StackConfig) -> list[str]:
    """Selected services run with their default command whose module this interpreter cannot import."""
    missing = []
    for name in config.services:
        if name not in config.service_command and importlib.util.find_spec(f"knowsphere_{name}") is None:
            missing.append(name)
    return missing


def worker_available() -> bool:
    """True if ``knowsphere_ingestion.worker`` is importable (it is written after the service itself)."""
    try:
        return importlib.util.find_spec(WORKER_MODULE) is not None
    except ImportError:
        return False


LOCAL_MODEL_PORTS = (LOCAL_LLM_PORT, 11434)
"""Ports on loopback the local stack's modelhub may call: ``make local-llm`` and Ollama's default."""


def _inherited(name: str, config: StackConfig) -> str | None:
    """A variable as a service will see it before the wiring: from ``extra_env``, else inherited."""
    return config.extra_env.get(name, os.environ.get(name))


def instance_env(instance: ServiceInstance, config: StackConfig) -> dict[str, str]:
    """What tells the instances of a replicated service apart beyond port and data dir: the
    ``service.instance.id`` of their spans; a further modelhub instance shares the first one's model
    cache (files written whole and renamed into place) instead of preparing its own."""
    if config.replicas(instance.service) == 1:
        return {}
    inherited = _inherited(OTEL_RESOURCE_ATTRIBUTES, config)
    env = {
        OTEL_RESOURCE_ATTRIBUTES: ",".join(
            part for part in (inherited, f"service.instance.id={instance.name}") if part
        )
    }
    cache = "KS_MODELHUB_MODEL_CACHE_DIR"
    if instance.service == "modelhub" and instance.index > 1 and _inherited(cache, config) is None:
        env[cache] = str(config.service_data_dir("modelhub") / "models")
    return env


def service_env(
    name: str,
    config: StackConfig,
    *,
    master_key: str | None = None,
    identity_dir: Path | None = None,
    issuer: str | None = None,
    instance: ServiceInstance | None = None,
) -> dict[str, str]:
    """The ``KS_<NAME>_*`` wiring of one service (the contract its settings class reads); with
    ``identity_dir``, the keys it signs and verifies identity tokens with (as ``issuer``, by default
    ``name``). ``instance`` is one of its replicas (by default the first), with its port and data dir;
    every replica has its service's identity."""
    upper = name.upper()
    instance = instance or service_instances(config, name)[0]
    identity = issuer or name
    env = {
        f"KS_{upper}_GRPC_HOST": LOOPBACK,
        f"KS_{upper}_GRPC_PORT": str(instance.grpc_port or config.grpc_port(name)),
        f"KS_{upper}_DATA_DIR": str(instance.data_dir),
        "OTEL_SERVICE_NAME": identity,
        **identity_env(identity_dir, identity),
        # With KS_STACK_TLS: its certificate, for serving and calling over mutual TLS.
        **(tls_env(config.tls_dir, identity) if config.tls else {}),
    }
    if name in NATS_CLIENTS and config.nats_enabled:
        from knowsphere_stack.nats_auth import nats_auth_env
        from knowsphere_stack.nats_cluster import CLUSTERED_STREAM_REPLICAS

        env[f"KS_{upper}_NATS_URL"] = config.nats_url
        env.update(nats_auth_env(config, identity))
        if config.nats_cluster > 1:
            env[STREAM_REPLICAS_ENV] = str(CLUSTERED_STREAM_REPLICAS)
    for peer in PEERS.get(name, ()):
        env[f"KS_{upper}_{peer.upper()}_ADDR"] = grpc_addresses(config, peer)
    if name == "gateway":
        env["KS_GATEWAY_HTTP_HOST"] = LOOPBACK
        env["KS_GATEWAY_HTTP_PORT"] = str(config.gateway_http_port)
        # Single-user local mode: no token needed on loopback (the gateway refuses it on any other host).
        env["KS_GATEWAY_LOCAL_MODE"] = "true"
    if name == "ingestion":
        env["KS_INGESTION_TEMPORAL_ADDRESS"] = config.temporal_address
        env["KS_INGESTION_TEMPORAL_NAMESPACE"] = TEMPORAL_NAMESPACE
    if name in SECRET_KEEPERS and master_key is not None:
        env[MASTER_KEY_ENV] = master_key
    if name == "modelhub":
        # The local stack's models may run on this machine (make local-llm, Ollama): loopback on
        # their ports is allow-listed; every other private address and port stays refused.
        env["KS_MODELHUB_EGRESS__ALLOW_NETWORKS"] = '["127.0.0.1/32"]'
        env["KS_MODELHUB_EGRESS__ALLOWED_PORTS"] = json.dumps([80, 443, *LOCAL_MODEL_PORTS])
    # Explicit extras come last so a caller can deliberately override a wired value.
    env.update(config.extra_env)
    return env


def _nats_dependencies(config: StackConfig) -> list[str]:
    """Every NATS server: a service declares its streams at start, which needs the cluster's majority."""
    return [node.name for node in nats_nodes(config)] if config.nats_enabled else []


def _after_first(instance: ServiceInstance) -> list[str]:
    """A further instance starts once the first is healthy: the first creates the tables they share."""
    return [] if instance.index == 1 else [instance.service]


def service_component(
    name: str,
    config: StackConfig,
    *,
    master_key: str | None = None,
    identity_dir: Path | None = None,
    instance: ServiceInstance | None = None,
) -> ComponentSpec:
    """Instance ``instance`` (by default the first) of service ``name``."""
    instance = instance or service_instances(config, name)[0]
    assert instance.grpc_port is not None
    address = f"{LOOPBACK}:{instance.grpc_port}"
    # With TLS the probe presents the local-client certificate: it checks the port callers use.
    probe_tls = tls_files(config.tls_dir, LOCAL_CLIENT_ISSUER) if config.tls else None
    health: list[HealthCheck] = [GrpcHealthCheck(address=address, service="", tls=probe_tls)]
    ports = {"grpc": instance.grpc_port}
    if name == "gateway":
        health.append(HttpCheck(url=f"{config.gateway_url}/healthz"))
        ports["http"] = config.gateway_http_port
    depends_on = []
    if name in NATS_CLIENTS:
        depends_on += _nats_dependencies(config)
    if config.temporal_enabled and name == "ingestion":
        depends_on.append(TEMPORAL)
    depends_on += _after_first(instance)
    env = service_env(name, config, master_key=master_key, identity_dir=identity_dir, instance=instance)
    return ComponentSpec(
        name=instance.name,
        argv=config.service_command.get(name, [sys.executable, "-m", f"knowsphere_{name}"]),
        env=_extras_last({**env, **instance_env(instance, config)}, config),
        log_path=config.log_path(instance.name),
        ports=ports,
        health=health,
        depends_on=depends_on,
    )


def worker_component(
    config: StackConfig, *, identity_dir: Path | None = None, instance: ServiceInstance | None = None
) -> ComponentSpec:
    """An ingestion Temporal worker (by default the first): the ingestion service's wiring under its own
    name (OTEL service name and identity key), its data dir included."""
    instance = instance or service_instances(config, INGESTION_WORKER)[0]
    env = service_env("ingestion", config, identity_dir=identity_dir, issuer=INGESTION_WORKER)
    return ComponentSpec(
        name=instance.name,
        argv=config.service_command.get(INGESTION_WORKER, [sys.executable, "-m", WORKER_MODULE]),
        env=_extras_last({**env, **instance_env(instance, config)}, config),
        log_path=config.log_path(instance.name),
        health=[UptimeCheck(seconds=WORKER_MIN_UPTIME)],
        # After the API: it creates the document tables the worker shares.
        depends_on=[
            *([TEMPORAL] if config.temporal_enabled else []),
            *_nats_dependencies(config),
            "ingestion",
            *_after_first(instance),
        ],
    )


def _extras_last(env: dict[str, str], config: StackConfig) -> dict[str, str]:
    """``extra_env`` over the wiring, so a caller can deliberately override any wired value."""
    return {**env, **config.extra_env}


def _wants_worker(config: StackConfig) -> bool:
    if "ingestion" not in config.services:
        return False
    if config.ingestion_worker is not None:
        return config.ingestion_worker
    return INGESTION_WORKER in config.service_command or worker_available()


def nats_components(config: StackConfig) -> list[ComponentSpec]:
    """The NATS server, or every server of the cluster (each from its configuration file)."""
    from knowsphere_stack.nats_auth import write_server_config

    nodes = nats_nodes(config)
    clustered = len(nodes) > 1
    return [
        nats_component(
            node.jetstream_dir,
            node.port,
            node.monitor_port,
            log_path=config.log_path(node.name),
            config_file=write_server_config(config, node) if config.nats_auth or clustered else None,
            name=node.name,
            clustered=clustered,
        )
        for node in nodes
    ]


class ReplicasRefusedError(ValueError):
    """Replicas asked for whose service's state would stay per process
    (:mod:`knowsphere_stack.shared_state`)."""


def build_components(config: StackConfig) -> list[ComponentSpec]:
    """Every component ``config`` asks for, in start order (NATS, Temporal, then the services, each
    followed by its replicas). Raises :class:`ReplicasRefusedError` for replicas that cannot share their
    service's state."""
    from knowsphere_stack.shared_state import unshared_state

    refused = unshared_state(config)
    if refused:
        raise ReplicasRefusedError("\n".join(refused.values()))
    components: list[ComponentSpec] = []
    if config.nats_enabled:
        components += nats_components(config)
    if config.temporal_enabled:
        components.append(
            temporal_component(
                config.service_data_dir(TEMPORAL),
                config.temporal_port,
                config.temporal_ui_port,
                config.temporal_http_port,
                config.temporal_metrics_port,
                headless=config.temporal_headless,
                log_path=config.log_path(TEMPORAL),
            )
        )
    master_key: str | None = None
    if SECRET_KEEPERS & set(config.services) and MASTER_KEY_ENV not in os.environ:
        master_key = ensure_master_key(config.data_dir)
    services = [name for name in SERVICE_NAMES if name in config.services]
    wants_worker = "ingestion" in services and _wants_worker(config)
    identity_dir = ensure_identity_keys(config, [*services, *([INGESTION_WORKER] if wants_worker else [])])
    if config.tls:
        workers = [INGESTION_WORKER] if wants_worker else []
        ensure_tls_certificates(config.tls_dir, [*services, *workers, LOCAL_CLIENT_ISSUER])
    for name in services:
        for instance in service_instances(config, name):
            components.append(
                service_component(
                    name, config, master_key=master_key, identity_dir=identity_dir, instance=instance
                )
            )
        if name == "ingestion" and wants_worker:
            for instance in service_instances(config, INGESTION_WORKER):
                components.append(worker_component(config, identity_dir=identity_dir, instance=instance))
    return components
