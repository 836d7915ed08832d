"""Applications: an orchestrator on a channel. An application names the orchestrator that answers
(a conversation service resource), the platform it is reached through, whether it is switched on, and
its own rate limit, which its API tokens count against on top of their caller's.

The gateway keeps applications itself (the conversation only carries a session's ``application_id`` as
data). Every read and change is scoped to a tenant; a name is unique in its tenant, and the name is what
the OpenAI-compatible API accepts as ``model``.

An application on a WeCom platform also carries its channel settings (``domain.channel_config``):
``platform_config`` the plain ones (CorpID, AgentId …), ``platform_secrets`` the write-only ones (token,
EncodingAESKey, app secret), each encrypted with the gateway's key ring and kept with a masked hint.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final, Protocol

from knowsphere_runtime.secrets import SettingsStore

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
    WEWORK_AIBOT = "wework_aibot"  # a WeCom AI bot: callbacks answered with a streamed message
    WEWORK_TRADITIONAL = "wework_traditional"  # a WeCom self-built app: callbacks, answers sent by API

    @property
    def is_wecom(self) -> bool:
        """Reached through WeCom's callbacks: the application carries channel settings."""
        return self in WECOM_PLATFORMS


WECOM_PLATFORMS: Final = frozenset({Platform.WEWORK_AIBOT, Platform.WEWORK_TRADITIONAL})


@dataclass(frozen=True)
class SealedSecret:
    """A write-only channel secret as stored: its ciphertext (``knowsphere_runtime.secrets``, bound to
    the tenant and to ``application/<id>/<field>``) and a masked hint to recognise it by."""

    ciphertext: str = field(repr=False)
    hint: str


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
    # The channel's plain settings (WeCom: corp_id, agent_id, bot_id, message_format); empty elsewhere.
    platform_config: Mapping[str, str | int] = field(default_factory=dict)
    # The channel's write-only secrets by field (WeCom: token, encoding_aes_key, secret).
    platform_secrets: Mapping[str, SealedSecret] = field(default_factory=dict)


class ApplicationNameTaken(Exception):
    """Another application of the tenant has the name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"name: an application named {name!r} already exists in the tenant")
        self.name = name


class ApplicationStore(SettingsStore, Protocol):
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

    async def claim_message(
        self, tenant_id: str, application_id: str, message_id: str, now: datetime, keep: timedelta
    ) -> bool:
        """True the first time a channel's message id is claimed, False for every later claim (WeCom
        sends a message again when the answer to its callback is late): one message, one turn, across
        replicas. Claims older than ``keep`` are forgotten."""
        ...

    # Key rotation only: the one read across tenants.

    async def list_sealed(self) -> builtins.list[ApplicationRecord]:
        """Every application, of every tenant, that has channel secrets."""
        ...

    async def replace_secrets(
        self,
        tenant_id: str,
        application_id: str,
        old: Mapping[str, SealedSecret],
        new: Mapping[str, SealedSecret],
    ) -> bool:
        """Sets ``new`` only while the stored secrets are still ``old`` (a change meanwhile wins)."""
        ...


def new_application_id() -> str:
    return APPLICATION_ID_PREFIX + secrets.token_hex(8)


__all__ = [
    "APPLICATION_ID_PREFIX",
    "MAX_APPLICATION_BURST",
    "MAX_APPLICATION_RATE_PER_SECOND",
    "MIN_APPLICATION_RATE_PER_SECOND",
    "WECOM_PLATFORMS",
    "ApplicationNameTaken",
    "ApplicationRecord",
    "ApplicationStore",
    "Platform",
    "SealedSecret",
    "new_application_id",
]
