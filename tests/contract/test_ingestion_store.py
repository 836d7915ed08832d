"""Conformance suite for ingestion's ``IngestionStore``: every backend must pass it.

Runs against SQLite (a file per test) always, and against PostgreSQL when one answers at
``KS_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``, trust auth):
each test gets a fresh database ``ks_test_<random>`` that is dropped afterwards. With
``KS_TEST_REQUIRE_POSTGRES=1`` (CI) an unreachable PostgreSQL fails the PostgreSQL variants instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from knowsphere_contracts.vocabulary import ChunkingStrategy, DocumentStatus, IngestionStage, MigrationState
from knowsphere_ingestion.adapters.store import (
    DuplicateContent,
    DuplicateName,
    IngestionStore,
)
from knowsphere_ingestion.adapters.store_tables import documents, knowledge_bases
from knowsphere_ingestion.domain.records import (
    ChunkingSettings,
    Document,
    Failure,
    KnowledgeBase,
    Migration,
    Progress,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
A, B = "tenant-a", "tenant-b"


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[IngestionStore]:
    if request.param == "sqlite":
        sql_store = IngestionStore(f"sqlite+aiosqlite:///{tmp_path}/ingestion.db")
        await sql_store.open()
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("IngestionStore"):
        sql_store = IngestionStore(url)
        await sql_store.open()
        try:
            yield sql_store
        finally:
            await sql_store.close()


def kb(kb_id: str, name: str = "", *, tenant: str = A, at: datetime = T0) -> KnowledgeBase:
    return KnowledgeBase(
        id=kb_id,
        tenant_id=tenant,
        name=name or f"name of {kb_id}",
        description=f"about {kb_id}",
        embedding_model_id="builtin-minilm",
        embedding_dimension=384,
        chunking=ChunkingSettings(ChunkingStrategy.PARENT_CHILD, child_size_tokens=128),
        graph_enabled=True,
        language_hint="de",
        create_time=at,
        update_time=at,
    )


def doc(
    doc_id: str,
    *,
    tenant: str = A,
    kb_id: str = "kb-1",
    content: str = "",
    at: datetime = T0,
    updated: datetime | None = None,
    run: str = "run-1",
    size: int = 1000,
) -> Document:
    return Document(
        id=doc_id,
        tenant_id=tenant,
        knowledge_base_id=kb_id,
        file_name=f"{doc_id}.pdf",
        content_type="application/pdf",
        size_bytes=size,
        content_sha256=(content or doc_id).encode().hex().ljust(64, "0")[:64],
        blob_key=f"t/{tenant}/kb/{kb_id}/doc/{doc_id}/file",
        status=DocumentStatus.QUEUED,
        create_time=at,
        update_time=updated or at,
        ingest_run_id=run,
        progress=Progress(percent=0.0, pages_total=3),
        metadata={"source": "upload"},
    )


async def current(store: IngestionStore, document_id: str, tenant: str = A) -> Document:
    found = await store.get_document(tenant, document_id, include_deleting=True)
    assert found is not None, document_id
    return found


# --- knowledge bases ---------------------------------------------------------------------------------


async def test_a_knowledge_base_reads_back_as_written_and_lists_by_name_in_pages(
    store: IngestionStore,
) -> None:
    for kb_id, name in [("kb-c", "charlie"), ("kb-a", "alpha"), ("kb-d", "delta"), ("kb-b", "bravo")]:
        await store.create_kb(kb(kb_id, name))
    await store.create_kb(kb("kb-other", "aardvark", tenant=B))

    assert await store.get_kb(A, "kb-c") == kb("kb-c", "charlie")
    fetched = await store.get_kb(A, "kb-c")
    assert fetched is not None
    assert type(fetched.chunking.strategy) is ChunkingStrategy
    assert fetched.chunking.strategy == ChunkingStrategy.PARENT_CHILD
    assert await store.get_kb(A, "kb-missing") is None

    first = await store.list_kbs(A, 2, None)
    second = await store.list_kbs(A, 2, first[-1].name)
    rest = await store.list_kbs(A, 2, second[-1].name)
    assert [k.name for k in first] == ["alpha", "bravo"]
    assert [k.name for k in second] == ["charlie", "delta"]
    assert rest == []
    assert [k.name for k in await store.list_kbs(B, 10, None)] == ["aardvark"]


async def test_names_are_unique_per_tenant(store: IngestionStore) -> None:
    await store.create_kb(kb("kb-1", "manuals"))
    await store.create_kb(kb("kb-2", "reports"))

    with pytest.raises(DuplicateName):
        await store.create_kb(kb("kb-3", "manuals"))
    await store.create_kb(kb("kb-4", "manuals", tenant=B))  # another tenant may use the name
    with pytest.raises(DuplicateName):
        await store.update_kb(A, "kb-2", name="manuals")

    assert await store.get_kb(A, "kb-3") is None
    assert [(k.id, k.name) for k in await store.list_kbs(A, 10, None)] == [
        ("kb-1", "manuals"),
        ("kb-2", "reports"),
    ]
    assert [(k.id, k.name) for k in await store.list_kbs(B, 10, None)] == [("kb-4", "manuals")]


async def test_update_kb_changes_the_fields_and_types_the_migration(store: IngestionStore) -> None:
    await store.create_kb(kb("kb-1"))
    migration = Migration(
        from_model_id="builtin-minilm",
        to_model_id="e5-large",
        state="running",  # type: ignore[arg-type]  # callers may still write the plain word
        to_dimension=1024,
        documents_total=7,
        start_time=T0,
    )

    updated = await store.update_kb(
        A,
        "kb-1",
        description="new words",
        chunking=ChunkingSettings(ChunkingStrategy.HEADING, chunk_size_tokens=400),
        migration=migration,
    )

    assert updated is not None
    assert updated == await store.get_kb(A, "kb-1")
    assert updated.description == "new words"
    assert updated.chunking == ChunkingSettings(ChunkingStrategy.HEADING, chunk_size_tokens=400)
    assert updated.update_time > T0
    assert updated.create_time == T0
    assert updated.migration == replace(migration, state=MigrationState.RUNNING)
    assert updated.migration is not None
    assert type(updated.migration.state) is MigrationState

    done = await store.update_kb(
        A, "kb-1", migration=replace(migration, state=MigrationState.COMPLETED, documents_done=7, end_time=T0)
    )
    assert done is not None and done.migration is not None
    assert (done.migration.state, done.migration.documents_done) == (MigrationState.COMPLETED, 7)
    cleared = await store.update_kb(A, "kb-1", migration=None)
    assert cleared is not None and cleared.migration is None
    assert await store.update_kb(A, "kb-missing", description="x") is None


async def test_rows_written_before_the_shared_vocabulary_still_load(store: IngestionStore) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(
            knowledge_bases.insert().values(
                id="kb-old",
                tenant_id=A,
                name="old",
                description="",
                embedding_model_id="builtin-minilm",
                embedding_dimension=384,
                chunking={"strategy": "headings", "chunk_size_tokens": 300},
                graph_enabled=False,
                language_hint="",
                migration=None,
                create_time=T0,
                update_time=T0,
            )
        )
    await store.create_document(doc("doc-old", kb_id="kb-old"))
    async with store.engine.begin() as conn:
        await conn.execute(
            documents.update()
            .where(documents.c.id == "doc-old")
            .values(
                status="failed",
                failure={"stage": "", "code": "blob_missing", "reason": "gone", "attempts": 1, "time": None},
                warnings=[{"stage": "pondering", "code": "odd", "reason": "a newer writer's stage"}],
            )
        )

    old_kb = await store.get_kb(A, "kb-old")
    old_doc = await store.get_document(A, "doc-old")

    assert old_kb is not None
    assert old_kb.chunking == ChunkingSettings(ChunkingStrategy.HEADING, chunk_size_tokens=300)
    assert old_doc is not None
    assert old_doc.status is DocumentStatus.FAILED
    assert old_doc.failure == Failure(stage=None, code="blob_missing", reason="gone", attempts=1, time=None)
    assert old_doc.warnings == (Failure(stage=None, code="odd", reason="a newer writer's stage"),)


# --- tenants -----------------------------------------------------------------------------------------


async def test_another_tenants_ids_behave_exactly_like_unknown_ones(store: IngestionStore) -> None:
    await store.create_kb(kb("kb-1", "mine"))
    await store.create_document(doc("doc-1", content="shared text"))
    await store.create_document(doc("doc-2"))
    await store.finish_stages(A, "parse", [("doc-1", "run-1", 2.0, {"title": "Mine"})])
    kb_before = await store.get_kb(A, "kb-1")
    docs_before = [await current(store, "doc-1"), await current(store, "doc-2")]
    sha = docs_before[0].content_sha256
    every_status = list(DocumentStatus)

    calls: dict[str, Callable[[str, str, str], Awaitable[Any]]] = {
        "get_kb": lambda k, d, r: store.get_kb(B, k),
        "update_kb": lambda k, d, r: store.update_kb(B, k, name="taken over", description="x"),
        "delete_kb": lambda k, d, r: store.delete_kb(B, k),
        "find_by_content": lambda k, d, r: store.find_by_content(B, k, sha),
        "get_document": lambda k, d, r: store.get_document(B, d, include_deleting=True),
        "get_documents": lambda k, d, r: store.get_documents(B, [d]),
        "list_documents": lambda k, d, r: store.list_documents(B, k, statuses=[], limit=10, after=None),
        "kb_documents": lambda k, d, r: store.kb_documents(B, k, every_status),
        "update_document": lambda k, d, r: store.update_document(B, d, status="failed", title="x"),
        "guarded_update": lambda k, d, r: store.update_document(B, d, run_id=r, status="ready"),
        "set_stage": lambda k, d, r: store.set_stage(B, [(d, r, Progress(percent=50.0))], "embedding"),
        "finish_stages": lambda k, d, r: store.finish_stages(B, "chunk", [(d, r, 1.0, {"chunk_count": 9})]),
        "run_size": lambda k, d, r: store.run_size(B, r),
        "stage_seconds": lambda k, d, r: store.stage_seconds(B, k),
        "mark_deleting": lambda k, d, r: store.mark_deleting(B, d),
        "purge_document": lambda k, d, r: store.purge_document(B, d),
        "purge_kb_documents": lambda k, d, r: store.purge_kb_documents(B, k),
    }
    nothing: dict[str, Any] = {
        "get_kb": None,
        "update_kb": None,
        "delete_kb": False,
        "find_by_content": None,
        "get_document": None,
        "get_documents": [],
        "list_documents": [],
        "kb_documents": [],
        "update_document": None,
        "guarded_update": None,
        "set_stage": None,
        "finish_stages": set(),
        "run_size": 0,
        "stage_seconds": [],
        "mark_deleting": None,
        "purge_document": None,
        "purge_kb_documents": None,
    }
    for name, call in calls.items():
        foreign = await call("kb-1", "doc-1", "run-1")
        unknown = await call("kb-nowhere", "doc-nowhere", "run-nowhere")
        assert foreign == unknown == nothing[name], name

    assert await store.list_kbs(B, 10, None) == []
    assert await store.get_kb(A, "kb-1") == kb_before
    assert [await current(store, "doc-1"), await current(store, "doc-2")] == docs_before
    assert [d.id for d in await store.list_documents(A, "kb-1", statuses=[], limit=10, after=None)] == [
        "doc-2",
        "doc-1",
    ]
    assert await store.deleting_documents() == []
    assert await store.run_size(A, "run-1") == 2
    assert sorted(await store.stage_seconds(A, "kb-1"), key=len) == [{}, {"parse": 2.0}]


# --- documents ---------------------------------------------------------------------------------------


async def test_a_document_reads_back_as_written_typed_and_is_found_by_content(store: IngestionStore) -> None:
    created = await store.create_document(doc("doc-1", content="alpha"))

    fetched = await store.get_document(A, "doc-1")

    assert fetched == created == doc("doc-1", content="alpha")
    assert fetched is not None
    assert type(fetched.status) is DocumentStatus
    assert await store.find_by_content(A, "kb-1", created.content_sha256) == created
    assert await store.find_by_content(A, "kb-1", doc("x", content="beta").content_sha256) is None
    assert await store.find_by_content(A, "kb-2", created.content_sha256) is None
    assert await store.get_documents(A, ["doc-1", "doc-missing"]) == [created]


async def test_the_same_content_twice_in_one_knowledge_base_is_refused_naming_the_first(
    store: IngestionStore,
) -> None:
    first = await store.create_document(doc("doc-1", content="same bytes"))

    with pytest.raises(DuplicateContent) as refused:
        await store.create_document(doc("doc-2", content="same bytes"))

    assert refused.value.existing == first
    assert await store.get_document(A, "doc-2") is None
    # The same content is welcome in another knowledge base, and in another tenant's.
    await store.create_document(doc("doc-3", content="same bytes", kb_id="kb-2"))
    await store.create_document(doc("doc-4", content="same bytes", tenant=B))
    assert (await current(store, "doc-3")).content_sha256 == first.content_sha256
    assert (await current(store, "doc-4", B)).content_sha256 == first.content_sha256


async def test_every_status_round_trips_as_a_document_status(store: IngestionStore) -> None:
    await store.create_document(doc("doc-1"))

    for status in DocumentStatus:
        written = await store.update_document(A, "doc-1", status=status.value)  # the plain word
        read = await current(store, "doc-1")
        assert written == read
        assert read.status is status
        assert type(read.status) is DocumentStatus

    with pytest.raises(ValueError, match="'done' is not one of: queued, parsing"):
        await store.update_document(A, "doc-1", status="done")
    with pytest.raises(ValueError, match="'done' is not one of"):
        await store.set_stage(A, [("doc-1", "run-1", Progress())], "done")
    with pytest.raises(ValueError, match="'done' is not one of"):
        await store.list_documents(A, "kb-1", statuses=["done"], limit=10, after=None)
    assert (await current(store, "doc-1")).status is list(DocumentStatus)[-1]  # the last one written


async def test_a_status_write_of_a_stale_run_changes_nothing(store: IngestionStore) -> None:
    await store.create_document(doc("doc-1", run="run-1"))
    parsing = await store.update_document(A, "doc-1", run_id="run-1", status=DocumentStatus.PARSING)
    assert parsing is not None and parsing.status is DocumentStatus.PARSING

    # Re-ingest: the document gets a new run; the old run's worker can no longer write.
    reingested = await store.update_document(
        A, "doc-1", run_id="run-1", ingest_run_id="run-2", status="queued", progress=Progress()
    )
    assert reingested is not None and reingested.ingest_run_id == "run-2"
    assert await store.update_document(A, "doc-1", run_id="run-1", status="ready", chunk_count=4) is None
    await store.set_stage(A, [("doc-1", "run-1", Progress(percent=90.0))], DocumentStatus.INDEXING)
    assert (
        await store.finish_stages(A, IngestionStage.INDEX, [("doc-1", "run-1", 1.0, {"chunk_count": 4})])
        == set()
    )
    after_stale = await current(store, "doc-1")
    assert (after_stale.status, after_stale.chunk_count, after_stale.progress) == (
        DocumentStatus.QUEUED,
        0,
        Progress(),
    )

    # Delete: once marked, not even the current run writes.
    assert await store.mark_deleting(A, "doc-1") is not None
    assert await store.update_document(A, "doc-1", run_id="run-2", status="ready") is None
    await store.set_stage(A, [("doc-1", "run-2", Progress(percent=50.0))], "embedding")
    assert await store.finish_stages(A, "embed", [("doc-1", "run-2", 1.0, {"chunk_count": 4})]) == set()
    deleted = await current(store, "doc-1")
    assert (deleted.status, deleted.chunk_count) == (DocumentStatus.QUEUED, 0)


async def test_set_stage_moves_only_the_documents_of_their_current_run(store: IngestionStore) -> None:
    for doc_id, run in [("doc-1", "run-1"), ("doc-2", "run-1"), ("doc-3", "run-2"), ("doc-4", "run-1")]:
        await store.create_document(doc(doc_id, run=run))
    await store.mark_deleting(A, "doc-4")

    await store.set_stage(
        A,
        [
            ("doc-1", "run-1", Progress(percent=20.0, chunks_total=10)),
            ("doc-2", "run-1", Progress(percent=25.0, chunks_total=12)),
            ("doc-3", "run-1", Progress(percent=30.0)),  # superseded by run-2
            ("doc-4", "run-1", Progress(percent=35.0)),  # being deleted
        ],
        DocumentStatus.EMBEDDING,
    )
    await store.set_stage(A, [], DocumentStatus.READY)  # nothing to do, no error

    moved = {d: await current(store, d) for d in ["doc-1", "doc-2", "doc-3", "doc-4"]}
    assert [(m.status, m.progress.percent) for m in moved.values()] == [
        (DocumentStatus.EMBEDDING, 20.0),
        (DocumentStatus.EMBEDDING, 25.0),
        (DocumentStatus.QUEUED, 0.0),
        (DocumentStatus.QUEUED, 0.0),
    ]
    assert moved["doc-2"].progress == Progress(percent=25.0, chunks_total=12)
    assert moved["doc-1"].update_time > T0


async def test_finish_stages_records_current_runs_adds_their_time_and_returns_their_ids(
    store: IngestionStore,
) -> None:
    for doc_id, run in [("doc-1", "run-1"), ("doc-2", "run-1"), ("doc-3", "run-2"), ("doc-4", "run-1")]:
        await store.create_document(doc(doc_id, run=run))
    await store.mark_deleting(A, "doc-4")

    recorded = await store.finish_stages(
        A,
        IngestionStage.CHUNK,
        [
            ("doc-1", "run-1", 1.5, {"chunk_count": 5, "status": "embedding", "progress": Progress(20.0)}),
            ("doc-2", "run-1", 0.5, {"chunk_count": 7, "status": "embedding", "progress": Progress(21.0)}),
            ("doc-3", "run-1", 9.0, {"chunk_count": 9, "status": "embedding", "progress": Progress(22.0)}),
            ("doc-4", "run-1", 9.0, {"chunk_count": 9, "status": "embedding", "progress": Progress(23.0)}),
        ],
    )
    again = await store.finish_stages(A, "chunk", [("doc-1", "run-1", 2.25, {"chunk_count": 6})])
    other = await store.finish_stages(
        A, "embed", [("doc-1", "run-1", 4.0, {"status": DocumentStatus.INDEXING})]
    )

    assert (recorded, again, other) == ({"doc-1", "doc-2"}, {"doc-1"}, {"doc-1"})
    assert await store.finish_stages(A, "chunk", []) == set()
    one, two, three, four = [await current(store, d) for d in ["doc-1", "doc-2", "doc-3", "doc-4"]]
    assert (one.status, one.chunk_count, one.progress) == (DocumentStatus.INDEXING, 6, Progress(20.0))
    assert (two.status, two.chunk_count, two.progress) == (DocumentStatus.EMBEDDING, 7, Progress(21.0))
    assert (three.status, three.chunk_count) == (DocumentStatus.QUEUED, 0)
    assert (four.status, four.chunk_count) == (DocumentStatus.QUEUED, 0)
    seconds = sorted(await store.stage_seconds(A, "kb-1"), key=lambda s: sorted(s.items()))
    assert seconds == [{}, {}, {"chunk": 0.5}, {"chunk": 3.75, "embed": 4.0}]


async def test_documents_list_newest_first_in_pages_and_by_status(store: IngestionStore) -> None:
    for n in range(5):
        await store.create_document(doc(f"doc-{n}", at=T0 + timedelta(seconds=n)))
    # Three uploads in the same microsecond: the id breaks the tie, also across a page boundary.
    for tied in ["doc-tie-b", "doc-tie-a", "doc-tie-c"]:
        await store.create_document(doc(tied, at=T0 + timedelta(seconds=10)))
    await store.create_document(doc("doc-elsewhere", kb_id="kb-2", at=T0 + timedelta(seconds=20)))
    await store.create_document(doc("doc-gone", at=T0 + timedelta(seconds=30)))
    await store.mark_deleting(A, "doc-gone")

    pages: list[list[str]] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.list_documents(A, "kb-1", statuses=[], limit=2, after=after)
        if not page:
            break
        pages.append([d.id for d in page])
        after = (page[-1].create_time.timestamp(), page[-1].id)  # what the API's page token carries

    assert pages == [
        ["doc-tie-c", "doc-tie-b"],
        ["doc-tie-a", "doc-4"],
        ["doc-3", "doc-2"],
        ["doc-1", "doc-0"],
    ]

    await store.update_document(A, "doc-1", status="ready")
    await store.update_document(A, "doc-3", status=DocumentStatus.FAILED)
    await store.update_document(A, "doc-tie-a", status="embedding")
    finished = await store.list_documents(
        A, "kb-1", statuses=[DocumentStatus.READY, "failed"], limit=10, after=None
    )
    assert [(d.id, d.status) for d in finished] == [
        ("doc-3", DocumentStatus.FAILED),
        ("doc-1", DocumentStatus.READY),
    ]
    newer_than_doc_3 = await store.list_documents(
        A,
        "kb-1",
        statuses=["ready", "failed"],
        limit=10,
        after=(finished[0].create_time.timestamp(), "doc-3"),
    )
    assert [d.id for d in newer_than_doc_3] == ["doc-1"]


async def test_failures_and_warnings_round_trip_typed(store: IngestionStore) -> None:
    await store.create_document(doc("doc-1"))
    failure = Failure(
        stage="embed",  # type: ignore[arg-type]  # the plain word, as workflow inputs carry it
        code="model_unavailable",
        reason="the embedding model did not answer",
        attempts=3,
        time=T0,
    )
    warnings = (
        Failure(stage=IngestionStage.GRAPH, code="graph_failed", reason="no chat model", time=T0),
        Failure(stage=None, code="ocr_skipped", reason="no OCR engine", attempts=1, time=T0),
    )

    written = await store.update_document(A, "doc-1", status="failed", failure=failure, warnings=warnings)
    read = await current(store, "doc-1")

    assert written == read
    assert read.failure == replace(failure, stage=IngestionStage.EMBED)
    assert read.failure is not None
    assert type(read.failure.stage) is IngestionStage
    assert read.warnings == warnings
    assert type(read.warnings[0].stage) is IngestionStage
    assert read.warnings[1].stage is None

    with pytest.raises(ValueError, match="'upload' is not one of: parse"):
        await store.update_document(A, "doc-1", failure=replace(failure, stage="upload"))
    cleared = await store.update_document(A, "doc-1", status="queued", failure=None, warnings=())
    assert cleared is not None
    assert (cleared.failure, cleared.warnings) == (None, ())


# --- deletion ----------------------------------------------------------------------------------------


async def test_a_document_marked_for_deletion_disappears_until_purged(store: IngestionStore) -> None:
    await store.create_kb(kb("kb-1"))
    kept = await store.create_document(doc("doc-kept"))
    marked = await store.create_document(doc("doc-marked", content="marked"))

    assert await store.mark_deleting(A, "doc-marked") == marked
    assert await store.mark_deleting(A, "doc-marked") is None  # already on its way out

    assert await store.get_document(A, "doc-marked") is None
    assert (await current(store, "doc-marked")).id == "doc-marked"
    assert await store.get_documents(A, ["doc-kept", "doc-marked"]) == [kept]
    assert await store.find_by_content(A, "kb-1", marked.content_sha256) is None
    assert [d.id for d in await store.list_documents(A, "kb-1", statuses=[], limit=10, after=None)] == [
        "doc-kept"
    ]
    assert [d.id for d in await store.kb_documents(A, "kb-1", ["queued"])] == ["doc-kept"]
    assert [d.id for d in await store.deleting_documents()] == ["doc-marked"]

    await store.purge_document(A, "doc-marked")

    assert await store.get_document(A, "doc-marked", include_deleting=True) is None
    assert await store.deleting_documents() == []
    assert await store.get_document(A, "doc-kept") == kept


async def test_deleting_a_knowledge_base_marks_its_documents_and_purging_removes_only_them(
    store: IngestionStore,
) -> None:
    await store.create_kb(kb("kb-1", "one"))
    await store.create_kb(kb("kb-2", "two"))
    for doc_id, kb_id in [("doc-1", "kb-1"), ("doc-2", "kb-1"), ("doc-3", "kb-2")]:
        await store.create_document(doc(doc_id, kb_id=kb_id))
    await store.create_document(doc("doc-b", kb_id="kb-1", tenant=B))

    assert await store.delete_kb(A, "kb-1") is True
    assert await store.delete_kb(A, "kb-1") is False

    assert await store.get_kb(A, "kb-1") is None
    assert sorted(d.id for d in await store.deleting_documents()) == ["doc-1", "doc-2"]
    assert [d.id for d in await store.deleting_documents(limit=1)] in (["doc-1"], ["doc-2"])
    assert await store.get_document(A, "doc-1") is None
    assert await store.get_document(B, "doc-b") is not None  # B's kb-1 is another knowledge base

    await store.purge_kb_documents(A, "kb-1")

    assert await store.deleting_documents() == []
    assert await store.get_document(A, "doc-1", include_deleting=True) is None
    assert await store.get_document(A, "doc-2", include_deleting=True) is None
    assert await store.get_document(A, "doc-3") is not None
    assert await store.get_document(B, "doc-b") is not None
    kb_two = await store.get_kb(A, "kb-2")
    assert kb_two is not None and kb_two.document_count == 1


# --- sweeps and queries of the worker ----------------------------------------------------------------


async def test_stale_queued_lists_untouched_queued_documents_of_every_tenant(store: IngestionStore) -> None:
    before = datetime.now(UTC) + timedelta(hours=1)
    await store.create_document(doc("doc-a"))
    await store.create_document(doc("doc-b", tenant=B))
    await store.create_document(doc("doc-parsing"))
    await store.update_document(A, "doc-parsing", status="parsing")
    await store.create_document(doc("doc-deleting"))
    await store.mark_deleting(A, "doc-deleting")
    await store.create_document(doc("doc-fresh", updated=before + timedelta(hours=1)))

    stale = await store.stale_queued(before)

    assert sorted((d.tenant_id, d.id) for d in stale) == [(A, "doc-a"), (B, "doc-b")]
    assert all(d.status is DocumentStatus.QUEUED for d in stale)
    assert len(await store.stale_queued(before, limit=1)) == 1
    assert await store.stale_queued(T0) == []


async def test_kb_documents_selects_by_status_within_one_knowledge_base(store: IngestionStore) -> None:
    for doc_id, status, kb_id in [
        ("doc-ready", "ready", "kb-1"),
        ("doc-graph", "graph", "kb-1"),
        ("doc-failed", "failed", "kb-1"),
        ("doc-queued", "queued", "kb-1"),
        ("doc-ready-elsewhere", "ready", "kb-2"),
    ]:
        await store.create_document(doc(doc_id, kb_id=kb_id))
        await store.update_document(A, doc_id, status=status)

    found = await store.kb_documents(A, "kb-1", ["ready", DocumentStatus.GRAPH])

    assert sorted((d.id, d.status) for d in found) == [
        ("doc-graph", DocumentStatus.GRAPH),
        ("doc-ready", DocumentStatus.READY),
    ]
    assert await store.kb_documents(A, "kb-1", []) == []
    assert [d.id for d in await store.kb_documents(A, "kb-1", [DocumentStatus.FAILED])] == ["doc-failed"]


async def test_run_size_counts_the_documents_of_one_upload_batch(store: IngestionStore) -> None:
    for doc_id, run in [("doc-1", "run-1"), ("doc-2", "run-1"), ("doc-3", "run-1"), ("doc-4", "run-2")]:
        await store.create_document(doc(doc_id, run=run))
    await store.create_document(doc("doc-b", run="run-1", tenant=B))

    assert await store.run_size(A, "run-1") == 3
    assert await store.run_size(A, "run-2") == 1
    assert await store.run_size(B, "run-1") == 1
    assert await store.run_size(A, "run-3") == 0


async def test_knowledge_base_counts_sum_its_live_documents(store: IngestionStore) -> None:
    await store.create_kb(kb("kb-1", "one"))
    await store.create_kb(kb("kb-2", "two"))
    for doc_id, kb_id, size in [("doc-1", "kb-1", 1000), ("doc-2", "kb-1", 2500), ("doc-3", "kb-2", 40)]:
        await store.create_document(doc(doc_id, kb_id=kb_id, size=size))
    await store.create_document(doc("doc-gone", size=99_999))
    await store.create_document(doc("doc-b", tenant=B, size=77_777))
    await store.update_document(A, "doc-1", chunk_count=12)
    await store.update_document(A, "doc-2", chunk_count=30)
    await store.update_document(A, "doc-gone", chunk_count=500)
    await store.mark_deleting(A, "doc-gone")

    counted = await store.get_kb(A, "kb-1", with_counts=True)
    default = await store.get_kb(A, "kb-1")
    uncounted = await store.get_kb(A, "kb-1", with_counts=False)

    assert counted is not None and uncounted is not None
    assert (counted.document_count, counted.chunk_count, counted.size_bytes) == (2, 42, 3500)
    assert default == counted
    assert (uncounted.document_count, uncounted.chunk_count, uncounted.size_bytes) == (0, 0, 0)
    assert [
        (k.id, k.document_count, k.chunk_count, k.size_bytes) for k in await store.list_kbs(A, 10, None)
    ] == [
        ("kb-1", 2, 42, 3500),
        ("kb-2", 1, 0, 40),
    ]
