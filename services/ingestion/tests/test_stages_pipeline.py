"""The stages as a workflow drives them, on a real SQLite store and filesystem blob store, with modelhub
and retrieval stood in for: documents become searchable, fail alone with the right code, drop out when
superseded, resume where a crash left them, and migrate to a new embedding model."""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients.errors import FailedPrecondition, InvalidArgument, ServiceError, Unavailable
from knowsphere_contracts.events import DocumentsFinished, DocumentsProgress, Event, FinishedDocument
from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage, MigrationState
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.activities import IngestionActivities
from knowsphere_ingestion.adapters.batching import EmbedBatcher
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.domain.chunking import (
    DEFAULT_HEADING_MAX_SIZE,
    HeuristicTokenCounter,
    fitted_size,
)
from knowsphere_ingestion.domain.records import ChunkingSettings, Document, KnowledgeBase, Migration
from knowsphere_ingestion.parsing.budget import BudgetedParser
from knowsphere_ingestion.parsing.limits import ParseLimits
from knowsphere_ingestion.stages.identity import workflow_token
from knowsphere_ingestion.storage.blobs import BlobStore, build_blob_store
from knowsphere_ingestion.workflows import (
    DocumentRun,
    FailInput,
    GraphOutcome,
    IngestBatch,
    MigrateInput,
    StageResult,
)
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.identity_token import TokenAuthority

TENANT = "tenant-a"
OWNER = Identity(TENANT, "user-1")
KB = "kb-1"
MODEL, DIMENSION = "embed-a", 4
NEW_MODEL, NEW_DIMENSION = "embed-b", 3
NOW = datetime.now(UTC)
STAGES = ("parse_documents", "chunk_documents", "embed_chunks", "index_chunks")
CHUNKING = ChunkingSettings(chunk_size_tokens=64)  # small chunks: a document has many parts of vectors


def guide(title: str) -> bytes:
    sections = "\n\n".join(
        f"## Part {n}\n\n" + " ".join(f"Sentence {i} of part {n} about {title}." for i in range(30))
        for n in range(3)
    )
    return f"# {title}\n\n{sections}\n".encode()


