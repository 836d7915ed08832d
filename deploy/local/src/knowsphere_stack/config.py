"""Configuration of the local stack: ports, directories, timeouts and which services run.

One pydantic-settings class, read from ``KS_STACK_*`` environment variables and a ``.env`` file in the
working directory. Every port has a fixed default chosen to stay clear of the standard ones (NATS 4222,
PostgreSQL 5432, Temporal 7233), so two developers' habits do not collide; tests build a config with
random free ports instead (:meth:`StackConfig.with_free_ports`).

Replicas of a service (``KS_STACK_REPLICAS_<SERVICE>``) and the servers of a NATS cluster
(``KS_STACK_NATS_CLUSTER``) have no port settings of their own: instance ``k`` listens on its first
instance's port plus ``(k - 1) * KS_STACK_REPLICA_PORT_STEP`` (:mod:`knowsphere_stack.layout`).
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "KS_STACK_"

LOOPBACK = "127.0.0.1"
"""Every process of the local stack binds to the loopback interface only."""

SERVICE_NAMES: tuple[str, ...] = (
    "modelhub",
    "retrieval",
    "memory",
    "toolrunner",
    "ingestion",
    "conversation",
    "gateway",
)
"""The KnowSphere services, in start order (they are stopped in the reverse order)."""

INGESTION_WORKER = "ingestion-worker"
"""Component name of the ingestion Temporal worker (``python -m knowsphere_ingestion.worker``)."""

REPLICABLE: tuple[str, ...] = ("modelhub", "retrieval", INGESTION_WORKER, "conversation")
"""The components ``KS_STACK_REPLICAS_<NAME>`` may start several of: the ones whose work is shared
between processes (gRPC calls balanced by their callers, Temporal's task queue, JetStream's work queue).
The others keep state or a port of their own (the gateway's HTTP port, ingestion's uploads in progress)."""
REPLICAS_ENV_PREFIX = "KS_STACK_REPLICAS_"
MAX_REPLICAS = 8
"""Processes of one service on one machine at most: beyond that they only compete for the same cores."""
NATS_CLUSTER_SIZES = (1, 3, 5)
"""A single server, or a cluster with an odd number of servers (JetStream needs a majority: 3 keep
working without one, 5 without two)."""


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port that is free on ``host`` right now (the kernel picks it)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Return ``count`` distinct free TCP ports; all sockets stay open until every port is chosen."""
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


FREE_PORT_ATTEMPTS = 20
"""Tries of :meth:`StackConfig.with_free_ports` to find a layout whose derived ports are free too."""


