"""Conformance suite for retrieval's ``ChunkStore``: every backend must pass it.

Runs against SQLite (a file per test) always, and against PostgreSQL when one answers at
``KS_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``, trust auth):
each test gets a fresh database ``ks_test_<random>`` that is dropped afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.domain.grep import GrepLimits, plan_grep
from knowsphere_retrieval.domain.ports import (
    ChunkStore,
    DocumentMetadata,
    GrepResult,
    KnowledgeBaseCounts,
    Scope,
    StoredChunk,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
A, B = "tenant-a", "tenant-b"


class Clock:
    """The store's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: Clock, postgres_database: Any
) -> AsyncIterator[ChunkStore]:
    if request.param == "sqlite":
        sql_store = SqlChunkStore(f"sqlite+aiosqlite:///{tmp_path}/chunks.db", clock=clock)
        await sql_store.open()
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("ChunkStore"):
        sql_store = SqlChunkStore(url, clock=clock)
        await sql_store.open()
        try:
            yield sql_store
        finally:
            await sql_store.close()


def chunk(
    chunk_id: str,
    text: str = "",
    *,
    tenant: str = A,
    kb: str = "kb-1",
    doc: str = "doc-1",
    position: int = 0,
    parent: str = "",
    run: str = "run-1",
) -> StoredChunk:
    return StoredChunk(
        chunk_id=chunk_id,
        tenant_id=tenant,
        knowledge_base_id=kb,
        document_id=doc,
        file_name=f"{doc}.pdf",
        text=text or f"text of {chunk_id}",
        parent_id=parent,
        position=position,
        heading_path=("第一章", "Scope"),
        page=position + 1,
        metadata={"content_kind": "paragraph"},
        ingest_run_id=run,
        token_count=7,
    )


def document(
    chunk_ids: list[str], tenant: str = A, doc: str = "doc-1", kb: str = "kb-1"
) -> list[StoredChunk]:
    """One document whose chunks sit at positions 0, 1, 2 … in the given order."""
    return [chunk(cid, tenant=tenant, doc=doc, kb=kb, position=i) for i, cid in enumerate(chunk_ids)]


async def grep(
    store: ChunkStore,
    scope: Scope,
    pattern: str,
    *,
    ignore_case: bool = False,
    context_chars: int = 0,
    max_matches: int = 0,
    limits: GrepLimits | None = None,
) -> GrepResult:
    plan = plan_grep(
        pattern, ignore_case=ignore_case, context_chars=context_chars, max_matches=max_matches, limits=limits
    )
    return await store.grep(scope, plan)


# --- writes and reads -------------------------------------------------------------------------------


async def test_put_then_get_returns_every_field(store):
    full = replace(
        chunk("c-1", "Chunk «中文» text\nwith two lines", parent="p-1"),
        metadata={"content_kind": "table", "lang": "zh"},
    )
    await store.put_chunks([full], {"p-1": "the parent passage"})
    assert await store.get_chunks(A, ["c-1"]) == [full]
    assert await store.get_parents(A, ["p-1"]) == {"p-1": "the parent passage"}


async def test_put_is_idempotent_and_an_unchanged_resend_changes_nothing(store, clock):
    batch = document(["c-0", "c-1", "c-2"])
    await store.put_chunks(batch, {})
    first = await store.get_document_info(A, ["doc-1"])

    clock.now = T0 + timedelta(hours=1)
    await store.put_chunks(batch, {})
    await store.put_chunks(batch, {})
    assert await store.get_chunks(A, ["c-0", "c-1", "c-2"]) == batch
    assert await store.get_document_info(A, ["doc-1"]) == first
    assert first[0].chunk_count == 3 and first[0].last_index_time == T0

    # A changed chunk is replaced, and the document's index time moves.
    changed = replace(batch[1], text="new text", ingest_run_id="run-2")
    await store.put_chunks([changed], {})
    assert await store.get_chunks(A, ["c-1"]) == [changed]
    (info,) = await store.get_document_info(A, ["doc-1"])
    assert info.chunk_count == 3 and info.last_index_time == T0 + timedelta(hours=1)


