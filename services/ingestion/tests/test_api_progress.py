"""Progress watches fed by the process's fanout of document events."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_contracts.events import DocumentsFinished, DocumentsProgress, FinishedDocument, ProgressUpdate
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion.api.bus import DocumentEvent
from knowsphere_ingestion.api.progress import ProgressWatch
from knowsphere_ingestion.domain.records import ChunkingSettings, Document, KnowledgeBase, Progress
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import Identity, bound_identity

TENANT = "tenant-a"
OTHER = "tenant-b"
NOW = datetime(2024, 1, 1, tzinfo=UTC)
KNOWLEDGE_BASES = {(TENANT, "kb-1"), (OTHER, "kb-b")}


def document(
    document_id: str,
    status: DocumentStatus,
    kb_id: str = "kb-1",
    percent: float = 0.0,
    tenant: str = TENANT,
) -> Document:
    return Document(
        id=document_id,
        tenant_id=tenant,
        knowledge_base_id=kb_id,
        file_name=f"{document_id}.md",
        content_type="text/markdown",
        size_bytes=1,
        content_sha256="",
        blob_key="",
        status=status,
        create_time=NOW,
        update_time=NOW,
        progress=Progress(percent=percent),
    )


class Store:
    """The documents as the database holds them, each read scoped to a tenant as the real store's are;
    ``on_read`` runs while a watch reads the current state."""

    def __init__(self, *documents: Document) -> None:
        self.documents = {(d.tenant_id, d.id): d for d in documents}
        self.on_read: list[Document] = []  # changes that land while the current state is read
        self.fanout: Fanout[DocumentEvent] | None = None

    def change(self, changed: Document) -> None:
        self.documents[changed.tenant_id, changed.id] = changed
        assert self.fanout is not None
        if changed.status in (DocumentStatus.READY, DocumentStatus.FAILED):
            event: DocumentEvent = DocumentsFinished(
                knowledge_base_id=changed.knowledge_base_id,
                documents=[FinishedDocument(document_id=changed.id, status=changed.status)],
            )
        else:
            event = DocumentsProgress(
                knowledge_base_id=changed.knowledge_base_id,
                updates=[
                    ProgressUpdate(
                        document_id=changed.id, stage=changed.status, percent=changed.progress.percent
                    )
                ],
            )
        self.fanout.publish(event)

    def _read(self, found: list[Document]) -> list[Document]:
        for changed in self.on_read:
            self.change(changed)  # the reader already holds the state from before the change
        self.on_read = []
        return found

    async def get_documents(self, tenant: str, ids: Sequence[str]) -> list[Document]:
        return self._read([d for (t, i), d in self.documents.items() if t == tenant and i in ids])

    async def list_documents(self, tenant: str, kb_id: str, **_: object) -> list[Document]:
        return self._read(
            [d for (t, _), d in self.documents.items() if t == tenant and d.knowledge_base_id == kb_id]
        )

    async def get_document(self, tenant: str, document_id: str) -> Document | None:
        return self.documents.get((tenant, document_id))

    async def get_kb(self, tenant: str, kb_id: str, *, with_counts: bool = True) -> KnowledgeBase | None:
        if (tenant, kb_id) not in KNOWLEDGE_BASES:
            return None
        return KnowledgeBase(kb_id, tenant, "kb", "", "m", 8, ChunkingSettings(), False, "", NOW, NOW)


class Aborted(Exception):
    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status


class Context:
    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


@pytest.fixture(autouse=True)
def identity() -> Iterator[None]:
    with bound_identity(Identity(TENANT, "user-1")):
        yield


def watch_of(store: Store, tmp_path: Path) -> ProgressWatch:
    fanout: Fanout[DocumentEvent] = Fanout()
    store.fanout = fanout
    settings = Settings(
        temporal_address="t:1",
        nats_url="nats://n:1",
        retrieval_addr="r:1",
        modelhub_addr="m:1",
        data_dir=str(tmp_path),
        max_watch_documents=3,
    )
    return ProgressWatch(settings=settings, store=store, events=fanout)  # type: ignore[arg-type]


def seen(response: pb.WatchDocumentProgressResponse) -> tuple[str, int, int]:
    return response.progress.document_id, response.progress.status, response.progress.percent


async def test_a_watch_of_documents_misses_no_change_and_ends_when_all_are_final(tmp_path: Path) -> None:
    store = Store(document("a", DocumentStatus.PARSING), document("b", DocumentStatus.READY))
    watch = watch_of(store, tmp_path)
    # "a" moves on while the watch reads the current state: the read shows it parsing, the event
    # that follows shows it embedding.
    store.on_read = [document("a", DocumentStatus.EMBEDDING, percent=40.0)]
    request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=["a", "b", "a"]))
    responses: list[tuple[str, int, int]] = []

    async def run() -> None:
        async for response in watch.WatchDocumentProgress(request, Context()):
            responses.append(seen(response))
            if len(responses) == 3:
                store.change(document("b", DocumentStatus.READY))  # ended already: not sent again
                store.change(document("a", DocumentStatus.READY, percent=100.0))

    await asyncio.wait_for(run(), timeout=5)
    assert responses == [
        ("a", pb.DOCUMENT_STATUS_PARSING, 0),
        ("b", pb.DOCUMENT_STATUS_READY, 0),
        ("a", pb.DOCUMENT_STATUS_EMBEDDING, 40),
        ("a", pb.DOCUMENT_STATUS_READY, 100),
    ]


async def test_a_watch_of_finished_documents_ends_at_once(tmp_path: Path) -> None:
    store = Store(document("a", DocumentStatus.FAILED))
    watch = watch_of(store, tmp_path)
    request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=["a"]))
    responses = [seen(r) async for r in watch.WatchDocumentProgress(request, Context())]
    assert responses == [("a", pb.DOCUMENT_STATUS_FAILED, 0)]


async def test_a_knowledge_base_watch_goes_on_after_its_documents_finish(tmp_path: Path) -> None:
    store = Store(
        document("a", DocumentStatus.QUEUED), document("other", DocumentStatus.QUEUED, kb_id="kb-2")
    )
    watch = watch_of(store, tmp_path)
    request = pb.WatchDocumentProgressRequest(knowledge_base_id="kb-1")
    responses: list[tuple[str, int, int]] = []

    async def run() -> None:
        async for response in watch.WatchDocumentProgress(request, Context()):
            responses.append(seen(response))
            if len(responses) == 1:
                store.change(document("other", DocumentStatus.READY, kb_id="kb-2"))  # not this knowledge base
                store.change(document("a", DocumentStatus.READY, percent=100.0))
                store.change(document("new", DocumentStatus.QUEUED))  # uploaded later: watched too

    task = asyncio.create_task(run())
    for _ in range(100):
        if len(responses) == 3:
            break
        await asyncio.sleep(0.01)
    assert not task.done()  # still watching
    task.cancel()
    assert responses == [
        ("a", pb.DOCUMENT_STATUS_QUEUED, 0),
        ("a", pb.DOCUMENT_STATUS_READY, 100),
        ("new", pb.DOCUMENT_STATUS_QUEUED, 0),
    ]
    await asyncio.sleep(0)
    assert store.fanout is not None and store.fanout.watchers == 0  # the watch let go of the fanout


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (pb.WatchDocumentProgressRequest(), grpc.StatusCode.INVALID_ARGUMENT, "target"),
        (
            pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList()),
            grpc.StatusCode.INVALID_ARGUMENT,
            "documents.document_ids",
        ),
        (
            pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=["1", "2", "3", "4"])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "documents.document_ids",
        ),
        (pb.WatchDocumentProgressRequest(knowledge_base_id="kb-9"), grpc.StatusCode.NOT_FOUND, ""),
        (
            pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=["a", "gone"])),
            grpc.StatusCode.NOT_FOUND,
            "",
        ),
    ],
)
async def test_a_bad_watch_is_refused(
    tmp_path: Path, request_: pb.WatchDocumentProgressRequest, code: grpc.StatusCode, field: str
) -> None:
    store = Store(document("a", DocumentStatus.QUEUED))
    watch = watch_of(store, tmp_path)
    with pytest.raises(Aborted) as refused:
        _ = [r async for r in watch.WatchDocumentProgress(request_, Context())]
    assert refused.value.status.code == code
    if field:
        assert refused.value.status.details.startswith(f"{field}: ")
    else:
        assert "not found" in refused.value.status.details
    assert store.fanout is not None and store.fanout.watchers == 0


async def test_a_watch_of_another_tenants_documents_finds_none(tmp_path: Path) -> None:
    store = Store(document("a", DocumentStatus.PARSING))
    watch = watch_of(store, tmp_path)
    request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=["a"]))
    with bound_identity(Identity(OTHER, "user-b")), pytest.raises(Aborted) as refused:
        _ = [r async for r in watch.WatchDocumentProgress(request, Context())]
    assert refused.value.status.code == grpc.StatusCode.NOT_FOUND
    assert refused.value.status.details == "documents not found: a"
    assert store.fanout is not None and store.fanout.watchers == 0


async def test_an_event_naming_another_tenants_documents_sends_nothing_of_them(tmp_path: Path) -> None:
    store = Store(
        document("a", DocumentStatus.PARSING),
        document("b", DocumentStatus.QUEUED, kb_id="kb-b", tenant=OTHER),
    )
    watch = watch_of(store, tmp_path)
    request = pb.WatchDocumentProgressRequest(knowledge_base_id="kb-b")
    responses: list[tuple[str, int, int]] = []

    async def run() -> None:
        with bound_identity(Identity(OTHER, "user-b")):
            async for response in watch.WatchDocumentProgress(request, Context()):
                responses.append(seen(response))
                if len(responses) == 1:
                    # Events are not tenant-scoped: one for B's knowledge base may name A's documents.
                    assert store.fanout is not None
                    store.fanout.publish(
                        DocumentsProgress(
                            knowledge_base_id="kb-b",
                            updates=[
                                ProgressUpdate(document_id="a", stage=DocumentStatus.EMBEDDING, percent=40)
                            ],
                        )
                    )
                    store.change(
                        document("b", DocumentStatus.READY, kb_id="kb-b", percent=100.0, tenant=OTHER)
                    )
                if len(responses) == 2:
                    return

    await asyncio.wait_for(run(), timeout=5)
    # B's own document, before and after; of A's, nothing (the event about "a" came first).
    assert responses == [("b", pb.DOCUMENT_STATUS_QUEUED, 0), ("b", pb.DOCUMENT_STATUS_READY, 100)]
