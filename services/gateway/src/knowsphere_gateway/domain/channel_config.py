"""An application's channel settings (``platform_config``) for the WeCom platforms: which fields each
platform takes, their forms, and the write-only ones kept encrypted.

=====================  ============================================================  ===================
platform               fields (``*`` required)                                        secret (write-only)
=====================  ============================================================  ===================
``wework_traditional``  corp_id*, agent_id*, token*, encoding_aes_key*, secret*,       token,
                        message_format (``text`` default, or ``markdown``)            encoding_aes_key,
                                                                                      secret
``wework_aibot``        token*, encoding_aes_key*, bot_id                              token,
                                                                                      encoding_aes_key
=====================  ============================================================  ===================

The forms are WeCom's: a token is 3-32 letters and digits, an EncodingAESKey 43 characters of base64
(32 bytes), a CorpID and a bot id letters, digits, ``_`` and ``-``. A bad value is a
:class:`ChannelConfigError` naming ``platform_config.<field>`` and the rule, never the value.

Secrets are sealed with the gateway's key ring (``knowsphere_runtime.secrets``) under the record id
``application/<application id>/<field>`` and the tenant, so a ciphertext copied to another application,
another field or another tenant does not decrypt. What is shown of them is a masked hint.
A change of settings (``merged``) keeps what it does not name; a change of platform starts afresh.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from knowsphere_gateway.domain.applications import (
    ApplicationRecord,
    ApplicationStore,
    Platform,
    SealedSecret,
)
from knowsphere_gateway.domain.wecom import aes_key_of
from knowsphere_runtime.secrets import (
    NOTHING_ROTATED,
    KeyRing,
    RotationReport,
    SecretError,
    SecretFailure,
    SecretScope,
    mask,
    verify_master_key,
)

MAX_AGENT_ID: Final = 2**31 - 1
MESSAGE_FORMATS: Final = ("text", "markdown")
DEFAULT_MESSAGE_FORMAT: Final = "text"

_TOKEN = re.compile(r"[A-Za-z0-9]{3,32}")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")
_BOT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_APP_SECRET = re.compile(r"[\x21-\x7e]{8,128}")  # printable ASCII without spaces


def _token(value: Any) -> str | None:
    return None if isinstance(value, str) and _TOKEN.fullmatch(value) else "must be 3-32 letters and digits"


def _encoding_aes_key(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    try:
        aes_key_of(value)
    except ValueError as error:
        return str(error)
    return None


def _identifier(rule: re.Pattern[str], what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if isinstance(value, str) and rule.fullmatch(value) else what

    return check


def _agent_id(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_AGENT_ID
    return None if ok else f"must be the application's AgentId, an integer 1-{MAX_AGENT_ID}"


def _app_secret(value: Any) -> str | None:
    ok = isinstance(value, str) and _APP_SECRET.fullmatch(value)
    return None if ok else "must be the application's Secret: 8-128 printable characters without spaces"


def _message_format(value: Any) -> str | None:
    return None if value in MESSAGE_FORMATS else f"must be one of {', '.join(MESSAGE_FORMATS)}"


@dataclass(frozen=True)
class FieldRule:
    name: str
    required: bool
    secret: bool
    check: Callable[[Any], str | None]
    """The problem with a value (None: fine), said without the value."""


FIELDS: Final[Mapping[Platform, tuple[FieldRule, ...]]] = {
    Platform.WEWORK_TRADITIONAL: (
        FieldRule(
            "corp_id",
            True,
            False,
            _identifier(_IDENTIFIER, "must be the CorpID: 1-64 letters, digits, _ and -"),
        ),
        FieldRule("agent_id", True, False, _agent_id),
        FieldRule("token", True, True, _token),
        FieldRule("encoding_aes_key", True, True, _encoding_aes_key),
        FieldRule("secret", True, True, _app_secret),
        FieldRule("message_format", False, False, _message_format),
    ),
    Platform.WEWORK_AIBOT: (
        FieldRule("token", True, True, _token),
        FieldRule("encoding_aes_key", True, True, _encoding_aes_key),
        FieldRule(
            "bot_id",
            False,
            False,
            _identifier(_BOT_ID, "must be the bot's id: 1-128 letters, digits, _ and -"),
        ),
    ),
}
"""The channel settings of each platform that has them."""


class ChannelConfigError(ValueError):
    """A ``platform_config`` that does not fit its platform; ``field`` names the key at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class MasterKeyMissing(Exception):
    """Channel secrets cannot be stored or read: the gateway has no MASTER_KEY."""

    def __init__(self) -> None:
        super().__init__(
            "MASTER_KEY is not configured: the gateway keeps WeCom channel secrets encrypted with it. Set "
            "MASTER_KEY (32 random bytes in base64, or a passphrase of 16 characters or more) and restart"
        )


@dataclass(frozen=True)
class ChannelSettings:
    """A checked ``platform_config``: the plain fields and the secrets in plaintext (to be sealed)."""

    public: dict[str, str | int]
    secrets: dict[str, str]


def _field_name(name: str) -> str:
    return f"platform_config.{name}"