async def test_a_batch_with_a_bad_chunk_writes_nothing(store):
    bad = chunk("c-bad", "nul \x00 byte")
    with pytest.raises(ValueError, match="text of chunk 'c-bad'"):
        await store.put_chunks([chunk("c-ok"), bad], {"p": "parent"})
    with pytest.raises(ValueError, match="document_id"):
        await store.put_chunks([replace(chunk("c-ok"), document_id="")], {})
    assert await store.get_chunks(A, ["c-ok", "c-bad"]) == []
    assert await store.get_parents(A, ["p"]) == {}


async def test_parents_are_stored_once_and_removed_with_their_last_chunk(store):
    siblings = [chunk(f"c-{i}", parent="p-1", position=i) for i in range(3)]
    await store.put_chunks(siblings, {"p-1": "shared parent"})
    await store.put_chunks([chunk("c-3", parent="p-2", position=3)], {"p-2": "other parent"})
    await store.put_chunks(siblings, {"p-1": "shared parent"})
    assert await store.get_parents(A, ["p-1", "p-2", "p-1", "unknown"]) == {
        "p-1": "shared parent",
        "p-2": "other parent",
    }
    assert await store.knowledge_base_counts(A, ["kb-1"]) == {"kb-1": KnowledgeBaseCounts(1, 4, 2)}
    (info,) = await store.get_document_info(A, ["doc-1"])
    assert info.parent_count == 2

    # The re-ingest keeps c-1 and c-3: p-1 is still used, p-2 is still used.
    await store.put_chunks([replace(siblings[1], ingest_run_id="run-2")], {})
    await store.put_chunks([chunk("c-3", parent="p-2", position=3, run="run-2")], {})
    assert sorted(await store.prune_document(A, "kb-1", "doc-1", "run-2")) == ["c-0", "c-2"]
    assert set(await store.get_parents(A, ["p-1", "p-2"])) == {"p-1", "p-2"}

    assert await store.delete_document(A, "kb-1", "doc-1") == ["c-1", "c-3"]
    assert await store.get_parents(A, ["p-1", "p-2"]) == {}


async def test_get_chunks_keeps_request_order_and_skips_unknown_ids(store):
    await store.put_chunks(document(["c-0", "c-1", "c-2"]), {})
    got = await store.get_chunks(A, ["c-2", "unknown", "c-0", "c-2"])
    assert [c.chunk_id for c in got] == ["c-2", "c-0"]
    assert await store.get_chunks(A, []) == []
    many = [f"missing-{i}" for i in range(1_200)] + ["c-1"]  # more ids than one IN list takes
    assert [c.chunk_id for c in await store.get_chunks(A, many)] == ["c-1"]


async def test_neighbours_returns_the_position_range_in_reading_order(store):
    ids = [f"c-{i}" for i in range(6)]
    batch = document(ids)
    await store.put_chunks(list(reversed(batch)), {})
    await store.put_chunks(document(["other-0", "other-1"], doc="doc-2"), {})
    got = await store.neighbours(A, "doc-1", 2, 4)
    assert [(c.chunk_id, c.position) for c in got] == [("c-2", 2), ("c-3", 3), ("c-4", 4)]
    assert [c.chunk_id for c in await store.neighbours(A, "doc-1", -3, 0)] == ["c-0"]
    assert [c.chunk_id for c in await store.neighbours(A, "doc-1", 5, 99)] == ["c-5"]
    assert await store.neighbours(A, "doc-1", 7, 9) == []
    assert await store.document_chunk_ids(A, "doc-1") == ids


# --- tenant isolation -------------------------------------------------------------------------------


