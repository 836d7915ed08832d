"""API tokens at rest (``TokenService`` over ``SqlTokenStore``): one suite, run on SQLite always and on
PostgreSQL when one answers at ``KS_TEST_POSTGRES_URL`` (a fresh database per test, dropped after).

What an operator or a caller notices: the token text is shown once and never stored (the row holds a
keyed hash); an expired or revoked token is refused with the reason; a tenant never sees or revokes
another's tokens; the last-used time appears after the next batch write, not one write per request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from knowsphere_gateway.adapters.tokens_sql import SqlTokenStore, api_tokens
from knowsphere_gateway.domain.tokens import LastUsedFlusher, Role, TokenHasher, TokenRefused, TokenService
from knowsphere_runtime.identity import Identity

KEY = b"token-store-tests-hash-key-0123456789abc"
T0 = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)
ACME = Identity("acme", "alice")
GLOBEX = Identity("globex", "bob")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class CountingStore(SqlTokenStore):
    """The SQL store, counting the batches of last-used times it is asked to write; a write can be held
    at its start until the test lets it go."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.last_used_writes = 0
        self.writing = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def record_last_used(self, times: Mapping[str, datetime]) -> None:
        self.last_used_writes += 1
        self.writing.set()
        await self.release.wait()
        await super().record_last_used(times)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[CountingStore]:
    if request.param == "sqlite":
        sql_store = CountingStore(f"sqlite+aiosqlite:///{tmp_path}/gateway.db")
        await sql_store.open()
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("TokenStore"):
        sql_store = CountingStore(url)
        await sql_store.open()
        try:
            yield sql_store
        finally:
            await sql_store.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tokens(store: CountingStore, clock: Clock) -> TokenService:
    return TokenService(store, TokenHasher(KEY), clock=clock)


async def rows(store: SqlTokenStore) -> list[dict[str, Any]]:
    async with store._db.engine.connect() as conn:
        return [dict(row._mapping) for row in (await conn.execute(select(api_tokens))).all()]


async def test_the_token_is_shown_once_and_only_its_keyed_hash_is_stored(
    tokens: TokenService, store: CountingStore
) -> None:
    issued = await tokens.issue(ACME, Role.ADMIN, name="ci", ttl=timedelta(days=30), created_by="alice")

    assert issued.token.startswith("ks_") and len(issued.token) >= 40
    [row] = await rows(store)
    assert issued.token not in {str(value) for value in row.values()}
    assert row["token_hash"] == hmac.new(KEY, issued.token.encode(), hashlib.sha256).hexdigest()
    assert row["token_hash"] != hashlib.sha256(issued.token.encode()).hexdigest()  # keyed, not plain
    assert (row["tenant_id"], row["user_id"], row["role"]) == ("acme", "alice", "admin")
    assert row["expire_time"] == T0 + timedelta(days=30)
    # Listing never gives the text back, only the record.
    [listed] = await store.list("acme")
    assert listed.id == issued.record.id and not hasattr(listed, "token")