class ModelHub:
    """modelhub as the stages call it: vectors derived from the text, scripted failures and replies."""

    def __init__(self) -> None:
        self.embedded: list[tuple[str, list[str]]] = []
        self.embed_calls = 0
        self.embed_failures: dict[int, ServiceError] = {}  # by the number of the Embed call, from 1
        self.defaults: set[ModelType] = set()
        self.replies: list[str | ServiceError] = []
        self.transcript = mpb.TranscribeResponse(text="", language="")
        self.windows: dict[str, int] = {}  # tokens each model reads; unknown (0) when not set

    async def model_window(self, model_id: str) -> int:
        return self.windows.get(model_id, 0)

    async def embed(self, model_id: str, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        self.embed_calls += 1
        if self.embed_calls in self.embed_failures:
            raise self.embed_failures.pop(self.embed_calls)
        self.embedded.append((model_id, list(texts)))
        size = NEW_DIMENSION if model_id == NEW_MODEL else DIMENSION
        return [[float(len(text))] + [1.0] * (size - 1) for text in texts]

    async def has_default(self, model_type: ModelType) -> bool:
        return model_type in self.defaults

    async def transcribe(
        self, data: bytes, mime_type: str, *, file_name: str = "", language: str = ""
    ) -> mpb.TranscribeResponse:
        return self.transcript

    async def complete(self, messages: Sequence[Any], *, purpose: str, **_: Any) -> str:
        reply = self.replies.pop(0)
        if isinstance(reply, ServiceError):
            raise reply
        return reply

    def fail_next_embed(self, error: ServiceError, *, after: int = 0) -> None:
        """The Embed call after the next ``after`` ones fails with ``error``."""
        self.embed_failures[self.embed_calls + after + 1] = error

    def texts(self, model_id: str = MODEL) -> list[str]:
        return [text for model, texts in self.embedded if model == model_id for text in texts]


@dataclass
class Retrieval:
    """retrieval as the stages call it: what was indexed, recorded, pruned and deleted."""

    chunks: dict[str, rpb.Chunk] = field(default_factory=dict)
    infos: dict[str, rpb.DocumentMetadata] = field(default_factory=dict)
    graphs: dict[str, tuple[list[rpb.EntityInput], list[rpb.RelationInput]]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    configured: list[tuple[str, int]] = field(default_factory=list)
    embeddings_deleted: list[str] = field(default_factory=list)
    refuse_configure: ServiceError | None = None

    async def index_chunks(self, chunks: Sequence[rpb.Chunk]) -> int:
        for chunk in chunks:
            stored = self.chunks.setdefault(chunk.id, rpb.Chunk())
            embeddings = {e.model_id: e for e in stored.embeddings}
            stored.CopyFrom(chunk)
            stored.ClearField("embeddings")
            embeddings.update({e.model_id: e for e in chunk.embeddings})
            stored.embeddings.extend(embeddings.values())
        return len(chunks)

    async def put_document_infos(self, documents: Sequence[rpb.DocumentMetadata]) -> None:
        self.infos.update({d.document_id: d for d in documents})

    async def prune_document_chunks(self, knowledge_base_id: str, document_id: str, keep: str) -> int:
        return 0

    async def delete_document(self, knowledge_base_id: str, document_id: str) -> None:
        self.deleted.append(document_id)
        self.chunks = {k: c for k, c in self.chunks.items() if c.document_id != document_id}

    async def index_graph(
        self,
        knowledge_base_id: str,
        document_id: str,
        entities: Sequence[rpb.EntityInput],
        relations: Sequence[rpb.RelationInput],
    ) -> None:
        self.graphs[document_id] = (list(entities), list(relations))

    async def configure_knowledge_base(
        self, knowledge_base_id: str, *, embedding_model_id: str, embedding_dimension: int, **_: Any
    ) -> None:
        if self.refuse_configure is not None:
            raise self.refuse_configure
        self.configured.append((embedding_model_id, embedding_dimension))

    async def delete_embeddings(self, knowledge_base_id: str, embedding_model_id: str) -> int:
        self.embeddings_deleted.append(embedding_model_id)
        return 0


@dataclass
class World:
    store: IngestionStore
    blobs: BlobStore
    blob_root: Path
    modelhub: ModelHub
    retrieval: Retrieval
    events: list[Event]
    parser: BudgetedParser
    activities: IngestionActivities = field(init=False)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A new worker, with nothing in memory, takes over the store, the blobs and the peers."""

        async def publish(event: Event) -> None:
            self.events.append(event)

        self.activities = IngestionActivities(
            store=self.store,
            blobs=self.blobs,
            modelhub=self.modelhub,  # type: ignore[arg-type]
            retrieval=self.retrieval,  # type: ignore[arg-type]
            batcher=EmbedBatcher(self.modelhub, batch_size=8, max_wait=0.0),  # type: ignore[arg-type]
            publish=publish,
            parser=self.parser,
            index_batch_size=4,
            vectors_per_artifact=2,
            chunk_sizes_fit_model=True,
        )

    async def add(self, name: str, data: bytes, content_type: str = "") -> DocumentRun:
        document_id = "doc-" + name.replace(".", "-")
        key = artifacts.file_key(TENANT, KB, document_id)

        async def body() -> AsyncIterator[bytes]:
            yield data

        stored = await self.blobs.put(key, body(), max_bytes=len(data) + 1)
        await self.store.create_document(
            Document(
                id=document_id,
                tenant_id=TENANT,
                knowledge_base_id=KB,
                file_name=name,
                content_type=content_type,
                size_bytes=stored.size_bytes,
                content_sha256=stored.sha256,
                blob_key=key,
                status=DocumentStatus.QUEUED,
                create_time=NOW,
                update_time=NOW,
                ingest_run_id="run-1",
                metadata={"team": "docs"},
            )
        )
        return DocumentRun(document_id, "run-1")

    async def document(self, run: DocumentRun) -> Document:
        found = await self.store.get_document(TENANT, run.document_id)
        assert found is not None
        return found

    async def run_files(self, runs: list[DocumentRun]) -> list[str]:
        """Keys of the blobs stored for the runs' artifacts."""
        keys: list[str] = []
        for run in runs:
            prefix = artifacts.run_prefix(TENANT, KB, run.document_id, run.run_id)
            keys += [str(p) for p in self.blob_root.glob(prefix + "**/*") if p.is_file()]
        return keys

    def progress(self, document_id: str) -> list[DocumentStatus]:
        """The statuses a document's progress events showed, in order, each once."""
        updates = [
            u
            for e in self.events
            if isinstance(e, DocumentsProgress)
            for u in e.updates
            if u.document_id == document_id
        ]
        return list(dict.fromkeys(u.stage for u in updates))

    def finished(self, document_id: str) -> list[FinishedDocument]:
        return [
            d
            for e in self.events
            if isinstance(e, DocumentsFinished)
            for d in e.documents
            if d.document_id == document_id
        ]

    def event_count(self) -> int:
        return len(self.events)


def batch_of(*runs: DocumentRun) -> IngestBatch:
    return IngestBatch(
        TENANT, "user-1", KB, list(runs), identity_token=workflow_token(Identity(TENANT, "user-1"))
    )


async def stage(world: World, name: str, batch: IngestBatch) -> tuple[IngestBatch, StageResult]:
    result: StageResult = await getattr(world.activities, name)(batch)
    return replace(batch, documents=result.remaining), result


async def ingest(world: World, batch: IngestBatch) -> IngestBatch:
    for name in STAGES:
        batch, _ = await stage(world, name, batch)
    return batch


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    store = IngestionStore(f"sqlite+aiosqlite:///{tmp_path}/ingestion.db")
    await store.open()
    await store.create_kb(
        KnowledgeBase(KB, TENANT, "kb", "", MODEL, DIMENSION, CHUNKING, False, "", NOW, NOW)
    )
    blob_root = tmp_path / "blobs"
    blobs = build_blob_store(str(blob_root))
    await blobs.start()
    parser = BudgetedParser(ParseLimits(), processes=1)
    await parser.start()
    yield World(store, blobs, blob_root, ModelHub(), Retrieval(), [], parser)
    await parser.stop()
    await blobs.close()
    await store.close()


async def test_a_batch_becomes_searchable_with_its_chunks_vectors_and_metadata(world: World) -> None:
    runs = [await world.add("alpha.md", guide("alpha")), await world.add("beta.md", guide("beta"))]
    left = await ingest(world, batch_of(*runs))

    assert left.documents == runs
    for run in runs:
        document = await world.document(run)
        assert document.status == DocumentStatus.READY
        assert document.progress.percent == 100.0
        assert document.chunk_count > 2  # more than one part of vectors
        assert document.title in ("alpha", "beta")
        chunks = [c for c in world.retrieval.chunks.values() if c.document_id == run.document_id]
        assert len(chunks) == document.chunk_count
        assert sorted(c.position for c in chunks) == list(range(document.chunk_count))
        for chunk in chunks:
            assert chunk.file_name == document.file_name and chunk.ingest_run_id == "run-1"
            assert chunk.knowledge_base_id == KB and chunk.metadata["doc.team"] == "docs"
            assert chunk.heading_path[0] == document.title
            (embedding,) = chunk.embeddings
            assert (embedding.model_id, embedding.dimension) == (MODEL, DIMENSION)
            # What was embedded: the heading path, then the text.
            assert embedding.values[0] == len(" > ".join(chunk.heading_path) + "\n" + chunk.text)
        info = world.retrieval.infos[run.document_id]
        assert info.status == rpb.DOCUMENT_STATUS_READY and info.title == document.title
        assert info.create_time.ToDatetime(tzinfo=UTC) == document.create_time
        assert (info.size_bytes, info.metadata["team"]) == (document.size_bytes, "docs")
        assert world.progress(run.document_id) == [
            DocumentStatus.PARSING,
            DocumentStatus.CHUNKING,
            DocumentStatus.EMBEDDING,
            DocumentStatus.INDEXING,
        ]
        (finished,) = world.finished(run.document_id)
        assert finished.status == DocumentStatus.READY and finished.chunk_count == document.chunk_count
    # Each chunk was embedded once.
    assert len(world.modelhub.texts()) == len(world.retrieval.chunks)
    for seconds in await world.store.stage_seconds(TENANT, KB):
        assert set(seconds) == {"parse", "chunk", "embed", "index"}


async def test_default_chunk_sizes_fit_what_the_embedding_model_reads(world: World) -> None:
    def long_section(title: str) -> bytes:  # one section of 500 counted tokens, no paragraph breaks
        return f"# {title}\n\n".encode() + " ".join(f"Fact {i} about {title}." for i in range(100)).encode()

    counter = HeuristicTokenCounter()
    await world.store.update_kb(TENANT, KB, chunking=ChunkingSettings())  # sizes left at the defaults
    world.modelhub.windows[MODEL] = 128  # reads 128 sub-word tokens: 85 counted tokens fit
    await ingest(world, batch_of(await world.add("narrow.md", long_section("narrow"))))
    narrow = [c for c in world.retrieval.chunks.values() if c.document_id == "doc-narrow-md"]
    assert len(narrow) >= 5
    assert max(counter.count(c.text) for c in narrow) <= fitted_size(128, DEFAULT_HEADING_MAX_SIZE) == 85

    # A model whose window is unknown keeps the plain default: the section is one or two chunks.
    world.modelhub.windows.clear()
    await ingest(world, batch_of(await world.add("unknown.md", long_section("unknown"))))
    unknown = [c for c in world.retrieval.chunks.values() if c.document_id == "doc-unknown-md"]
    assert len(unknown) <= 2 and max(counter.count(c.text) for c in unknown) > 85

    # With KS_INGESTION_CHUNK_SIZES_FIT_MODEL off (the default), the window is not asked for.
    world.modelhub.windows[MODEL] = 128
    world.activities.context = replace(world.activities.context, chunk_sizes_fit_model=False)
    await ingest(world, batch_of(await world.add("plain.md", long_section("plain"))))
    plain = [c for c in world.retrieval.chunks.values() if c.document_id == "doc-plain-md"]
    assert len(plain) <= 2 and max(counter.count(c.text) for c in plain) > 85
    world.activities.context = replace(world.activities.context, chunk_sizes_fit_model=True)

    # A size the knowledge base sets explicitly wins over the fitted default.
    await world.store.update_kb(TENANT, KB, chunking=ChunkingSettings(chunk_size_tokens=200))
    world.modelhub.windows[MODEL] = 128
    await ingest(world, batch_of(await world.add("chosen.md", long_section("chosen"))))
    chosen = [c for c in world.retrieval.chunks.values() if c.document_id == "doc-chosen-md"]
    assert max(counter.count(c.text) for c in chosen) > 85


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("", id="no-token"),
        pytest.param("forged.token.here", id="not-a-token"),
        pytest.param(workflow_token(Identity("other-tenant", "user-1")), id="another-tenants-token"),
        pytest.param(
            TokenAuthority.ephemeral("intruder").issue(Identity(TENANT, "user-1")), id="untrusted-signer"
        ),
    ],
)
async def test_a_workflow_input_whose_token_does_not_prove_its_tenant_touches_nothing(
    world: World, token: str
) -> None:
    run = await world.add("alpha.md", guide("alpha"))
    forged = replace(batch_of(run), identity_token=token)

    for attempt in (
        world.activities.parse_documents(forged),
        world.activities.fail_documents(FailInput(forged, "parse", "x", "forged", 1)),
    ):
        with pytest.raises(ApplicationError) as error:
            await attempt
        assert error.value.non_retryable and "identity is refused" in error.value.message

    document = await world.document(run)
    assert document.status == DocumentStatus.QUEUED and document.failure is None
    assert world.progress(run.document_id) == []


