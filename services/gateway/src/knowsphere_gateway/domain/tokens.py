"""API tokens: minted, shown once, kept only as a keyed hash; scoped to a tenant and a role; expiring;
revocable; their last use recorded in batches.

A token is ``ks_`` and 43 URL-safe characters (256 random bits). The store keeps HMAC-SHA256(key,
token), never the token: a token is high-entropy, so a slow password hash (argon2) would add no
protection against guessing and would cost tens of milliseconds of CPU on every request; a plain
SHA-256 would let anyone holding a copy of the database check candidate tokens offline, which the
server-side key prevents. The hash is also the lookup key, so authenticating is one indexed read.

The last-used time is held in memory and written for all tokens at once every
``KS_GATEWAY_TOKEN_LAST_USED_FLUSH_SECONDS`` (and at shutdown), not once per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

import structlog

from knowsphere_runtime.identity import Identity

log = structlog.get_logger(__name__)

TOKEN_PREFIX = "ks_"
TOKEN_RANDOM_BYTES = 32
TOKEN_ID_PREFIX = "tok_"
DEFAULT_TOKEN_TTL_DAYS = 90  # a token made without an expiry
MAX_TOKEN_TTL_DAYS = 365  # the longest expiry the API grants


class Role(StrEnum):
    """What a caller may do in its tenant; each role may do what the ones below it may."""

    READ_ONLY = "read-only"  # read and search
    MEMBER = "member"  # also chat, upload, own sessions
    ADMIN = "admin"  # also knowledge bases, models, agents and tokens

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def allows(self, needed: Role) -> bool:
        return self.rank >= needed.rank


@dataclass(frozen=True)
class TokenRecord:
    """A token as stored: everything but the token itself."""

    id: str
    tenant_id: str
    user_id: str
    application_id: str
    name: str
    role: Role
    token_hash: str
    created_by: str
    create_time: datetime
    expire_time: datetime
    revoke_time: datetime | None = None
    last_used_time: datetime | None = None

    @property
    def identity(self) -> Identity:
        return Identity(self.tenant_id, self.user_id)


class TokenStore(Protocol):
    """Where tokens are kept; every read and change but the hash lookup is scoped to a tenant."""

    async def add(self, record: TokenRecord) -> None: ...

    async def find_by_hash(self, token_hash: str) -> TokenRecord | None: ...

    async def get(self, tenant_id: str, token_id: str) -> TokenRecord | None: ...

    async def list(self, tenant_id: str) -> list[TokenRecord]: ...

    async def revoke(self, tenant_id: str, token_id: str, when: datetime) -> TokenRecord | None:
        """Marks the token revoked (a revoked one keeps its first revoke time); None if the tenant has
        no such token."""
        ...

    async def revoke_for_application(self, tenant_id: str, application_id: str, when: datetime) -> int:
        """Revokes every unrevoked token of the tenant's application; how many."""
        ...

    async def record_last_used(self, times: Mapping[str, datetime]) -> None:
        """Sets each token's last-used time, in one transaction."""
        ...


class TokenRefused(Exception):
    """The token cannot be used; the message says why, for the caller who holds it."""


class TokenHasher:
    """HMAC-SHA256 of tokens with the server's key."""

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("the token hash key is empty")
        self._key = key

    def hash(self, token: str) -> str:
        return hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()


def mint_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_RANDOM_BYTES)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class IssuedToken:
    """A new token: the only time its text exists outside the caller's hands."""

    token: str
    record: TokenRecord


class TokenService:
    """Issues, checks, lists and revokes tokens over a :class:`TokenStore`."""

    def __init__(
        self, store: TokenStore, hasher: TokenHasher, *, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.store = store
        self._hasher = hasher
        self._clock = clock
        self._last_used: dict[str, datetime] = {}

    async def issue(
        self,
        identity: Identity,
        role: Role,
        *,
        name: str,
        ttl: timedelta,
        application_id: str = "",
        created_by: str = "",
    ) -> IssuedToken:
        token = mint_token()
        now = self._clock()
        record = TokenRecord(
            id=TOKEN_ID_PREFIX + secrets.token_hex(8),
            tenant_id=identity.tenant_id,
            user_id=identity.user_id,
            application_id=application_id,
            name=name,
            role=role,
            token_hash=self._hasher.hash(token),
            created_by=created_by,
            create_time=now,
            expire_time=now + ttl,
        )
        await self.store.add(record)
        return IssuedToken(token, record)

    async def authenticate(self, token: str) -> TokenRecord:
        """The record of a usable token (its use noted for the next batch); :class:`TokenRefused`
        saying why for any other."""
        record = await self.store.find_by_hash(self._hasher.hash(token))
        if record is None:
            raise TokenRefused("the token is not known")
        now = self._clock()
        if record.revoke_time is not None:
            raise TokenRefused(f"the token {record.id} has been revoked")
        if record.expire_time <= now:
            raise TokenRefused(f"the token {record.id} expired at {record.expire_time.isoformat()}")
        self._last_used[record.id] = now
        return record

    async def revoke(self, tenant_id: str, token_id: str) -> TokenRecord | None:
        """Revokes the tenant's token at once (None if it has none of that id)."""
        return await self.store.revoke(tenant_id, token_id, self._clock())

    async def revoke_for_application(self, tenant_id: str, application_id: str) -> int:
        """Revokes at once every token of the tenant's application; how many were revoked."""
        return await self.store.revoke_for_application(tenant_id, application_id, self._clock())

    async def flush_last_used(self) -> int:
        """Writes the last-used times noted since the previous flush in one batch; how many."""
        pending, self._last_used = self._last_used, {}
        if pending:
            try:
                await self.store.record_last_used(pending)
            except BaseException:
                # Not lost: the next flush tries again (a newer use wins).
                self._last_used = {**pending, **self._last_used}
                raise
        return len(pending)


class LastUsedFlusher:
    """A lifecycle component writing the tokens' last-used times every ``interval`` seconds and once more
    when it stops. Stopping lets a write in progress finish (within the grace, when one is given) rather
    than cutting it off and writing the same times again."""

    name = "token-last-used"

    def __init__(self, tokens: TokenService, interval: float) -> None:
        self._tokens = tokens
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> object:
        self._task = asyncio.create_task(self._run())
        return None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self._interval)
                return  # stopping: stop() writes what is pending
            try:
                await self._tokens.flush_last_used()
            except Exception:  # a database hiccup: the times stay for the next round
                log.warning("writing the tokens' last-used times failed", exc_info=True)

    async def stop(self, grace: float | None = None) -> None:
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=grace)
            except TimeoutError:  # a write hung past the grace: cut it off (its times stay pending)
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._tokens.flush_last_used()


__all__ = [
    "DEFAULT_TOKEN_TTL_DAYS",
    "MAX_TOKEN_TTL_DAYS",
    "TOKEN_PREFIX",
    "IssuedToken",
    "LastUsedFlusher",
    "Role",
    "TokenHasher",
    "TokenRecord",
    "TokenRefused",
    "TokenService",
    "TokenStore",
    "mint_token",
    "utc_now",
]