async def test_a_token_authenticates_as_its_tenant_user_and_role(tokens: TokenService) -> None:
    issued = await tokens.issue(
        ACME, Role.READ_ONLY, name="dashboard", ttl=timedelta(days=1), application_id="bi"
    )
    record = await tokens.authenticate(issued.token)
    assert (record.identity, record.role, record.application_id) == (ACME, Role.READ_ONLY, "bi")
    with pytest.raises(TokenRefused, match="not known"):
        await tokens.authenticate(issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B"))


async def test_an_expired_token_is_refused_saying_so(tokens: TokenService, clock: Clock) -> None:
    issued = await tokens.issue(ACME, Role.MEMBER, name="short", ttl=timedelta(hours=1))
    clock.now = T0 + timedelta(minutes=59)
    await tokens.authenticate(issued.token)
    clock.now = T0 + timedelta(hours=1)
    with pytest.raises(TokenRefused, match="expired at 2026-03-04T06:06:07"):
        await tokens.authenticate(issued.token)


async def test_a_revoked_token_is_refused_at_once_and_only_its_tenant_can_revoke_it(
    tokens: TokenService, store: CountingStore, clock: Clock
) -> None:
    issued = await tokens.issue(ACME, Role.MEMBER, name="laptop", ttl=timedelta(days=1))
    assert await tokens.revoke("globex", issued.record.id) is None
    await tokens.authenticate(issued.token)  # still good: another tenant cannot touch it

    clock.now = T0 + timedelta(minutes=5)
    revoked = await tokens.revoke("acme", issued.record.id)
    assert revoked is not None and revoked.revoke_time == T0 + timedelta(minutes=5)
    with pytest.raises(TokenRefused, match="revoked"):
        await tokens.authenticate(issued.token)
    clock.now = T0 + timedelta(minutes=9)
    again = await tokens.revoke("acme", issued.record.id)
    assert again is not None and again.revoke_time == T0 + timedelta(minutes=5)  # the first time stays


async def test_a_tenant_lists_and_reads_only_its_own_tokens(
    tokens: TokenService, store: CountingStore
) -> None:
    first = await tokens.issue(ACME, Role.ADMIN, name="one", ttl=timedelta(days=1))
    theirs = await tokens.issue(GLOBEX, Role.ADMIN, name="theirs", ttl=timedelta(days=1))
    second = await tokens.issue(ACME, Role.MEMBER, name="two", ttl=timedelta(days=1))

    assert {r.id for r in await store.list("acme")} == {first.record.id, second.record.id}
    assert [r.id for r in await store.list("globex")] == [theirs.record.id]
    assert await store.get("acme", theirs.record.id) is None
    assert await store.get("globex", theirs.record.id) is not None


async def test_last_used_is_written_in_one_batch_not_per_request(
    tokens: TokenService, store: CountingStore, clock: Clock
) -> None:
    a = await tokens.issue(ACME, Role.MEMBER, name="a", ttl=timedelta(days=1))
    b = await tokens.issue(GLOBEX, Role.MEMBER, name="b", ttl=timedelta(days=1))
    for minute in range(10):
        clock.now = T0 + timedelta(minutes=minute)
        await tokens.authenticate(a.token)
    await tokens.authenticate(b.token)

    assert store.last_used_writes == 0
    assert [row["last_used_time"] for row in await rows(store)] == [None, None]

    assert await tokens.flush_last_used() == 2
    assert store.last_used_writes == 1
    used = {row["id"]: row["last_used_time"] for row in await rows(store)}
    assert used == {a.record.id: T0 + timedelta(minutes=9), b.record.id: T0 + timedelta(minutes=9)}
    assert await tokens.flush_last_used() == 0 and store.last_used_writes == 1  # nothing new: no write


async def test_an_older_last_used_time_never_overwrites_a_newer_one(
    tokens: TokenService, store: CountingStore
) -> None:
    issued = await tokens.issue(ACME, Role.MEMBER, name="a", ttl=timedelta(days=1))
    await store.record_last_used({issued.record.id: T0 + timedelta(hours=2)})
    await store.record_last_used({issued.record.id: T0 + timedelta(hours=1)})  # another replica, late
    [row] = await rows(store)
    assert row["last_used_time"] == T0 + timedelta(hours=2)


async def test_stopping_during_a_write_lets_it_finish_once(
    tokens: TokenService, store: CountingStore, clock: Clock
) -> None:
    issued = await tokens.issue(ACME, Role.MEMBER, name="a", ttl=timedelta(days=1))
    flusher = LastUsedFlusher(tokens, interval=0.01)
    await flusher.start()
    store.release.clear()  # the periodic write will be held in the middle
    await tokens.authenticate(issued.token)
    await asyncio.wait_for(store.writing.wait(), 10)
    stopping = asyncio.create_task(flusher.stop(grace=10))
    await asyncio.sleep(0.05)
    assert not stopping.done()  # waiting for the write, not cutting it off
    store.release.set()
    await stopping
    assert store.last_used_writes == 1  # written once, not cut off and written again
    [row] = await rows(store)
    assert row["last_used_time"] == T0


async def test_the_flusher_writes_on_its_interval_and_once_more_when_the_gateway_stops(
    tokens: TokenService, store: CountingStore, clock: Clock
) -> None:
    issued = await tokens.issue(ACME, Role.MEMBER, name="a", ttl=timedelta(days=1))
    flusher = LastUsedFlusher(tokens, interval=0.05)
    await flusher.start()
    await tokens.authenticate(issued.token)
    for _ in range(500):  # up to 10 s on a loaded machine
        if store.last_used_writes:
            break
        await asyncio.sleep(0.02)
    assert store.last_used_writes == 1
    await flusher.stop()

    hourly = LastUsedFlusher(tokens, interval=3600)
    await hourly.start()
    clock.now = T0 + timedelta(minutes=1)
    await tokens.authenticate(issued.token)
    await hourly.stop()  # long before its interval: stopping writes what is pending
    assert store.last_used_writes == 2
    [row] = await rows(store)
    assert row["last_used_time"] == T0 + timedelta(minutes=1)
