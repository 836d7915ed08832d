"""What each component of the stack is: its command, environment, log, ports and health checks.

:class:`ComponentSpec` is plain data, so the supervisor can run any command (stand-ins in tests, the
real services under ``make up``). :func:`build_components` turns a :class:`StackConfig` into the
ordered list of specs; the environment it builds for each service is the wiring contract that the
services' settings read (``KS_<NAME>_*``).
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

PEERS: dict[str, tuple[str, ...]] = {
    "gateway": ("conversation", "retrieval", "ingestion", "memory", "toolrunner", "modelhub"),
    "conversation": ("retrieval", "memory", "toolrunner", "modelhub"),
    "ingestion": ("retrieval", "modelhub"),
    "retrieval": ("modelhub",),
    "memory": ("modelhub",),
    "toolrunner": ("retrieval", "modelhub"),
}
"""gRPC peers of each service, given as ``KS_<NAME>_<PEER>_ADDR=host:port``."""

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
) -> ComponentSpec:
    """``nats-server`` with JetStream stored in ``data_dir``, client and monitoring ports on loopback;
    with ``config_file`` (which sets the same, and authorization: :mod:`knowsphere_stack.nats_auth`)
    started from that file instead."""
    data_dir = Path(data_dir)
    return ComponentSpec(
        name=NATS,
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
            HttpCheck(url=f"http://{LOOPBACK}:{monitor_port}/healthz?js-enabled-only=true"),
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
    """The master key of tenants' secrets kept in ``<data>/secrets/master.key``, generated (mode 0600) on first use."""
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


def service_env(
    name: str,
    config: StackConfig,
    *,
    master_key: str | None = None,
    identity_dir: Path | None = None,
    issuer: str | None = None,
) -> dict[str, str]:
    """The ``KS_<NAME>_*`` wiring of one service (the contract its settings class reads); with
    ``identity_dir``, the keys it signs and verifies identity tokens with (as ``issuer``, by default
    ``name``)."""
    upper = name.upper()
    env = {
        f"KS_{upper}_GRPC_HOST": LOOPBACK,
        f"KS_{upper}_GRPC_PORT": str(config.grpc_port(name)),
        f"KS_{upper}_DATA_DIR": str(config.service_data_dir(name)),
        "OTEL_SERVICE_NAME": issuer or name,
        **identity_env(identity_dir, issuer or name),
        # With KS_STACK_TLS: its certificate, for serving and calling over mutual TLS.
        **(tls_env(config.tls_dir, issuer or name) if config.tls else {}),
    }
    if name in NATS_CLIENTS and config.nats_enabled:
        from knowsphere_stack.nats_auth import nats_auth_env

        env[f"KS_{upper}_NATS_URL"] = config.nats_url
        env.update(nats_auth_env(config, issuer or name))
    for peer in PEERS.get(name, ()):
        env[f"KS_{upper}_{peer.upper()}_ADDR"] = config.grpc_addr(peer)
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


def service_component(
    name: str, config: StackConfig, *, master_key: str | None = None, identity_dir: Path | None = None
) -> ComponentSpec:
    # With TLS the probe presents the local-client certificate: it checks the port callers use.
    probe_tls = tls_files(config.tls_dir, LOCAL_CLIENT_ISSUER) if config.tls else None
    health: list[HealthCheck] = [GrpcHealthCheck(address=config.grpc_addr(name), service="", tls=probe_tls)]
    ports = {"grpc": config.grpc_port(name)}
    if name == "gateway":
        health.append(HttpCheck(url=f"{config.gateway_url}/healthz"))
        ports["http"] = config.gateway_http_port
    depends_on = []
    if config.nats_enabled and name in NATS_CLIENTS:
        depends_on.append(NATS)
    if config.temporal_enabled and name == "ingestion":
        depends_on.append(TEMPORAL)
    return ComponentSpec(
        name=name,
        argv=config.service_command.get(name, [sys.executable, "-m", f"knowsphere_{name}"]),
        env=service_env(name, config, master_key=master_key, identity_dir=identity_dir),
        log_path=config.log_path(name),
        ports=ports,
        health=health,
        depends_on=depends_on,
    )


def worker_component(config: StackConfig, *, identity_dir: Path | None = None) -> ComponentSpec:
    """The ingestion Temporal worker: the ingestion service's wiring under its own name (OTEL service
    name and identity key)."""
    env = service_env("ingestion", config, identity_dir=identity_dir, issuer=INGESTION_WORKER)
    return ComponentSpec(
        name=INGESTION_WORKER,
        argv=config.service_command.get(INGESTION_WORKER, [sys.executable, "-m", WORKER_MODULE]),
        env=env,
        log_path=config.log_path(INGESTION_WORKER),
        health=[UptimeCheck(seconds=WORKER_MIN_UPTIME)],
        # After the API: it creates the document tables the worker shares.
        depends_on=[
            *([TEMPORAL] if config.temporal_enabled else []),
            *([NATS] if config.nats_enabled else []),
            "ingestion",
        ],
    )


def _wants_worker(config: StackConfig) -> bool:
    if "ingestion" not in config.services:
        return False
    if config.ingestion_worker is not None:
        return config.ingestion_worker
    return INGESTION_WORKER in config.service_command or worker_available()


def build_components(config: StackConfig) -> list[ComponentSpec]:
    """Every component ``config`` asks for, in start order (NATS, Temporal, then the services)."""
    components: list[ComponentSpec] = []
    if config.nats_enabled:
        from knowsphere_stack.nats_auth import write_server_config

        store_dir = config.service_data_dir(NATS)
        components.append(
            nats_component(
                store_dir,
                config.nats_port,
                config.nats_monitor_port,
                log_path=config.log_path(NATS),
                config_file=write_server_config(config, store_dir) if config.nats_auth else None,
            )
        )
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
        components.append(service_component(name, config, master_key=master_key, identity_dir=identity_dir))
        if name == "ingestion" and wants_worker:
            components.append(worker_component(config, identity_dir=identity_dir))
    return components


def port_fields_in_use(config: StackConfig) -> list[str]:
    """The config fields naming the ports that the components of ``config`` will bind."""
    fields: list[str] = []
    if config.nats_enabled:
        fields += ["nats_port", "nats_monitor_port"]
    if config.temporal_enabled:
        fields += ["temporal_port", "temporal_http_port", "temporal_metrics_port"]
        if not config.temporal_headless:
            fields.append("temporal_ui_port")
    for name in config.services:
        fields.append(f"{name}_grpc_port")
        if name == "gateway":
            fields.append("gateway_http_port")
    return fields