async def test_a_tenant_never_reads_or_deletes_another_tenants_chunks(store):
    await store.put_chunks([chunk("c-1", "secret of A", parent="p-1", position=0)], {"p-1": "A's parent"})
    await store.put_document_info(DocumentMetadata(A, "kb-1", "doc-1", title="A's document"))
    # B uses the same ids for its own data.
    await store.put_chunks([chunk("c-2", "B's own text", tenant=B, kb="kb-b", doc="doc-b")], {})

    assert await store.get_chunks(B, ["c-1"]) == []
    assert await store.get_parents(B, ["p-1"]) == {}
    assert await store.neighbours(B, "doc-1", 0, 10) == []
    assert await store.document_chunk_ids(B, "doc-1") == []
    assert await store.get_document_info(B, ["doc-1"]) == []
    assert await store.knowledge_base_counts(B, ["kb-1"]) == {"kb-1": KnowledgeBaseCounts(0, 0, 0)}
    result = await grep(store, Scope(B, ("kb-1", "kb-b")), "secret|text")
    assert [(m.chunk_id, m.match) for m in result.matches] == [("c-2", "text")]

    assert await store.delete_document(B, "kb-1", "doc-1") == []
    assert await store.prune_document(B, "kb-1", "doc-1", "run-x") == []
    assert await store.delete_knowledge_base(B, "kb-1") == []
    assert [c.text for c in await store.get_chunks(A, ["c-1"])] == ["secret of A"]
    assert await store.get_parents(A, ["p-1"]) == {"p-1": "A's parent"}
    assert len(await store.get_document_info(A, ["doc-1"])) == 1


async def test_the_same_chunk_id_in_two_tenants_is_two_chunks(store):
    await store.put_chunks([chunk("same", "A's text", parent="p")], {"p": "A's parent"})
    await store.put_chunks([chunk("same", "B's text", tenant=B, parent="p")], {"p": "B's parent"})
    assert [c.text for c in await store.get_chunks(A, ["same"])] == ["A's text"]
    assert [c.text for c in await store.get_chunks(B, ["same"])] == ["B's text"]
    assert await store.get_parents(A, ["p"]) == {"p": "A's parent"}
    assert await store.delete_document(B, "kb-1", "doc-1") == ["same"]
    assert [c.text for c in await store.get_chunks(A, ["same"])] == ["A's text"]
    assert await store.get_parents(A, ["p"]) == {"p": "A's parent"}


# --- grep -------------------------------------------------------------------------------------------


async def test_grep_finds_matches_with_context_in_reading_order(store):
    await store.put_chunks(
        [
            chunk("c-b1", "第二份文件提到上海交通大学。", doc="doc-b", position=1),
            chunk("c-a0", "Error E-1042: pump failed. Reset with code E-7.", doc="doc-a", position=0),
            chunk("c-b0", "上海交通大学位于上海，是一所大学。", doc="doc-b", position=0),
            chunk("c-a1", "No codes here.", doc="doc-a", position=1),
        ],
        {},
    )
    scope = Scope(A, ("kb-1",))
    result = await grep(store, scope, r"E-\d+", context_chars=6)
    assert [(m.chunk_id, m.start, m.end, m.match, m.before, m.after) for m in result.matches] == [
        ("c-a0", 6, 12, "E-1042", "Error ", ": pump"),
        ("c-a0", 43, 46, "E-7", " code ", "."),
    ]
    assert not result.truncated and not result.timed_out

    chinese = await grep(store, scope, "上海交通大学", context_chars=3)
    assert [(m.chunk_id, m.start, m.before, m.after) for m in chinese.matches] == [
        ("c-b0", 0, "", "位于上"),
        ("c-b1", 7, "件提到", "。"),
    ]
    match = chinese.matches[0]
    assert (match.document_id, match.knowledge_base_id, match.file_name) == ("doc-b", "kb-1", "doc-b.pdf")
    assert (match.position, match.page, match.heading_path) == (0, 1, ("第一章", "Scope"))


async def test_grep_honours_ignore_case(store):
    await store.put_chunks(document(["c-0", "c-1"]), {})
    await store.put_chunks([chunk("c-0", "an ERROR here"), chunk("c-1", "an error there", position=1)], {})
    scope = Scope(A, ("kb-1",))
    assert [m.chunk_id for m in (await grep(store, scope, "error")).matches] == ["c-1"]
    assert [m.chunk_id for m in (await grep(store, scope, "ERROR")).matches] == ["c-0"]
    assert [m.match for m in (await grep(store, scope, "Error", ignore_case=True)).matches] == [
        "ERROR",
        "error",
    ]


