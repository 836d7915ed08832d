"""Uploads through the servicer, on a real SQLite store and a real filesystem blob store.

Temporal and modelhub are stood in for: the runs record the workflows they would start, and may be
made to fail as an unreachable Temporal does.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api.uploads import Uploads
from knowsphere_ingestion.domain.records import ChunkingSettings, Document, KnowledgeBase
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore, build_blob_store
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.errors import RequestError

TENANT = "tenant-a"
TEXT = b"# Pumps\n\nA pump moves water.\n"


class Aborted(Exception):
    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status


class Context:
    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


class Runs:
    """Records the runs a servicer starts; ``unreachable`` makes starting fail as Temporal away does."""

    def __init__(self) -> None:
        self.started: list[list[Document]] = []
        self.unreachable = False

    async def start(self, documents: Sequence[Document]) -> None:
        if self.unreachable:
            raise RequestError(
                grpc.StatusCode.UNAVAILABLE, "the workflow service (Temporal) cannot be reached"
            )
        self.started.append(list(documents))


class ModelHub:
    """Whether the tenant has a default ASR model: ``cached`` is what the client's cache says, ``asr``
    what modelhub says now; ``uncached`` counts the lookups that bypass the cache."""

    def __init__(self, asr: bool = False, cached: bool | None = None) -> None:
        self.asr = asr
        self.cached = asr if cached is None else cached
        self.uncached = 0
        self.invalidated: list[tuple[str, str]] = []

    async def has_default(self, model_type: object) -> bool:
        return self.cached

    async def get_default_model(self, model_type: object) -> mpb.ResolvedDefault:
        self.uncached += 1
        return mpb.ResolvedDefault(model=mpb.Model(id="whisper")) if self.asr else mpb.ResolvedDefault()

    def invalidate(self, tenant_id: str, model_id: str = "") -> None:
        self.invalidated.append((tenant_id, model_id))
        self.cached = self.asr


@pytest.fixture
def identity() -> Iterator[None]:
    with bound_identity(Identity(TENANT, "user-1")):
        yield


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[IngestionStore]:
    store = IngestionStore(f"sqlite+aiosqlite:///{tmp_path}/ingestion.db")
    await store.open()
    now = datetime.now(UTC)
    for kb_id in ("kb-1", "kb-2"):
        await store.create_kb(
            KnowledgeBase(kb_id, TENANT, kb_id, "", "m", 8, ChunkingSettings(), False, "", now, now)
        )
    yield store
    await store.close()


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[BlobStore]:
    store = build_blob_store(str(tmp_path / "blobs"))
    await store.start()
    yield store
    await store.close()


def settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(
        temporal_address="t:1",
        nats_url="nats://n:1",
        retrieval_addr="r:1",
        modelhub_addr="m:1",
        data_dir=str(tmp_path),
        **values,
    )


def stored_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "blobs").rglob("*") if p.is_file() and not p.name.startswith(".")]


def file(kb_id: str, name: str, data: bytes, **fields: Any) -> list[pb.UploadDocumentsRequest]:
    header = pb.UploadHeader(knowledge_base_id=kb_id, file_name=name, declared_size_bytes=len(data), **fields)
    return [pb.UploadDocumentsRequest(header=header), pb.UploadDocumentsRequest(chunk=data)]


async def stream(*files: list[pb.UploadDocumentsRequest]) -> AsyncIterator[pb.UploadDocumentsRequest]:
    for messages in files:
        for message in messages:
            yield message


async def test_accepted_files_are_grouped_into_runs_per_knowledge_base(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    runs = Runs()
    uploads = Uploads(
        settings=settings(tmp_path, batch_max_documents=2),
        store=store,
        blobs=blobs,
        modelhub=ModelHub(),
        runs=runs,
    )
    response = await uploads.UploadDocuments(
        stream(
            file("kb-1", "a.md", TEXT + b"a"),
            file("kb-2", "b.md", TEXT + b"b"),
            file("kb-1", "c.md", TEXT + b"c"),
            file("kb-1", "d.md", TEXT + b"d"),
        ),
        Context(),
    )
    assert [r.file_name for r in response.results] == ["a.md", "b.md", "c.md", "d.md"]
    assert all(r.HasField("document") and not r.HasField("error") for r in response.results)
    # kb-1's first two files fill a run; what is left of each knowledge base starts at the end.
    started = [[(d.knowledge_base_id, d.file_name) for d in run] for run in runs.started]
    assert started == [[("kb-1", "a.md"), ("kb-1", "c.md")], [("kb-2", "b.md")], [("kb-1", "d.md")]]
    assert all(len({d.ingest_run_id for d in run}) == 1 for run in runs.started)
    assert len({run[0].ingest_run_id for run in runs.started}) == 3
    recorded = await store.get_document(TENANT, response.results[0].document.id)
    assert recorded is not None and recorded.status == DocumentStatus.QUEUED
    assert recorded.content_sha256 == hashlib.sha256(TEXT + b"a").hexdigest()
    assert recorded.content_type == "text/markdown"
    assert response.results[0].document.status == pb.DOCUMENT_STATUS_QUEUED


async def test_refused_and_duplicate_files_leave_nothing_and_the_others_go_on(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    runs = Runs()
    uploads = Uploads(settings=settings(tmp_path), store=store, blobs=blobs, modelhub=ModelHub(), runs=runs)
    first = await uploads.UploadDocuments(stream(file("kb-1", "a.md", TEXT)), Context())
    existing = first.results[0].document.id
    response = await uploads.UploadDocuments(
        stream(
            file("kb-1", "tool.exe", b"MZ" + b"x" * 10),
            file("kb-1", "again.md", TEXT),
            file("kb-1", "fake.txt", b"%PDF-1.7 not text"),
            file("missing-kb", "x.md", TEXT),
            file("kb-1", "talk.mp3", b"ID3" + b"x" * 10),
            file("kb-1", "sum.md", TEXT + b"!", content_sha256="0" * 64),
            file("kb-1", "ok.md", TEXT + b"ok"),
        ),
        Context(),
    )
    errors = {r.file_name: (r.error.code, r.error.message) for r in response.results if r.HasField("error")}
    fields = {r.file_name: r.error.field for r in response.results if r.HasField("error")}
    assert fields == {
        "tool.exe": "header.file_name",
        "fake.txt": "header.file_name",
        "x.md": "",  # NOT_FOUND names no field
        "talk.mp3": "header.file_name",
        "sum.md": "header.content_sha256",
    }
    assert errors["tool.exe"][0] == "INVALID_ARGUMENT"
    assert errors["tool.exe"][1].startswith("header.file_name: unsupported file type '.exe'")
    assert errors["fake.txt"][0] == "INVALID_ARGUMENT" and "the content is a PDF" in errors["fake.txt"][1]
    assert errors["x.md"] == ("NOT_FOUND", "knowledge base missing-kb not found")
    assert errors["talk.mp3"][0] == "FAILED_PRECONDITION" and "(ASR) model" in errors["talk.mp3"][1]
    assert errors["sum.md"][1].startswith("header.content_sha256: does not match the content")
    duplicate = next(r for r in response.results if r.file_name == "again.md")
    assert duplicate.duplicate and duplicate.document.id == existing
    assert [[d.file_name for d in run] for run in runs.started] == [["a.md"], ["ok.md"]]
    # Only the two accepted files are stored, and recorded.
    assert len(stored_files(tmp_path)) == 2
    listed = await store.list_documents(TENANT, "kb-1", statuses=[], limit=10, after=None)
    assert sorted(d.file_name for d in listed) == ["a.md", "ok.md"]


async def test_files_are_not_kept_when_their_workflow_cannot_start(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    runs = Runs()
    runs.unreachable = True
    uploads = Uploads(settings=settings(tmp_path), store=store, blobs=blobs, modelhub=ModelHub(), runs=runs)
    response = await uploads.UploadDocuments(
        stream(file("kb-1", "a.md", TEXT + b"a"), file("kb-1", "b.md", TEXT + b"b")), Context()
    )
    assert [(r.error.code, r.HasField("document")) for r in response.results] == [("UNAVAILABLE", False)] * 2
    assert all(r.error.message.endswith("; nothing was stored, retry later") for r in response.results)
    assert stored_files(tmp_path) == []
    assert await store.list_documents(TENANT, "kb-1", statuses=[], limit=10, after=None) == []


async def test_more_files_than_allowed_are_refused_one_by_one(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    runs = Runs()
    uploads = Uploads(
        settings=settings(tmp_path, max_files_per_upload=1),
        store=store,
        blobs=blobs,
        modelhub=ModelHub(),
        runs=runs,
    )
    response = await uploads.UploadDocuments(
        stream(file("kb-1", "a.md", TEXT + b"a"), file("kb-1", "b.md", TEXT + b"b")), Context()
    )
    assert response.results[0].HasField("document")
    assert response.results[1].error.message == "header: more than 1 files in one upload"


async def test_one_file_upload_refusal_names_the_field_in_the_status(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    uploads = Uploads(settings=settings(tmp_path), store=store, blobs=blobs, modelhub=ModelHub(), runs=Runs())

    async def one(name: str, data: bytes) -> AsyncIterator[pb.UploadDocumentRequest]:
        header = pb.UploadHeader(knowledge_base_id="kb-1", file_name=name, declared_size_bytes=len(data))
        yield pb.UploadDocumentRequest(header=header)
        yield pb.UploadDocumentRequest(chunk=data)

    with pytest.raises(Aborted) as refused:
        await uploads.UploadDocument(one("a.exe", b"MZ"), Context())
    assert refused.value.status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.status.details.startswith("header.file_name: unsupported file type")
    details = dict(refused.value.status.trailing_metadata)["grpc-status-details-bin"]
    assert b"header.file_name" in details  # the BadRequest detail naming the field

    accepted = await uploads.UploadDocument(one("a.md", TEXT), Context())
    assert accepted.document.file_name == "a.md" and not accepted.duplicate
    again = await uploads.UploadDocument(one("copy.md", TEXT), Context())
    assert again.duplicate and again.document.id == accepted.document.id


async def test_audio_waits_for_an_asr_model_that_a_stale_cache_does_not_see(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    wav = b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x00" * 20
    runs = Runs()
    modelhub = ModelHub(asr=True, cached=False)  # configured a moment ago; no change event arrived yet
    uploads = Uploads(settings=settings(tmp_path), store=store, blobs=blobs, modelhub=modelhub, runs=runs)
    response = await uploads.UploadDocuments(
        stream(file("kb-1", "call.wav", wav), file("kb-1", "again.wav", wav + b"\x01")), Context()
    )
    assert all(r.HasField("document") for r in response.results), response.results
    # The stale "no" is dropped with what is cached of the model found; the second file needs no ask.
    assert modelhub.invalidated == [(TENANT, "whisper")]
    assert modelhub.uncached == 1

    policy = await Uploads(
        settings=settings(tmp_path), store=store, blobs=blobs, modelhub=ModelHub(asr=False), runs=runs
    ).GetUploadPolicy(pb.GetUploadPolicyRequest(), Context())
    wav_type = next(t for t in policy.file_types if t.extension == "wav")
    assert list(wav_type.missing_components) == ["asr"]


async def test_the_upload_policy_answers_from_the_cache(
    tmp_path: Path, identity: None, store: IngestionStore, blobs: BlobStore
) -> None:
    modelhub = ModelHub(asr=True, cached=False)
    uploads = Uploads(settings=settings(tmp_path), store=store, blobs=blobs, modelhub=modelhub, runs=Runs())
    policy = await uploads.GetUploadPolicy(pb.GetUploadPolicyRequest(), Context())
    wav_type = next(t for t in policy.file_types if t.extension == "wav")
    # What the cache says until a change event clears it: asking modelhub anew on every policy request
    # would cost a lookup per page view.
    assert list(wav_type.missing_components) == ["asr"]
    assert modelhub.uncached == 0 and modelhub.invalidated == []
    modelhub.cached = True
    policy = await uploads.GetUploadPolicy(pb.GetUploadPolicyRequest(), Context())
    assert list(next(t for t in policy.file_types if t.extension == "wav").missing_components) == []