def check_config(
    platform: Platform,
    given: Mapping[str, Any],
    kept_public: Mapping[str, str | int] | None = None,
    kept_secrets: frozenset[str] = frozenset(),
) -> ChannelSettings:
    """The settings ``given`` for ``platform`` (``None`` values are not given), on top of what is kept
    (a change names only what changes). Raises :class:`ChannelConfigError` for a field the platform
    does not take, a value of the wrong form, or a required field neither given nor kept."""
    given = {name: value for name, value in given.items() if value is not None}
    rules = FIELDS.get(platform)
    if rules is None:
        if given:
            raise ChannelConfigError(
                "platform_config",
                f"platform {platform} takes no channel settings; only wework_traditional and wework_aibot do",
            )
        return ChannelSettings({}, {})
    known = {rule.name: rule for rule in rules}
    for name in sorted(given):
        if name not in known:
            raise ChannelConfigError(
                _field_name(name), f"not a setting of {platform} (it takes {', '.join(known)})"
            )
    public: dict[str, str | int] = {}
    secrets: dict[str, str] = {}
    kept = dict(kept_public or {})
    for rule in rules:
        if rule.name in given:
            problem = rule.check(given[rule.name])
            if problem is not None:
                raise ChannelConfigError(_field_name(rule.name), problem)
            if rule.secret:
                secrets[rule.name] = given[rule.name]
            else:
                public[rule.name] = given[rule.name]
        elif rule.secret and rule.name in kept_secrets:
            continue
        elif not rule.secret and rule.name in kept:
            public[rule.name] = kept[rule.name]
        elif rule.required:
            raise ChannelConfigError(_field_name(rule.name), f"required for platform {platform}")
    return ChannelSettings(public, secrets)


def record_id(application_id: str, field: str) -> str:
    """The record a channel secret is bound to (its ciphertext decrypts for no other)."""
    return f"application/{application_id}/{field}"


class ChannelSecrets:
    """Seals and opens applications' channel secrets with the gateway's key ring (None: no MASTER_KEY,
    and no WeCom application can be stored or answered)."""

    def __init__(self, ring: KeyRing | None) -> None:
        self._ring = ring

    @property
    def available(self) -> bool:
        return self._ring is not None

    def _keys(self) -> KeyRing:
        if self._ring is None:
            raise MasterKeyMissing()
        return self._ring

    def seal(
        self, tenant_id: str, application_id: str, secrets: Mapping[str, str]
    ) -> dict[str, SealedSecret]:
        if not secrets:
            return {}
        ring = self._keys()
        return {
            name: SealedSecret(
                ring.encrypt(
                    value, SecretScope(tenant_id=tenant_id, record_id=record_id(application_id, name))
                ),
                mask(value),
            )
            for name, value in secrets.items()
        }

    def open(self, application: ApplicationRecord, field: str) -> str:
        """A secret of ``application`` in plaintext; :class:`MasterKeyMissing`, ``KeyError`` for one it
        does not have, or ``SecretError`` for one that does not decrypt for it."""
        sealed = application.platform_secrets[field]
        scope = SecretScope(tenant_id=application.tenant_id, record_id=record_id(application.id, field))
        return self._keys().decrypt(sealed.ciphertext, scope)

    async def verify(self, store: ApplicationStore) -> RotationReport:
        """The start-up check of MASTER_KEY against what this gateway stored (``verify_master_key``):
        unlocks a passphrase ring with the installation's salt, refuses a wrong key, and re-encrypts
        every channel secret made with a previous key or format. Nothing to check without a ring."""
        if self._ring is None:
            return NOTHING_ROTATED
        ring = self._ring
        return await verify_master_key(store, ring, lambda: rotate(store, ring), owner="this gateway")


async def rotate(store: ApplicationStore, ring: KeyRing) -> RotationReport:
    """Rewrites every channel secret that is not ``v2`` under the current key; an application changed
    meanwhile keeps its change (the swap happens only while the stored secrets are those read)."""
    rotated = 0
    undecryptable: list[tuple[str, str]] = []
    rejected: list[tuple[str, str]] = []
    for application in await store.list_sealed():
        fresh: dict[str, SealedSecret] = {}
        for field, sealed in application.platform_secrets.items():
            where = record_id(application.id, field)
            scope = SecretScope(tenant_id=application.tenant_id, record_id=where)
            try:
                if not ring.needs_rotation(sealed.ciphertext):
                    fresh[field] = sealed
                    continue
                fresh[field] = SealedSecret(ring.reencrypt(sealed.ciphertext, scope), sealed.hint)
            except SecretError as error:
                fresh[field] = sealed
                if error.failure is SecretFailure.UNKNOWN_KEY:
                    undecryptable.append((where, error.key_id))
                else:
                    rejected.append((where, str(error)))
        if fresh != dict(application.platform_secrets):
            replaced = await store.replace_secrets(
                application.tenant_id, application.id, application.platform_secrets, fresh
            )
            rotated += sum(fresh[f] != application.platform_secrets[f] for f in fresh) if replaced else 0
    return RotationReport(rotated=rotated, undecryptable=undecryptable, rejected=rejected)


__all__ = [
    "DEFAULT_MESSAGE_FORMAT",
    "FIELDS",
    "MESSAGE_FORMATS",
    "ChannelConfigError",
    "ChannelSecrets",
    "ChannelSettings",
    "FieldRule",
    "MasterKeyMissing",
    "check_config",
    "record_id",
    "rotate",
]