async def test_grep_stays_inside_the_knowledge_bases_and_documents_of_the_scope(store):
    await store.put_chunks(
        [
            chunk("kb1-d1", "needle one", kb="kb-1", doc="d1"),
            chunk("kb1-d2", "needle two", kb="kb-1", doc="d2"),
            chunk("kb2-d3", "needle three", kb="kb-2", doc="d3"),
        ],
        {},
    )

    async def found(scope: Scope) -> list[str]:
        return [m.chunk_id for m in (await grep(store, scope, "needle")).matches]

    assert await found(Scope(A, ("kb-1",))) == ["kb1-d1", "kb1-d2"]
    assert await found(Scope(A, ("kb-1", "kb-2"))) == ["kb1-d1", "kb1-d2", "kb2-d3"]
    assert await found(Scope(A, ("kb-1",), ("d2",))) == ["kb1-d2"]
    assert await found(Scope(A, ("kb-1",), ("d3",))) == []  # d3 is in kb-2
    assert await found(Scope(A, ())) == []


async def test_grep_pages_through_many_chunks_and_stops_at_max_matches(store):
    batch = [chunk(f"c-{i:03d}", f"row {i} value={i * 7}", position=i) for i in range(25)]
    await store.put_chunks(batch, {})
    scope = Scope(A, ("kb-1",))
    small_pages = GrepLimits(page_size=4)

    every = await grep(store, scope, r"value=\d+", limits=small_pages)
    assert [m.chunk_id for m in every.matches] == [c.chunk_id for c in batch]
    assert every.scanned_chunk_count == 25 and not every.truncated

    capped = await grep(store, scope, r"value=\d+", max_matches=10, limits=small_pages)
    assert [m.chunk_id for m in capped.matches] == [c.chunk_id for c in batch[:10]]
    assert capped.truncated and not capped.timed_out

    # A literal every match needs narrows the candidates; the regex still decides.
    narrow = await grep(store, scope, r"value=7\d?$", limits=small_pages)
    assert [m.match for m in narrow.matches] == ["value=7", "value=70", "value=77"]


async def test_grep_reports_a_partial_result_when_the_time_budget_is_spent(store):
    await store.put_chunks(document([f"c-{i}" for i in range(5)]), {})
    result = await grep(store, Scope(A, ("kb-1",)), "text", limits=GrepLimits(time_budget_seconds=1e-9))
    assert result.timed_out
    assert len(result.matches) < 5


# --- deletes and prune ------------------------------------------------------------------------------


async def test_deletes_return_the_removed_chunk_ids(store):
    await store.put_chunks(document(["d1-0", "d1-1"], doc="doc-1"), {})
    await store.put_chunks(document(["d2-0"], doc="doc-2"), {})
    await store.put_chunks(document(["k2-0", "k2-1"], doc="doc-3", kb="kb-2"), {})

    assert await store.delete_document(A, "kb-1", "doc-1") == ["d1-0", "d1-1"]
    assert await store.delete_document(A, "kb-1", "doc-1") == []
    assert await store.delete_document(A, "kb-1", "doc-3") == []  # doc-3 lives in kb-2
    assert await store.get_chunks(A, ["d1-0", "d1-1"]) == []

    assert await store.delete_knowledge_base(A, "kb-2") == ["k2-0", "k2-1"]
    assert await store.delete_knowledge_base(A, "unknown") == []
    assert [c.chunk_id for c in await store.get_chunks(A, ["d2-0", "k2-0"])] == ["d2-0"]
    assert await store.knowledge_base_counts(A, ["kb-1", "kb-2"]) == {
        "kb-1": KnowledgeBaseCounts(1, 1, 0),
        "kb-2": KnowledgeBaseCounts(0, 0, 0),
    }


async def test_prune_removes_only_the_document_chunks_of_other_runs(store):
    await store.put_chunks([chunk(f"old-{i}", position=i, run="run-1") for i in range(3)], {})
    await store.put_chunks([chunk(f"new-{i}", position=i, run="run-2") for i in range(2)], {})
    await store.put_chunks([chunk("elsewhere", doc="doc-2", run="run-1")], {})

    assert await store.prune_document(A, "kb-1", "doc-1", "run-2") == ["old-0", "old-1", "old-2"]
    assert await store.prune_document(A, "kb-1", "doc-1", "run-2") == []
    assert await store.document_chunk_ids(A, "doc-1") == ["new-0", "new-1"]
    assert await store.document_chunk_ids(A, "doc-2") == ["elsewhere"]
    with pytest.raises(ValueError, match="keep_ingest_run_id"):
        await store.prune_document(A, "kb-1", "doc-1", "")


