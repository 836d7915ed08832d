"""Configuration of the local stack: ports, directories, timeouts and which services run.

One pydantic-settings class, read from ``KS_STACK_*`` environment variables and a ``.env`` file in the
working directory. Every port has a fixed default chosen to stay clear of the standard ones (NATS 4222,
PostgreSQL 5432, Temporal 7233), so two developers' habits do not collide; tests build a config with
random free ports instead (:meth:`StackConfig.with_free_ports`).
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
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
        """A config whose every port is a random free one; other fields as given (or from the environment)."""
        names = cls.port_fields()
        ports = free_ports(len(names))
        for name, port in zip(names, ports, strict=True):
            values.setdefault(name, port)
        return cls(**values)

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
    def nats_url(self) -> str:
        return f"nats://{LOOPBACK}:{self.nats_port}"

    @property
    def temporal_address(self) -> str:
        return f"{LOOPBACK}:{self.temporal_port}"

    @property
    def temporal_ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.temporal_ui_port}"

    @property
    def gateway_url(self) -> str:
        return f"http://{LOOPBACK}:{self.gateway_http_port}"
