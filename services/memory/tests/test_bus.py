"""Document affinity from ``TurnCompleted`` on a real NATS server with JetStream: a durable consumer that
applies each turn once — published twice, delivered out of order, or redelivered after a failure."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from knowsphere_contracts.events import (
    DOCUMENTS_DELETED_STREAM,
    TURN_COMPLETED_STREAM,
    CitedDocument,
    DocumentsDeleted,
    TurnCompleted,
)
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.api.bus import TURN_RECORDER, TurnRecorder, build_bus
from knowsphere_memory.domain.records import CitedDocumentRecord, FrequentDocumentRecord, Owner
from knowsphere_memory.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_telemetry import attributes

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WAIT_SECONDS = 10.0


class FailingFirst:
    """The store, except that its first ``record_citations`` fails (the database briefly away)."""

    def __init__(self, store: SqlMemoryStore) -> None:
        self._store = store
        self.failures = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def record_citations(
        self, owner: Owner, turn_id: str, documents: Sequence[CitedDocumentRecord], cited_at: datetime
    ) -> bool:
        if self.failures == 0:
            self.failures += 1
            raise ConnectionError("database away")
        return await self._store.record_citations(owner, turn_id, documents, cited_at)


@pytest.fixture
def identity() -> Identity:
    # A tenant of its own: the stream is shared by every test of the session.
    return Identity(f"t-{uuid.uuid4().hex[:8]}", "alice")


async def start_consumer(nats_url: str, store: object, tmp_path: Path) -> AsyncIterator[None]:
    broker = build_broker(nats_url, client_name="memory-test")
    bus = build_bus(durable_name=f"memory-test-{uuid.uuid4().hex[:8]}", max_deliver=5, ack_wait_seconds=2)
    broker.include_router(bus.router)
    broker.context.set_global(TURN_RECORDER, TurnRecorder(store, Settings(data_dir=tmp_path)))  # type: ignore[arg-type]
    async with broker:
        await broker.start()
        yield


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlMemoryStore]:
    sql = SqlMemoryStore(f"sqlite+aiosqlite:///{tmp_path}/memory.db")
    await sql.open()
    yield sql
    await sql.close()


async def publish(nats_url: str, identity: Identity, *events: TurnCompleted) -> None:
    """As the conversation publishes, but without Nats-Msg-Id: the stream keeps every copy, as after its
    duplicate window or a publisher retry."""
    publisher = build_broker(nats_url, client_name="conversation-test")
    async with publisher:
        await publisher.connect()
        with bound_identity(identity):
            for event in events:
                await publisher.publish(
                    event.model_dump(mode="json"), TurnCompleted.subject, stream=TURN_COMPLETED_STREAM
                )


def completed(turn: str, *documents: str, at: datetime = T0, outcome: str = "completed") -> TurnCompleted:
    return TurnCompleted(
        turn_id=turn,
        session_id="s1",
        outcome=outcome,  # type: ignore[arg-type]
        cited_documents=[
            CitedDocument(document_id=d, knowledge_base_id="kb-1", file_name=f"{d}.pdf") for d in documents
        ],
        occurred_at=at,
    )


async def frequent(store: SqlMemoryStore, owner: Owner, until: int) -> list[FrequentDocumentRecord]:
    """The owner's documents with a hit, once their hits add up to ``until`` (or the wait ends)."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while True:
        records = (await store.frequent_documents(owner, 1, [], 100, "")).records
        if sum(r.hit_count for r in records) >= until or asyncio.get_running_loop().time() > deadline:
            return records
        await asyncio.sleep(0.05)


async def test_the_same_turn_published_twice_and_out_of_order_counts_once(
    nats_url: str,
    store: SqlMemoryStore,
    identity: Identity,
    tmp_path: Path,
    spans,  # type: ignore[no-untyped-def]
) -> None:
    owner = Owner(identity.tenant_id, identity.user_id)
    async for _ in start_consumer(nats_url, store, tmp_path):
        # t2 (later) arrives before t1, and t2 arrives twice; a cancelled turn counts nothing.
        await publish(
            nats_url,
            identity,
            completed("t2", "d1", "d2", at=T0 + timedelta(hours=1)),
            completed("t2", "d1", "d2", at=T0 + timedelta(hours=1)),
            completed("t1", "d1", at=T0),
            completed("t3", "d1", "d2", outcome="cancelled"),
        )
        records = await frequent(store, owner, until=3)
        await asyncio.sleep(0.5)  # give a wrongly applied duplicate time to show
        records = await frequent(store, owner, until=3)
        assert {r.document_id: r.hit_count for r in records} == {"d1": 2, "d2": 1}
        d1 = next(r for r in records if r.document_id == "d1")
        assert d1.last_cited_time == T0 + timedelta(hours=1)
    # Each delivery is a consumer span saying whether it changed anything.
    recorded = [
        (s.attributes.get(attributes.TURN_ID), s.attributes.get(attributes.MEMORY_TURN_RECORDED))
        for s in spans.get_finished_spans()
        if s.attributes
        and attributes.MEMORY_TURN_RECORDED in s.attributes
        # The stream is shared with other tests of the session: only this test's turns count.
        and s.attributes.get(attributes.TURN_ID) in {"t1", "t2", "t3"}
    ]
    assert sorted(recorded) == [("t1", True), ("t2", False), ("t2", True), ("t3", False)]
    [frequent_doc] = (await store.frequent_documents(owner, 2, [], 10, "")).records
    assert frequent_doc.document_id == "d1"
    # The same turn by another user of the tenant is that user's own.
    assert (await store.frequent_documents(Owner(identity.tenant_id, "bob"), 1, [], 10, "")).records == []