# --- document info ----------------------------------------------------------------------------------


async def test_document_info_round_trip_with_counts(store, clock):
    info = DocumentMetadata(
        tenant_id=A,
        knowledge_base_id="kb-1",
        document_id="doc-1",
        file_name="手册.pdf",
        title="Pump handbook",
        content_type="application/pdf",
        size_bytes=5_000_000_000,
        page_count=120,
        language="zh",
        status=7,
        create_time=T0 - timedelta(days=1),
        metadata={"content_hash": "sha256:abc", "author": "王"},
    )
    await store.put_document_info(info)
    (only_meta,) = await store.get_document_info(A, ["doc-1"])
    assert only_meta.metadata == info
    assert (only_meta.chunk_count, only_meta.parent_count, only_meta.last_index_time) == (0, 0, None)
    assert (only_meta.knowledge_base_id, only_meta.file_name) == ("kb-1", "手册.pdf")

    clock.now = T0 + timedelta(minutes=5)
    await store.put_chunks([chunk(f"c-{i}", parent="p", position=i) for i in range(3)], {"p": "parent"})
    await store.put_chunks([chunk("n-0", doc="no-meta", kb="kb-2")], {})
    replaced = replace(info, title="Pump handbook v2", status=8, create_time=None, metadata={})
    await store.put_document_info(replaced)

    got = await store.get_document_info(A, ["unknown", "no-meta", "doc-1", "no-meta"])
    assert [g.document_id for g in got] == ["no-meta", "doc-1"]
    no_meta, doc = got
    assert no_meta.metadata is None
    assert (no_meta.knowledge_base_id, no_meta.file_name, no_meta.chunk_count) == ("kb-2", "no-meta.pdf", 1)
    assert doc.metadata == replaced
    assert (doc.chunk_count, doc.parent_count) == (3, 1)
    assert doc.last_index_time == T0 + timedelta(minutes=5)

    assert await store.delete_document(A, "kb-1", "doc-1") == ["c-0", "c-1", "c-2"]
    assert await store.get_document_info(A, ["doc-1"]) == []


async def test_deleting_a_knowledge_base_removes_its_document_info(store):
    await store.put_document_info(DocumentMetadata(A, "kb-1", "doc-1"))
    await store.put_document_info(DocumentMetadata(A, "kb-2", "doc-2"))
    assert await store.delete_knowledge_base(A, "kb-1") == []
    assert [g.document_id for g in await store.get_document_info(A, ["doc-1", "doc-2"])] == ["doc-2"]


async def test_several_documents_info_is_stored_in_one_call_replacing_earlier_records(store):
    await store.put_document_info(DocumentMetadata(A, "kb-1", "doc-1", title="old title"))
    await store.put_document_infos(
        [
            DocumentMetadata(A, "kb-1", "doc-1", title="new title", page_count=3),
            DocumentMetadata(A, "kb-1", "doc-2", title="second"),
            DocumentMetadata(B, "kb-9", "doc-3", title="another tenant's"),
        ]
    )
    got = await store.get_document_info(A, ["doc-1", "doc-2", "doc-3"])
    assert [(g.document_id, g.metadata.title) for g in got] == [("doc-1", "new title"), ("doc-2", "second")]
    assert got[0].metadata.page_count == 3
    (other,) = await store.get_document_info(B, ["doc-3"])
    assert other.metadata.title == "another tenant's"
    # One bad record refuses the whole call: nothing of it is stored.
    with pytest.raises(ValueError, match="document_id"):
        await store.put_document_infos(
            [DocumentMetadata(A, "kb-1", "doc-4", title="fine"), DocumentMetadata(A, "kb-1", "")]
        )
    assert await store.get_document_info(A, ["doc-4"]) == []
