"""The settings base every service extends.

Each service declares one ``Settings`` class with ``env_prefix="KS_<SERVICE>_"``. Required values
have no default; a missing or malformed one stops the service at start-up with a message that
names the environment variable, instead of failing later in the middle of work.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

S = TypeVar("S", bound=BaseSettings)


class SettingsError(SystemExit):
    """Raised (and exits the process with status 2) when settings cannot be loaded."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ServiceSettings(BaseSettings):
    """Values every service has. Subclasses set ``model_config`` with their own prefix."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(ge=1, le=65535)
    data_dir: Path
    log_level: str = "INFO"
    shutdown_grace_seconds: float = Field(default=20.0, gt=0)
    rpc_timeout_seconds: float = Field(default=10.0, gt=0, description="default unary deadline")
    rpc_stream_timeout_seconds: float = Field(default=600.0, gt=0, description="default stream deadline")

    @property
    def grpc_bind(self) -> str:
        return f"{self.grpc_host}:{self.grpc_port}"


def _is_secret(variable: str) -> bool:
    return any(word in variable for word in ("KEY", "SECRET", "PASSWORD", "TOKEN"))


def describe_errors(cls: type[BaseSettings], error: ValidationError) -> str:
    prefix = str(cls.model_config.get("env_prefix", ""))
    lines = [f"invalid configuration for {cls.__module__}.{cls.__name__}:"]
    for item in error.errors():
        if not item["loc"]:
            # A check across several fields: its input is every setting read (secrets included), so
            # only the check's own message is shown.
            lines.append(f"  {item['msg']}")
            continue
        field = ".".join(str(part) for part in item["loc"])
        # A field read through an alias (e.g. MASTER_KEY) is reported under that exact name.
        variable = (f"{prefix}{field}" if field in cls.model_fields else field).upper()
        if item["type"] == "missing":
            lines.append(f"  {variable} is required but not set")
        elif _is_secret(variable) or isinstance(item.get("input"), dict | list):
            lines.append(f"  {variable} (value hidden): {item['msg']}")
        else:
            lines.append(f"  {variable}={item.get('input')!r}: {item['msg']}")
    return "\n".join(lines)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """Build ``cls`` from the environment; exit with a clear message if a value is missing or bad."""
    try:
        return cls(**overrides)
    except ValidationError as error:
        message = describe_errors(cls, error)
        print(message, file=sys.stderr)
        raise SettingsError(message) from None