async def test_a_stage_giving_up_fails_only_the_documents_that_had_not_finished_it(world: World) -> None:
    done, stuck = await world.add("done.md", guide("done")), await world.add("stuck.md", guide("stuck"))
    await stage(world, "parse_documents", batch_of(done, stuck))
    await stage(world, "chunk_documents", batch_of(done))  # an earlier attempt got as far as this one

    result = await world.activities.fail_documents(
        FailInput(batch_of(done, stuck), "chunk", "stage_failed", "the chunker crashed", 3)
    )

    assert result.remaining == [done]
    assert (await world.document(done)).status == DocumentStatus.EMBEDDING
    failed = await world.document(stuck)
    assert failed.status == DocumentStatus.FAILED and failed.failure is not None
    assert (failed.failure.stage, failed.failure.reason) == (IngestionStage.CHUNK, "the chunker crashed")


def _zip_with_too_many_members() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for index in range(10_001):
            archive.writestr(f"m{index}", b"")
    return buffer.getvalue()


async def test_a_batch_moving_on_together_is_announced_in_one_event_per_step(world: World) -> None:
    runs = [
        await world.add(f"note-{n}.txt", f"Note {n}: the office opens at {n} o'clock.".encode())
        for n in range(12)
    ]
    await ingest(world, batch_of(*runs))

    for run in runs:
        assert world.progress(run.document_id) == [
            DocumentStatus.PARSING,
            DocumentStatus.CHUNKING,
            DocumentStatus.EMBEDDING,
            DocumentStatus.INDEXING,
        ]
        assert [d.status for d in world.finished(run.document_id)] == [DocumentStatus.READY]
    # Four steps of progress and one of finishing for the whole batch, not five per document.
    assert world.event_count() == 5


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("broken.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog" + os.urandom(2000), "corrupt_file"),
        ("blank.html", b"<html><body><script>var x = 1;</script></body></html>", "empty_document"),
        ("many.xlsx", _zip_with_too_many_members(), "archive_too_large"),
        ("tool.xyz", b"hello", "unsupported_format"),
    ],
)
async def test_a_file_that_cannot_be_parsed_fails_alone_with_the_parsers_code(
    world: World, name: str, data: bytes, code: str
) -> None:
    good, bad = await world.add("good.md", guide("good")), await world.add(name, data)
    after_parse, result = await stage(world, "parse_documents", batch_of(good, bad))

    assert result.remaining == [good]
    failed = await world.document(bad)
    assert failed.status == DocumentStatus.FAILED
    assert failed.failure is not None
    assert (failed.failure.stage, failed.failure.code) == (IngestionStage.PARSE, code)
    assert name in failed.failure.reason
    (finished,) = world.finished(bad.document_id)
    assert (finished.status, finished.failed_stage) == (DocumentStatus.FAILED, DocumentStatus.PARSING)
    assert not await world.run_files([bad])
    await ingest(world, after_parse)
    assert (await world.document(good)).status == DocumentStatus.READY


