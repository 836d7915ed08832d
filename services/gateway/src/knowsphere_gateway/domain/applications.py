"""Applications: an orchestrator on a channel. An application names the orchestrator that answers
(a conversation service resource), the platform it is reached through, whether it is switched on, and
its own rate limit, which its API tokens count against on top of their caller's.

The gateway keeps applications itself (the conversation only carries a session's ``application_id`` as
data). Every read and change is scoped to a tenant; a name is unique in its tenant, and the name is what
the OpenAI-compatible API accepts as ``model``.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, Protocol

APPLICATION_ID_PREFIX: Final = "app_"
MIN_APPLICATION_RATE_PER_SECOND: Final = 0.001
"""The lowest ``rate_limit_per_second``: one request per about 17 minutes (a smaller rate's wait could
not be said in a ``Retry-After``)."""
MAX_APPLICATION_RATE_PER_SECOND: Final = 10_000.0
"""The highest ``rate_limit_per_second`` an application may have."""
MAX_APPLICATION_BURST: Final = 100_000
"""The highest ``rate_limit_burst`` an application may have."""


class Platform(StrEnum):
    """The channel an application is reached through."""

    WEBCLIENT = "webclient"  # the web client
    API_SERVICE = "api_service"  # the HTTP API with the application's tokens
    WEWORK_AIBOT = "wework_aibot"  # a WeCom AI bot (its callback endpoint is not built yet)
    WEWORK_TRADITIONAL = "wework_traditional"  # a WeCom self-built app (not built yet)

    @property
    def implemented(self) -> bool:
        return self in IMPLEMENTED_PLATFORMS


IMPLEMENTED_PLATFORMS: Final = frozenset({Platform.WEBCLIENT, Platform.API_SERVICE})


@dataclass(frozen=True)
class ApplicationRecord:
    """An application as stored."""

    id: str
    tenant_id: str
    name: str
    display_name: str
    platform: Platform
    orchestrator_id: str
    active: bool
    rate_limit_per_second: float
    rate_limit_burst: int
    created_by: str
    create_time: datetime
    update_time: datetime


class ApplicationNameTaken(Exception):
    """Another application of the tenant has the name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"name: an application named {name!r} already exists in the tenant")
        self.name = name


class ApplicationStore(Protocol):
    """Where applications are kept; every read and change is scoped to a tenant."""

    async def add(self, record: ApplicationRecord) -> None:
        """Raises :class:`ApplicationNameTaken` when the tenant has an application of that name."""
        ...

    async def get(self, tenant_id: str, application_id: str) -> ApplicationRecord | None: ...

    async def get_by_name(self, tenant_id: str, name: str) -> ApplicationRecord | None: ...

    async def list(self, tenant_id: str) -> list[ApplicationRecord]:
        """The tenant's applications by name."""
        ...

    async def update(
        self, tenant_id: str, application_id: str, changes: Mapping[str, Any]
    ) -> ApplicationRecord | None:
        """Sets the given fields (None: the tenant has no such application); raises
        :class:`ApplicationNameTaken` for a name already taken."""
        ...

    async def delete(self, tenant_id: str, application_id: str) -> bool:
        """False when the tenant has no such application."""
        ...


def new_application_id() -> str:
    return APPLICATION_ID_PREFIX + secrets.token_hex(8)


__all__ = [
    "APPLICATION_ID_PREFIX",
    "IMPLEMENTED_PLATFORMS",
    "MAX_APPLICATION_BURST",
    "MAX_APPLICATION_RATE_PER_SECOND",
    "MIN_APPLICATION_RATE_PER_SECOND",
    "ApplicationNameTaken",
    "ApplicationRecord",
    "ApplicationStore",
    "Platform",
    "new_application_id",
]
