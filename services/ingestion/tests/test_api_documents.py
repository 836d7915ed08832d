"""Documents through the servicer (list, delete, re-ingest) and the reconciler that finishes what a crash
left: on a real SQLite store and filesystem blob store; retrieval and Temporal stood in for."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api.documents import DocumentRemoval, Documents
from knowsphere_ingestion.api.reconciler import Reconciler
from knowsphere_ingestion.domain.records import ChunkingSettings, Document, KnowledgeBase
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore, build_blob_store
from knowsphere_runtime.identity import Identity, bound_identity, current_identity
from knowsphere_runtime.rpc.errors import RequestError

TENANT = "tenant-a"
OLD = datetime.now(UTC) - timedelta(hours=1)


class Aborted(Exception):
    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status


class Context:
    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


class Runs:
    def __init__(self) -> None:
        self.started: list[tuple[str, list[str]]] = []  # (tenant bound while starting, document ids)
        self.cancelled: list[str] = []
        self.unreachable = False

    async def start(self, documents: Sequence[Document]) -> None:
        if self.unreachable:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "Temporal away")
        identity = current_identity()
        self.started.append((identity.tenant_id if identity else "", [d.id for d in documents]))

    async def cancel(self, document: Document) -> None:
        self.cancelled.append(document.id)


class Retrieval:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete_document(self, knowledge_base_id: str, document_id: str) -> None:
        self.deleted.append(document_id)


@pytest.fixture(autouse=True)
def identity() -> Iterator[None]:
    with bound_identity(Identity(TENANT, "user-1")):
        yield


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[IngestionStore]:
    store = IngestionStore(f"sqlite+aiosqlite:///{tmp_path}/ingestion.db")
    await store.open()
    await store.create_kb(
        KnowledgeBase("kb-1", TENANT, "kb", "", "m", 8, ChunkingSettings(), False, "", OLD, OLD)
    )
    yield store
    await store.close()


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[BlobStore]:
    store = build_blob_store(str(tmp_path / "blobs"))
    await store.start()
    yield store
    await store.close()


async def add(
    store: IngestionStore, blobs: BlobStore, document_id: str, status: DocumentStatus, run: str
) -> Document:
    key = artifacts.file_key(TENANT, "kb-1", document_id)

    async def data() -> AsyncIterator[bytes]:
        yield document_id.encode()

    stored = await blobs.put(key, data(), max_bytes=100)
    document = Document(
        id=document_id,
        tenant_id=TENANT,
        knowledge_base_id="kb-1",
        file_name=f"{document_id}.md",
        content_type="text/markdown",
        size_bytes=stored.size_bytes,
        content_sha256=stored.sha256,
        blob_key=key,
        status=DocumentStatus.QUEUED,
        create_time=OLD,
        update_time=OLD,
        ingest_run_id=run,
    )
    await store.create_document(document)
    if status != DocumentStatus.QUEUED:
        await store.update_document(TENANT, document_id, run_id=run, status=status)
    return replace(document, status=status)


def parts(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> tuple[Documents, Runs, Retrieval, DocumentRemoval]:
    runs, retrieval = Runs(), Retrieval()
    removal = DocumentRemoval(store=store, blobs=blobs, retrieval=retrieval, runs=runs)  # type: ignore[arg-type]
    settings = Settings(
        temporal_address="t:1",
        nats_url="nats://n:1",
        retrieval_addr="r:1",
        modelhub_addr="m:1",
        data_dir=str(tmp_path),
    )
    documents = Documents(settings=settings, store=store, runs=runs, removal=removal)  # type: ignore[arg-type]
    return documents, runs, retrieval, removal


def stored_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "blobs").rglob("*") if p.is_file() and not p.name.startswith(".")]


async def test_documents_are_listed_by_status(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> None:
    documents, *_ = parts(tmp_path, store, blobs)
    await add(store, blobs, "a", DocumentStatus.READY, "r1")
    await add(store, blobs, "b", DocumentStatus.EMBEDDING, "r2")
    request = pb.ListDocumentsRequest(knowledge_base_id="kb-1", statuses=[pb.DOCUMENT_STATUS_READY])
    listed = await documents.ListDocuments(request, Context())
    assert [(d.id, d.status) for d in listed.documents] == [("a", pb.DOCUMENT_STATUS_READY)]
    with pytest.raises(Aborted) as refused:
        await documents.ListDocuments(
            pb.ListDocumentsRequest(knowledge_base_id="kb-1", statuses=[0]), Context()
        )
    assert refused.value.status.details == "statuses: 0 is not a document status"


async def test_a_deleted_document_is_gone_everywhere(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> None:
    documents, runs, retrieval, _ = parts(tmp_path, store, blobs)
    await add(store, blobs, "a", DocumentStatus.EMBEDDING, "r1")
    await documents.DeleteDocument(pb.DeleteDocumentRequest(document_id="a"), Context())
    assert runs.cancelled == ["a"] and retrieval.deleted == ["a"]
    assert stored_files(tmp_path) == []
    assert await store.get_document(TENANT, "a", include_deleting=True) is None
    with pytest.raises(Aborted) as gone:
        await documents.GetDocument(pb.GetDocumentRequest(document_id="a"), Context())
    assert gone.value.status.code == grpc.StatusCode.NOT_FOUND


async def test_only_a_finished_document_is_reingested(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> None:
    documents, runs, _, _ = parts(tmp_path, store, blobs)
    await add(store, blobs, "busy", DocumentStatus.PARSING, "r1")
    await add(store, blobs, "done", DocumentStatus.FAILED, "r2")
    with pytest.raises(Aborted) as busy:
        await documents.ReingestDocument(pb.ReingestDocumentRequest(document_id="busy"), Context())
    assert busy.value.status.code == grpc.StatusCode.FAILED_PRECONDITION
    assert busy.value.status.details == "document busy is still being ingested (parsing)"

    runs.unreachable = True  # recorded as queued all the same: the reconciler starts it later
    again = await documents.ReingestDocument(pb.ReingestDocumentRequest(document_id="done"), Context())
    assert again.document.status == pb.DOCUMENT_STATUS_QUEUED
    stored = await store.get_document(TENANT, "done")
    assert stored is not None and stored.ingest_run_id not in ("", "r2")


async def test_the_reconciler_purges_marked_documents_and_starts_stale_runs(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> None:
    _, runs, retrieval, removal = parts(tmp_path, store, blobs)
    await add(store, blobs, "marked", DocumentStatus.READY, "r0")
    await store.mark_deleting(TENANT, "marked")
    for document_id, run in (("a", "r1"), ("b", "r1"), ("c", "r2")):
        await add(store, blobs, document_id, DocumentStatus.QUEUED, run)
    reconciler = Reconciler(store, removal, runs)  # type: ignore[arg-type]
    with bound_identity(Identity("someone-else", "u")):  # the reconciler binds each document's tenant
        await reconciler.run_once()
    assert retrieval.deleted == ["marked"]
    assert await store.get_document(TENANT, "marked", include_deleting=True) is None
    assert sorted((tenant, sorted(ids)) for tenant, ids in runs.started) == [
        (TENANT, ["a", "b"]),
        (TENANT, ["c"]),
    ]


async def test_the_reconciler_goes_on_past_a_deletion_it_cannot_finish(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> None:
    _, runs, retrieval, removal = parts(tmp_path, store, blobs)
    await add(store, blobs, "marked", DocumentStatus.READY, "r0")
    await store.mark_deleting(TENANT, "marked")
    await add(store, blobs, "a", DocumentStatus.QUEUED, "r1")

    async def away(knowledge_base_id: str, document_id: str) -> None:
        raise ConnectionError("retrieval is away")

    retrieval.delete_document = away  # type: ignore[method-assign]
    await Reconciler(store, removal, runs).run_once()  # type: ignore[arg-type]
    assert runs.started == [(TENANT, ["a"])]
    assert await store.get_document(TENANT, "marked", include_deleting=True) is not None  # tried again later


async def test_a_deletion_is_announced_before_the_record_goes_and_again_after_a_failed_announcement(
    tmp_path: Path, store: IngestionStore, blobs: BlobStore
) -> None:
    documents, runs, _, removal = parts(tmp_path, store, blobs)
    announced: list[tuple[str, list[str]]] = []
    failing = {"once": True}

    async def announce(knowledge_base_id: str, document_ids: list[str]) -> None:
        if failing.pop("once", False):
            raise ConnectionError("NATS away")
        announced.append((knowledge_base_id, document_ids))

    removal.announce = announce
    await add(store, blobs, "a", DocumentStatus.READY, "r1")
    with pytest.raises(ConnectionError):  # the call fails, as when retrieval cannot delete
        await documents.DeleteDocument(pb.DeleteDocumentRequest(document_id="a"), Context())
    # Not announced, so not forgotten: still marked for deletion, for the reconciler to finish.
    assert await store.get_document(TENANT, "a", include_deleting=True) is not None
    await Reconciler(store, removal, runs).run_once()  # type: ignore[arg-type]
    document = announced[0]
    assert document[1] == ["a"] and len(announced) == 1
    assert await store.get_document(TENANT, "a", include_deleting=True) is None