async def test_audio_needs_a_speech_model_and_gets_a_guessed_language(world: World) -> None:
    refused = await world.add("call.wav", b"RIFF....WAVE call")
    await stage(world, "parse_documents", batch_of(refused))
    failure = (await world.document(refused)).failure
    assert failure is not None and failure.code == "no_model_configured" and "ASR" in failure.reason

    world.modelhub.defaults.add(ModelType.ASR)
    world.modelhub.transcript = mpb.TranscribeResponse(
        text="Welcome to the call.\nThe cafeteria opens at eight."
    )
    heard = await world.add("meeting.wav", b"RIFF....WAVE meeting")
    await ingest(world, batch_of(heard))
    document = await world.document(heard)
    assert (document.status, document.title, document.language) == (DocumentStatus.READY, "meeting", "en")


async def test_a_document_superseded_between_stages_drops_out_and_its_run_is_cleared(world: World) -> None:
    kept, replaced = await world.add("kept.md", guide("kept")), await world.add("gone.md", guide("gone"))
    batch, _ = await stage(world, "parse_documents", batch_of(kept, replaced))
    assert await world.run_files([replaced])
    # A re-ingest gives the document a new run while this one is between stages.
    await world.store.update_document(TENANT, replaced.document_id, ingest_run_id="run-2")

    batch, result = await stage(world, "chunk_documents", batch)
    assert result.remaining == [kept]
    assert not await world.run_files([replaced])
    await ingest(world, batch)
    assert {c.document_id for c in world.retrieval.chunks.values()} == {kept.document_id}