def _split_list(value: Any) -> Any:
    """Accept ``a,b,c`` as well as a JSON list for list-valued environment variables."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


class StackConfig(BaseSettings):
    """Everything ``ks-stack`` and :class:`~knowsphere_stack.stack.Stack` need to know.

    Each field ``x`` is read from ``KS_STACK_X``; :meth:`env_var` names it for error messages.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
    )

    data_dir: Path = Field(
        default=Path(".data"),
        description="Root of all state: <data>/logs, <data>/run (pid files), <data>/<component>/.",
    )

    nats_port: int = 4322
    nats_monitor_port: int = 8322
    nats_cluster_port: int = Field(
        default=6322, description="Route port of the first NATS server when KS_STACK_NATS_CLUSTER > 1."
    )
    temporal_port: int = 7333
    temporal_ui_port: int = 8333
    temporal_http_port: int = 7343
    temporal_metrics_port: int = 7344

    gateway_grpc_port: int = 7410
    conversation_grpc_port: int = 7411
    retrieval_grpc_port: int = 7412
    ingestion_grpc_port: int = 7413
    memory_grpc_port: int = 7414
    toolrunner_grpc_port: int = 7415
    modelhub_grpc_port: int = 7416
    gateway_http_port: int = 8780

    health_timeout: float = Field(
        default=120.0, gt=0, description="Seconds `up` waits for every health check."
    )
    stop_grace: float = Field(
        default=20.0, ge=0, description="Seconds a child gets after SIGTERM before SIGKILL."
    )

    restart_backoff_initial: float = Field(
        default=1.0, gt=0, description="First restart delay, doubled each crash."
    )
    restart_backoff_max: float = Field(default=30.0, gt=0, description="Longest restart delay.")
    restart_max_crashes: int = Field(
        default=5, ge=1, description="Crashes within the window that mark a failure."
    )
    restart_crash_window: float = Field(
        default=60.0, gt=0, description="Window (s) in which crashes are counted."
    )

    services: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(SERVICE_NAMES),
        description="Services to start (comma-separated in the environment), always in canonical order.",
    )
    nats_enabled: bool = True
    nats_cluster: int = Field(
        default=1,
        description="NATS servers: 1, or a cluster of 3 or 5 (routes on loopback, JetStream on each, "
        "every stream kept by 3 of them).",
    )
    nats_auth: bool = Field(
        default=True,
        description="NATS admits only the services' nkeys, each with its permissions "
        "(knowsphere_stack.nats_auth); false: no authentication.",
    )
    temporal_enabled: bool = True
    temporal_headless: bool = Field(
        default=False, description="Run the Temporal dev server without its web UI."
    )
    ingestion_worker: bool | None = Field(
        default=None,
        description="Also start `python -m knowsphere_ingestion.worker`; None: if the module exists.",
    )

    replicas_modelhub: int = Field(default=1, description="modelhub processes (needs PostgreSQL beyond 1).")
    replicas_retrieval: int = Field(
        default=1, description="retrieval processes (needs server backends beyond 1)."
    )
    replicas_ingestion_worker: int = Field(
        default=1, description="ingestion worker processes polling the same Temporal task queue."
    )
    replicas_conversation: int = Field(
        default=1,
        description="conversation processes sharing the chat work queue (needs PostgreSQL beyond 1).",
    )
    replica_port_step: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Instance k of a replicated service or NATS server listens on the first one's port + "
        "(k - 1) * this.",
    )

    identity_keys_dir: Path | None = Field(
        default=None,
        description="Folder of the services' identity keys (<issuer>.key, trusted/<issuer>.pub); "
        "missing ones are generated. Default: <data_dir>/secrets/identity.",
    )
    tls: bool = Field(
        default=False,
        description="Mutual TLS between the services: a private CA and a certificate per process in "
        "<data_dir>/secrets/tls (knowsphere_stack.tls), generated when missing.",
    )

    service_command: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Replace the command of a service (name -> argv), e.g. with a stand-in in tests.",
    )
    extra_env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables given to every KnowSphere service.",
    )

    def __init__(self, **values: Any) -> None:
        # extra="ignore" lets a shared .env hold other programs' variables, but a misspelt keyword in
        # code must not be ignored silently. Keys starting with "_" are pydantic-settings' own options.
        unknown = sorted(k for k in values if not k.startswith("_") and k not in type(self).model_fields)
        if unknown:
            raise TypeError(f"StackConfig has no field(s) {', '.join(unknown)}")
        super().__init__(**values)

    @field_validator(*(f"replicas_{name.replace('-', '_')}" for name in REPLICABLE), mode="after")
    @classmethod
    def _replicas_in_range(cls, value: int, info: ValidationInfo) -> int:
        if not 1 <= value <= MAX_REPLICAS:
            raise ValueError(
                f"{cls.env_var(str(info.field_name))}={value}: between 1 and {MAX_REPLICAS} processes of a "
                f"service on one machine"
            )
        return value

    @field_validator("nats_cluster", mode="after")
    @classmethod
    def _known_cluster_size(cls, value: int) -> int:
        if value not in NATS_CLUSTER_SIZES:
            clusters = " or ".join(str(size) for size in NATS_CLUSTER_SIZES[1:])
            raise ValueError(
                f"{cls.env_var('nats_cluster')}={value}: NATS runs as 1 server or a cluster of {clusters} "
                f"(an odd number keeps a majority)"
            )
        return value

    @model_validator(mode="after")
    def _no_unknown_replicas(self) -> StackConfig:
        # extra="ignore" would drop KS_STACK_REPLICAS_GATEWAY (or a misspelt service) without a word.
        known = {self.env_var(f"replicas_{name.replace('-', '_')}") for name in REPLICABLE}
        unknown = sorted(k for k in os.environ if k.startswith(REPLICAS_ENV_PREFIX) and k not in known)
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: ks-stack replicates only {', '.join(REPLICABLE)} "
                f"({', '.join(sorted(known))})"
            )
        return self

    @field_validator("data_dir", mode="after")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        return Path(os.path.abspath(value.expanduser()))

    @field_validator("services", mode="before")
    @classmethod
    def _parse_services(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("services", mode="after")
    @classmethod
    def _known_services(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in SERVICE_NAMES]
        if unknown:
            raise ValueError(
                f"unknown service(s) {', '.join(unknown)} in {ENV_PREFIX}SERVICES; "
                f"known services: {', '.join(SERVICE_NAMES)}"
            )
        return [name for name in SERVICE_NAMES if name in value]

    @classmethod
    def env_var(cls, field: str) -> str:
        """The environment variable that sets ``field``."""
        if field not in cls.model_fields:
            raise KeyError(field)
        return f"{ENV_PREFIX}{field.upper()}"

    @classmethod
    def port_fields(cls) -> list[str]:
        return [name for name in cls.model_fields if name.endswith("_port")]

    @classmethod
    def with_free_ports(cls, **values: Any) -> StackConfig:
        """A config whose every port is a random free one; other fields as given (or from the environment).

        The ports of further replicas and NATS servers follow from those (``replica_port_step``): the
        choice is repeated until they are free too and collide with none of the others.
        """
        from knowsphere_stack.layout import derived_ports_free, layout_problems

        names = [name for name in cls.port_fields() if name not in values]
        for _ in range(FREE_PORT_ATTEMPTS):
            ports = free_ports(len(names))
            config = cls(**values, **dict(zip(names, ports, strict=True)))
            if not layout_problems(config) and derived_ports_free(config):
                return config
        return config  # the caller's own ports collide: Stack.start names them

    def replicas(self, component: str) -> int:
        """How many processes of ``component`` this config runs (1 for one that is not replicable)."""
        if component not in REPLICABLE:
            return 1
        return int(getattr(self, f"replicas_{component.replace('-', '_')}"))

    # Derived paths and addresses -------------------------------------------------------------

    @property
    def identity_dir(self) -> Path:
        """Where the services' identity keys are (generated there when missing)."""
        return self.identity_keys_dir or self.data_dir / "secrets" / "identity"

    @property
    def tls_dir(self) -> Path:
        """Where the CA and the certificates for mutual TLS are (with ``tls``)."""
        return self.data_dir / "secrets" / "tls"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"

    def log_path(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def service_data_dir(self, component: str) -> Path:
        return self.data_dir / component

    def grpc_port(self, service: str) -> int:
        if service not in SERVICE_NAMES:
            raise KeyError(f"unknown service {service!r}; known services: {', '.join(SERVICE_NAMES)}")
        return int(getattr(self, f"{service}_grpc_port"))

    def grpc_addr(self, service: str) -> str:
        return f"{LOOPBACK}:{self.grpc_port(service)}"

    @property
    def nats_urls(self) -> list[str]:
        """The client URL of every NATS server (one, or each server of the cluster)."""
        from knowsphere_stack.layout import nats_nodes

        return [f"nats://{LOOPBACK}:{node.port}" for node in nats_nodes(self)]

    @property
    def nats_url(self) -> str:
        """The NATS URL the services get: one server's, or the cluster's comma-separated."""
        return ",".join(self.nats_urls)

    @property
    def temporal_address(self) -> str:
        return f"{LOOPBACK}:{self.temporal_port}"

    @property
    def temporal_ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.temporal_ui_port}"

    @property
    def gateway_url(self) -> str:
        return f"http://{LOOPBACK}:{self.gateway_http_port}"