async def test_an_event_redelivered_after_a_failure_is_applied_once(
    nats_url: str, store: SqlMemoryStore, identity: Identity, tmp_path: Path
) -> None:
    owner = Owner(identity.tenant_id, identity.user_id)
    flaky = FailingFirst(store)
    async for _ in start_consumer(nats_url, flaky, tmp_path):
        await publish(nats_url, identity, completed("t1", "d1"))
        records = await frequent(store, owner, until=1)
        await asyncio.sleep(0.5)
        records = await frequent(store, owner, until=1)
    assert flaky.failures == 1
    assert [(r.document_id, r.hit_count) for r in records] == [("d1", 1)]


async def test_the_durable_consumer_catches_up_on_events_published_while_memory_was_down(
    nats_url: str, store: SqlMemoryStore, identity: Identity, tmp_path: Path
) -> None:
    owner = Owner(identity.tenant_id, identity.user_id)
    durable = f"memory-test-{uuid.uuid4().hex[:8]}"

    async def consume() -> AsyncIterator[None]:
        broker = build_broker(nats_url, client_name="memory-test")
        bus = build_bus(durable_name=durable)
        broker.include_router(bus.router)
        broker.context.set_global(TURN_RECORDER, TurnRecorder(store, Settings(data_dir=tmp_path)))
        async with broker:
            await broker.start()
            yield

    async for _ in consume():
        await publish(nats_url, identity, completed("t1", "d1"))
        await frequent(store, owner, until=1)
    await publish(nats_url, identity, completed("t2", "d1"))  # nobody consuming
    async for _ in consume():
        records = await frequent(store, owner, until=2)
    assert [(r.document_id, r.hit_count) for r in records] == [("d1", 2)]


async def test_a_deleted_document_leaves_every_users_frequent_documents(
    nats_url: str, store: SqlMemoryStore, identity: Identity, tmp_path: Path
) -> None:
    owner = Owner(identity.tenant_id, identity.user_id)
    colleague = Identity(identity.tenant_id, "bob")
    async for _ in start_consumer(nats_url, store, tmp_path):
        await publish(nats_url, identity, completed("t1", "d1", "d2"), completed("t2", "d1", "d2"))
        await publish(nats_url, colleague, completed("t3", "d1"), completed("t4", "d1"))
        assert {r.document_id for r in await frequent(store, owner, until=4)} == {"d1", "d2"}
        # Ingestion deleted d1 (its event carries the deleting user's identity, any user of the tenant).
        deleter = build_broker(nats_url, client_name="ingestion-test")
        async with deleter:
            await deleter.connect()
            with bound_identity(colleague):
                event = DocumentsDeleted(knowledge_base_id="kb-1", document_ids=["d1"])
                await deleter.publish(
                    event.model_dump(mode="json"), DocumentsDeleted.subject, stream=DOCUMENTS_DELETED_STREAM
                )
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while any(
            r.document_id == "d1" for r in (await store.frequent_documents(owner, 1, [], 100, "")).records
        ):
            assert asyncio.get_running_loop().time() < deadline, "d1 was not forgotten"
            await asyncio.sleep(0.05)
        bob = Owner(colleague.tenant_id, colleague.user_id)
        assert [r.document_id for r in (await store.frequent_documents(owner, 1, [], 100, "")).records] == [
            "d2"
        ]
        assert (await store.frequent_documents(bob, 1, [], 100, "")).records == []
        # A later citation of the deleted document does not bring it back.
        await publish(nats_url, identity, completed("t5", "d1"))
        await asyncio.sleep(0.5)
        assert [r.document_id for r in (await store.frequent_documents(owner, 1, [], 100, "")).records] == [
            "d2"
        ]