async def test_a_retried_parse_stage_reuses_the_document_it_stored(world: World) -> None:
    run = await world.add("report.md", guide("report"))
    await stage(world, "parse_documents", batch_of(run))
    # The worker died after storing the parsed document, before recording the stage; the upload is gone.
    await world.store.update_document(TENANT, run.document_id, status=DocumentStatus.PARSING)
    await world.blobs.delete((await world.document(run)).blob_key)
    world.restart()

    _, result = await stage(world, "parse_documents", batch_of(run))
    assert result.remaining == [run]
    assert (await world.document(run)).title == "report"


@pytest.mark.parametrize("another_worker", [False, True])
async def test_a_retried_embed_stage_resumes_at_the_part_it_was_on(
    world: World, another_worker: bool
) -> None:
    run = await world.add("long.md", guide("resuming"))
    batch, _ = await stage(world, "parse_documents", batch_of(run))
    batch, _ = await stage(world, "chunk_documents", batch)
    chunk_count = (await world.document(run)).progress.chunks_total
    # One document's parts are embedded one after another: the third fails, as a crash would.
    world.modelhub.fail_next_embed(Unavailable("modelhub restarting"), after=2)
    with pytest.raises(ApplicationError) as error:
        await stage(world, "embed_chunks", batch)
    assert not error.value.non_retryable and error.value.type == "embedding_failed"
    assert (await world.document(run)).status == DocumentStatus.EMBEDDING
    first_attempt = world.modelhub.texts()
    assert len(first_attempt) == 4  # two parts of two chunks stored before the failure

    if another_worker:  # the first one died: what it stored is found in the object store
        world.restart()
    batch, _ = await stage(world, "embed_chunks", batch)
    second_attempt = world.modelhub.texts()[len(first_attempt) :]
    assert len(second_attempt) == chunk_count - 4
    assert not set(second_attempt) & set(first_attempt)
    await stage(world, "index_chunks", batch)
    assert len(world.retrieval.chunks) == chunk_count
    assert all(len(c.embeddings) == 1 for c in world.retrieval.chunks.values())


async def test_a_peer_refusing_fails_the_document_and_a_peer_away_is_retried(world: World) -> None:
    run = await world.add("doc.md", guide("refused"))
    batch, _ = await stage(world, "parse_documents", batch_of(run))
    batch, _ = await stage(world, "chunk_documents", batch)

    world.modelhub.fail_next_embed(Unavailable("no route to the model"))
    with pytest.raises(ApplicationError) as error:
        await stage(world, "embed_chunks", batch)
    assert error.value.type == "embedding_failed" and not error.value.non_retryable
    assert "embedding with embed-a: no route to the model" in error.value.message

    world.modelhub.fail_next_embed(InvalidArgument("texts: too long for the model"))
    _, result = await stage(world, "embed_chunks", batch)
    assert result.remaining == []
    failure = (await world.document(run)).failure
    assert failure is not None and failure.stage == IngestionStage.EMBED
    assert failure.code == "embedding_failed" and "too long for the model" in failure.reason


async def test_the_index_stage_embeds_for_a_migration_begun_after_the_embed_stage(
    world: World,
) -> None:
    run = await world.add("both.md", guide("both"))
    batch = batch_of(run)
    for name in STAGES[:3]:
        batch, _ = await stage(world, name, batch)
    await world.store.update_kb(
        TENANT,
        KB,
        migration=Migration(MODEL, NEW_MODEL, MigrationState.RUNNING, to_dimension=NEW_DIMENSION),
    )
    await stage(world, "index_chunks", batch)
    assert world.retrieval.chunks
    for chunk in world.retrieval.chunks.values():
        assert {(e.model_id, e.dimension) for e in chunk.embeddings} == {
            (MODEL, DIMENSION),
            (NEW_MODEL, NEW_DIMENSION),
        }


async def test_a_migration_embeds_every_searchable_document_then_switches_over(world: World) -> None:
    runs = [await world.add("one.md", guide("one")), await world.add("two.md", guide("two"))]
    await ingest(world, batch_of(*runs))
    await world.store.update_kb(
        TENANT,
        KB,
        migration=Migration(MODEL, NEW_MODEL, MigrationState.RUNNING, to_dimension=NEW_DIMENSION),
    )
    job = MigrateInput(
        TENANT, "user-1", KB, NEW_MODEL, identity_token=workflow_token(Identity(TENANT, "user-1"))
    )

    world.retrieval.refuse_configure = FailedPrecondition("chunks without vectors of embed-b")
    with pytest.raises(ApplicationError) as error:
        await world.activities.migrate_embeddings(job)
    assert error.value.type == "migration_incomplete" and not error.value.non_retryable
    embedded_once = len(world.modelhub.texts(NEW_MODEL))

    world.retrieval.refuse_configure = None
    await world.activities.migrate_embeddings(job)
    # The retry reused the vectors the first pass stored.
    assert len(world.modelhub.texts(NEW_MODEL)) == embedded_once
    assert world.retrieval.configured == [(NEW_MODEL, NEW_DIMENSION)]
    assert world.retrieval.embeddings_deleted == [MODEL]
    assert all(
        {e.model_id for e in c.embeddings} == {MODEL, NEW_MODEL} for c in world.retrieval.chunks.values()
    )
    kb = await world.store.get_kb(TENANT, KB)
    assert kb is not None and kb.migration is not None
    assert (kb.embedding_model_id, kb.embedding_dimension) == (NEW_MODEL, NEW_DIMENSION)
    assert (kb.migration.state, kb.migration.documents_done) == (MigrationState.COMPLETED, 2)


GRAPH_REPLY = json.dumps(
    {
        "entities": [
            {"name": "Acme Corp", "type": "organization", "description": "A robot maker.", "chunks": ["C1"]},
            {"name": "Berlin", "type": "location", "chunks": ["C1"]},
        ],
        "relations": [{"source": "Acme Corp", "target": "Berlin", "type": "based_in", "weight": 0.9}],
    }
)


async def _in_graph_stage(world: World, name: str) -> IngestBatch:
    await world.store.update_kb(TENANT, KB, graph_enabled=True)
    run = await world.add(name, f"# {name}\n\nAcme Corp is a robotics company based in Berlin.\n".encode())
    batch = await ingest(world, batch_of(run))
    assert (await world.document(run)).status == DocumentStatus.GRAPH
    assert world.progress(run.document_id)[-1] == DocumentStatus.GRAPH
    assert world.retrieval.infos[run.document_id].status == rpb.DOCUMENT_STATUS_GRAPH
    return batch


async def test_the_graph_stage_stores_what_the_llm_found_and_makes_the_document_ready(world: World) -> None:
    batch = await _in_graph_stage(world, "acme.md")
    world.modelhub.replies = [GRAPH_REPLY]
    result = await world.activities.extract_graph(batch)

    assert result.items == 3
    (run,) = batch.documents
    entities, relations = world.retrieval.graphs[run.document_id]
    assert [(e.name, e.type) for e in entities] == [("Acme Corp", "organization"), ("Berlin", "location")]
    assert entities[0].description == "A robot maker." and entities[0].source_chunk_ids
    assert [(r.source_name, r.type, r.target_name, r.weight) for r in relations] == [
        ("Acme Corp", "based_in", "Berlin", 0.9)
    ]
    document = await world.document(run)
    assert (document.status, document.warnings) == (DocumentStatus.READY, ())
    assert world.retrieval.infos[run.document_id].status == rpb.DOCUMENT_STATUS_READY
    assert world.finished(run.document_id)[0].status == DocumentStatus.READY


async def test_a_graph_llm_refusing_or_away_leaves_the_document_ready_with_a_warning(world: World) -> None:
    batch = await _in_graph_stage(world, "refused.md")
    (run,) = batch.documents
    world.modelhub.replies = [Unavailable("the model is overloaded")]
    with pytest.raises(ApplicationError) as error:
        await world.activities.extract_graph(batch)
    assert error.value.type == "graph_failed" and not error.value.non_retryable
    assert (await world.document(run)).status == DocumentStatus.GRAPH  # the workflow retries, then gives up

    code, reason = error.value.details[0]["code"], error.value.details[0]["reason"]
    await world.activities.finish_graph(GraphOutcome(batch, code, reason))
    document = await world.document(run)
    assert document.status == DocumentStatus.READY
    (warning,) = document.warnings
    assert (warning.stage, warning.code) == (IngestionStage.GRAPH, "graph_failed")
    assert "extracting entities with the LLM: the model is overloaded" in warning.reason

    again = await _in_graph_stage(world, "refused-again.md")
    world.modelhub.replies = [InvalidArgument("messages: the prompt is too long")]
    await world.activities.extract_graph(again)  # refused for good: ready at once, with the warning
    document = await world.document(again.documents[0])
    assert document.status == DocumentStatus.READY
    assert [w.code for w in document.warnings] == ["graph_failed"]
