"""The activities of IngestDocuments: one per stage, each idempotent and resumable.

Each stage activity works on a batch of documents together. For every document it first checks that
its run is still the document's current one (a re-ingest or a delete supersedes it) and records the
stage as the document's status; it ends by storing the document's output as an artifact and the time
it took (the status writes of a batch go in one transaction). Errors that a retry cannot fix are
raised as non-retryable ``PermanentFailure`` with a code and a readable reason: the document they
belong to is marked failed and leaves the batch. Anything else is retried by the workflow's policy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, NoReturn, TypeVar

import grpc
import structlog
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.convert import timestamp
from knowsphere_contracts.events import DocumentFinished, DocumentProgress, Event
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.adapters.peers import EmbedBatcher, ModelHub, Retrieval, WriteBatcher
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.domain import graph_extraction as gx
from knowsphere_ingestion.domain.chunking import ChunkDraft, chunk_document
from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.domain.records import (
    STAGE_SPAN,
    STAGE_STATUS,
    Document,
    Failure,
    KnowledgeBase,
    Progress,
)
from knowsphere_ingestion.formats import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from knowsphere_ingestion.parsing import ParseError, UnsupportedFormat, parse
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.storage.blobs import BlobNotFound, BlobStore
from knowsphere_ingestion.workflows import (
    PERMANENT,
    DocumentRun,
    FailInput,
    GraphOutcome,
    IngestBatch,
    IngestInput,
    MigrateInput,
    MigrationFailure,
    StageResult,
)
from knowsphere_ingestion.workflows import failure_details as _details
from knowsphere_runtime.identity import Identity, bound_identity

log = structlog.get_logger(__name__)
tracer = trace.get_tracer("knowsphere.ingestion")

Publish = Callable[[Event], Awaitable[None]]
T = TypeVar("T")

# gRPC codes a retry will not fix.
_PERMANENT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
PROGRESS_INTERVAL_SECONDS = 1.0
HEARTBEAT_EVERY_SECONDS = 2.0
GRAPH_BATCH_TOKENS = 1500
# Documents of a batch whose graph is extracted at once (each one's LLM calls go one after another).
GRAPH_DOCUMENTS_AT_ONCE = 4
# Where a status lies on the way; a stage skips documents already past it.
STATUS_ORDER = {
    status: n
    for n, status in enumerate(("queued", "parsing", "chunking", "embedding", "indexing", "graph", "ready"))
}
# Documents with more text than this are chunked on a thread, not on the event loop.
CHUNK_ON_LOOP_CHARS = 200_000
STATUS_PB = {
    "queued": rpb.DOCUMENT_STATUS_QUEUED,
    "parsing": rpb.DOCUMENT_STATUS_PARSING,
    "chunking": rpb.DOCUMENT_STATUS_CHUNKING,
    "embedding": rpb.DOCUMENT_STATUS_EMBEDDING,
    "indexing": rpb.DOCUMENT_STATUS_INDEXING,
    "graph": rpb.DOCUMENT_STATUS_GRAPH,
    "ready": rpb.DOCUMENT_STATUS_READY,
    "failed": rpb.DOCUMENT_STATUS_FAILED,
}


def permanent(code: str, reason: str) -> ApplicationError:
    attempt = activity.info().attempt if activity.in_activity() else 0
    return ApplicationError(
        reason, {"code": code, "reason": reason, "attempt": attempt}, type=PERMANENT, non_retryable=True
    )


def _retryable(code: str, reason: str) -> ApplicationError:
    attempt = activity.info().attempt if activity.in_activity() else 0
    return ApplicationError(reason, {"code": code, "reason": reason, "attempt": attempt}, type=code)


def parse_error_code(message: str) -> str:
    lowered = message.lower()
    if "encrypted" in lowered or "password" in lowered:
        return "encrypted"
    if "empty" in lowered:
        return "empty_document"
    if "limit" in lowered or "ratio" in lowered or "too large" in lowered:
        return "archive_too_large"
    return "corrupt_file"


def _raise_rpc(error: grpc.aio.AioRpcError, what: str, code: str) -> NoReturn:
    reason = f"{what}: {error.details() or error.code().name}"
    if error.code() in _PERMANENT_CODES:
        raise permanent(code, reason) from error
    raise _retryable(code, reason) from error


def _beat(*details: Any) -> None:
    """Heartbeat a regular activity; local ones are covered by their workflow task's own heartbeat."""
    if not activity.info().is_local:
        activity.heartbeat(*details)


async def _heartbeating(work: Awaitable[T]) -> T:
    """Awaits work running off the event loop, heartbeating meanwhile so a long parse is not taken for
    a dead worker (the heartbeat timeout is meant for crashes, not for big files)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS)
        if done:
            return task.result()
        _beat("working")


def embedding_text(chunk: ChunkDraft) -> str:
    """What is embedded for a chunk: its heading path as context, then its text."""
    if chunk.heading_path:
        return " > ".join(chunk.heading_path) + "\n" + chunk.text
    return chunk.text


@dataclass
class _Done:
    """What one document's stage produced: the values to record, and what to do once recorded."""

    items: int
    values: dict[str, Any]
    next_stage: str | None = None
    # Called after the batch's results are written, with whether this document's were (False: it was
    # deleted or re-ingested meanwhile).
    after: Callable[[bool], Awaitable[None]] | None = None


class _Stage:
    """The bookkeeping around one document's stage: status, progress events, timing."""

    def __init__(self, owner: IngestionActivities, job: IngestInput, stage: str, document: Document) -> None:
        self.owner = owner
        self.job = job
        self.stage = stage
        self.document = document
        self.started = time.perf_counter()
        self._last_progress = 0.0

    def percent(self, fraction: float) -> float:
        low, high = STAGE_SPAN[self.stage]
        return round(low + (high - low) * max(0.0, min(1.0, fraction)), 1)

    async def progress(
        self, done: int, total: int, progress: Progress, *, force: bool = False, eta: float | None = None
    ) -> None:
        now = time.perf_counter()
        if not force and now - self._last_progress < PROGRESS_INTERVAL_SECONDS:
            return
        self._last_progress = now
        progress = replace(progress, percent=self.percent(done / total if total else 0.0), eta_seconds=eta)
        updated = await self.owner.store.update_document(
            self.job.tenant_id, self.job.document_id, run_id=self.job.run_id, progress=progress
        )
        if updated is not None:
            self.document = updated
        await self.owner.emit_progress(self.job, STAGE_STATUS[self.stage], progress.percent, done, total, eta)


StageWork = Callable[[_Stage, KnowledgeBase], Awaitable[_Done]]


class IngestionActivities:
    def __init__(
        self,
        *,
        store: IngestionStore,
        blobs: BlobStore,
        modelhub: ModelHub,
        retrieval: Retrieval,
        batcher: EmbedBatcher,
        indexer: WriteBatcher[rpb.Chunk] | None = None,
        publish: Publish,
        parse_executor: Executor,
        index_batch_size: int = 128,
        vectors_per_artifact: int = 64,
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.modelhub = modelhub
        self.retrieval = retrieval
        self.batcher = batcher
        self.indexer = indexer or WriteBatcher(retrieval.index, batch_size=index_batch_size)
        # The metadata of documents finishing their index stage together goes in one call.
        self.infos: WriteBatcher[rpb.DocumentMetadata] = WriteBatcher(
            retrieval.put_document_infos, batch_size=index_batch_size
        )
        self.publish = publish
        self.parse_executor = parse_executor
        self.index_batch_size = index_batch_size
        self.vectors_per_artifact = vectors_per_artifact

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.parse_documents,
            self.chunk_documents,
            self.embed_chunks,
            self.index_chunks,
            self.extract_graph,
            self.finish_graph,
            self.fail_documents,
            self.migrate_embeddings,
            self.fail_migration,
        ]

    # --- shared ---------------------------------------------------------------------------------

    async def emit_progress(
        self, job: IngestInput, status: str, percent: float, done: int, total: int, eta: float | None
    ) -> None:
        try:
            await self.publish(
                DocumentProgress(
                    document_id=job.document_id,
                    knowledge_base_id=job.knowledge_base_id,
                    stage=status,  # type: ignore[arg-type]
                    percent=percent,
                    done=done,
                    total=total,
                    eta_seconds=eta,
                )
            )
        except Exception:  # progress is advisory; the status in the database is the truth
            log.warning("progress event not published", document_id=job.document_id, exc_info=True)

    async def _run_stage(self, batch: IngestBatch, stage: str, work: StageWork) -> StageResult:
        """Runs one stage for every document of the batch still on its way, together.

        Documents deleted or re-ingested meanwhile drop out; those that finished this stage in an
        earlier attempt are passed on untouched; one failing for good is marked failed and drops out
        while the others go on. Any other error is raised once the rest have finished, so a retry
        redoes only the documents that did not.
        """
        with bound_identity(Identity(batch.tenant_id, batch.user_id)):
            kb = await self._kb(batch)
            status = STAGE_STATUS[stage]
            jobs = batch.jobs()
            found = {
                d.id: d
                for d in await self.store.get_documents(batch.tenant_id, [j.document_id for j in jobs])
            }
            remaining: list[IngestInput] = []
            todo: list[tuple[IngestInput, Document]] = []
            for job in jobs:
                document = found.get(job.document_id)
                if document is None or document.ingest_run_id != job.run_id:
                    await self._superseded(job)
                elif document.status == "failed":
                    continue  # failed by an earlier attempt of this stage
                elif STATUS_ORDER[document.status] > STATUS_ORDER[status]:
                    remaining.append(job)  # finished this stage in an earlier attempt
                else:
                    todo.append((job, document))
            starting = [(job, d) for job, d in todo if d.status != status]
            low = STAGE_SPAN[stage][0]
            if starting:
                for job, document in starting:
                    found[job.document_id] = replace(
                        document,
                        status=status,
                        progress=replace(document.progress, percent=low, eta_seconds=None),
                    )
                await self.store.set_stage(
                    batch.tenant_id,
                    [(job.document_id, job.run_id, found[job.document_id].progress) for job, _ in starting],
                    status,
                )
                for job, _ in starting:
                    await self.emit_progress(job, status, low, 0, 0, None)
            stages = [_Stage(self, job, stage, found[job.document_id]) for job, _ in todo]
            outcomes = await asyncio.gather(*(work(s, kb) for s in stages), return_exceptions=True)
            finished: list[tuple[_Stage, _Done]] = []
            retry: BaseException | None = None
            for current, outcome in zip(stages, outcomes, strict=True):
                if isinstance(outcome, _Done):
                    finished.append((current, outcome))
                elif isinstance(outcome, ApplicationError) and outcome.type == PERMANENT:
                    code, reason, attempts = _details(outcome)
                    if code == "superseded":
                        await self._superseded(current.job)
                    else:
                        await self._fail_one(current.job, stage, code, reason, attempts)
                elif isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                elif retry is None:
                    retry = outcome
            recorded = await self.store.finish_stages(
                batch.tenant_id,
                stage,
                [
                    (
                        s.job.document_id,
                        s.job.run_id,
                        time.perf_counter() - s.started,
                        {
                            **done.values,
                            **({"status": STAGE_STATUS[done.next_stage]} if done.next_stage else {}),
                        },
                    )
                    for s, done in finished
                ],
            )
            items = 0
            for current, done in finished:
                ok = current.job.document_id in recorded
                if done.after is not None:
                    await done.after(ok)
                if not ok:
                    await self._superseded(current.job)
                    continue
                items += done.items
                remaining.append(current.job)
                if done.next_stage is not None:
                    progress = done.values.get("progress", current.document.progress)
                    await self.emit_progress(
                        current.job, STAGE_STATUS[done.next_stage], progress.percent, 0, 0, None
                    )
            if retry is not None:
                raise retry
            order = {job.document_id: n for n, job in enumerate(jobs)}
            remaining.sort(key=lambda job: order[job.document_id])
            return StageResult(
                items=items,
                graph_enabled=kb.graph_enabled,
                remaining=[DocumentRun(job.document_id, job.run_id) for job in remaining],
            )

    async def _superseded(self, job: IngestInput) -> None:
        """A document deleted or re-ingested while this run worked on it: drop what this run stored."""
        await self.blobs.delete_prefix(self._run_prefix(job))

    async def _kb(self, batch: IngestBatch | IngestInput) -> KnowledgeBase:
        kb = await self.store.get_kb(batch.tenant_id, batch.knowledge_base_id, with_counts=False)
        if kb is None:
            raise permanent(
                "knowledge_base_deleted", f"knowledge base {batch.knowledge_base_id} no longer exists"
            )
        return kb

    def _run_prefix(self, job: IngestInput) -> str:
        return artifacts.run_prefix(job.tenant_id, job.knowledge_base_id, job.document_id, job.run_id)

    async def _chunks(self, job: IngestInput) -> list[ChunkDraft]:
        try:
            data = await artifacts.get_json(self.blobs, self._run_prefix(job) + "chunks.json")
        except BlobNotFound as error:
            raise _retryable(
                "artifact_missing", "the chunks of this run are missing; chunking again"
            ) from error
        return artifacts.chunks_from_json(data)

    # --- parse ----------------------------------------------------------------------------------

    @activity.defn(name="parse_documents")
    async def parse_documents(self, batch: IngestBatch) -> StageResult:
        return await self._run_stage(batch, "parse", self._parse_one)

    async def _parse_one(self, stage: _Stage, kb: KnowledgeBase) -> _Done:
        job, document = stage.job, stage.document
        key = self._run_prefix(job) + "parsed.json"
        if await self.blobs.exists(key):
            parsed = artifacts.parsed_from_json(await artifacts.get_json(self.blobs, key))
        else:
            try:
                data = await self.blobs.read(document.blob_key)
            except BlobNotFound as error:
                raise permanent(
                    "file_missing", "the uploaded file is no longer in the object store"
                ) from error
            parsed = await self._parse(document, data)
            await artifacts.put_json(self.blobs, key, artifacts.parsed_to_json(parsed))
        progress = replace(
            document.progress,
            pages_parsed=parsed.page_count,
            pages_total=parsed.page_count,
            percent=STAGE_SPAN["parse"][1],
        )
        return _Done(
            items=parsed.page_count,
            next_stage="chunk",
            values={
                "title": parsed.title,
                "page_count": parsed.page_count,
                "language": parsed.language,
                "progress": progress,
                "warnings": list(document.warnings) + self._parse_warnings(parsed),
            },
        )

    def _parse_warnings(self, parsed: ParsedDocument) -> list[Failure]:
        missing = parsed.metadata.get("ocr_missing_pages", "")
        if not missing:
            return []
        return [
            Failure(
                stage="parse",
                code="ocr_unavailable",
                reason=f"pages {missing} have no text layer and OCR is not available; they were skipped",
                time=datetime.now(UTC),
            )
        ]

    async def _parse(self, document: Document, data: bytes) -> ParsedDocument:
        extension = PurePath(document.file_name).suffix.lower()
        if extension in AUDIO_EXTENSIONS:
            return await self._transcribe(document, data)
        loop = asyncio.get_running_loop()
        with tracer.start_as_current_span("ingestion.parse_file") as span:
            span.set_attribute("ks.document.id", document.id)
            span.set_attribute("ks.file.extension", extension)
            span.set_attribute("ks.file.size_bytes", len(data))
            try:
                parsed = await _heartbeating(
                    loop.run_in_executor(
                        self.parse_executor, parse, data, document.file_name, document.content_type
                    )
                )
            except UnsupportedFormat as error:
                raise permanent("unsupported_format", str(error)) from error
            except ParseError as error:
                raise permanent(parse_error_code(str(error)), str(error)) from error
            span.set_attribute("ks.document.pages", parsed.page_count)
            span.set_attribute("ks.document.blocks", len(parsed.blocks))
        if extension in IMAGE_EXTENSIONS:
            parsed = await self._describe_image(document, data, parsed)
        if not parsed.language:
            parsed = replace(parsed, language=guess_language(parsed.text[:20000]))
        return parsed

    async def _describe_image(
        self, document: Document, data: bytes, parsed: ParsedDocument
    ) -> ParsedDocument:
        try:
            if not await self.modelhub.has_vlm():
                return parsed
            description = await self.modelhub.describe_image(
                data, document.content_type or "image/png", parsed.language or "en"
            )
        except grpc.aio.AioRpcError as error:
            _raise_rpc(error, "describing the image", "vlm_failed")
        if not description.strip():
            return parsed
        block = Block(kind="image", text=description.strip())
        return replace(parsed, blocks=[*parsed.blocks, block], metadata={**parsed.metadata, "vlm": "1"})

    async def _transcribe(self, document: Document, data: bytes) -> ParsedDocument:
        try:
            if not await self.modelhub.has_asr():
                raise permanent(
                    "no_model_configured", "audio needs a speech-to-text (ASR) model; none is set"
                )
            text, language = await self.modelhub.transcribe(
                data, document.content_type, document.file_name, ""
            )
        except grpc.aio.AioRpcError as error:
            _raise_rpc(error, "transcribing the audio", "asr_failed")
        paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
        if not paragraphs:
            raise permanent("empty_document", "the transcript of the audio is empty")
        blocks = [Block(kind="paragraph", text=p) for p in paragraphs]
        # Providers answering OpenAI's plain "json" format name no language: guess it, as for files.
        language = language or guess_language(text[:20000])
        return ParsedDocument(blocks=blocks, title=PurePath(document.file_name).stem, language=language)

    # --- chunk ----------------------------------------------------------------------------------

    @activity.defn(name="chunk_documents")
    async def chunk_documents(self, batch: IngestBatch) -> StageResult:
        return await self._run_stage(batch, "chunk", self._chunk_one)

    async def _chunk_one(self, stage: _Stage, kb: KnowledgeBase) -> _Done:
        job = stage.job
        prefix = self._run_prefix(job)
        try:
            parsed = artifacts.parsed_from_json(await artifacts.get_json(self.blobs, prefix + "parsed.json"))
        except BlobNotFound as error:
            raise _retryable("artifact_missing", "the parsed document of this run is missing") from error
        config = kb.chunking.to_config()
        if sum(len(b.text) for b in parsed.blocks) <= CHUNK_ON_LOOP_CHARS:
            # Milliseconds of work: on the loop, where a thread hop would cost more than the work.
            chunks = chunk_document(job.document_id, parsed, config)
        else:
            loop = asyncio.get_running_loop()
            chunks = await _heartbeating(
                loop.run_in_executor(None, chunk_document, job.document_id, parsed, config)
            )
        if not chunks:
            raise permanent("empty_document", f"{stage.document.file_name} contains no text to index")
        await artifacts.put_json(self.blobs, prefix + "chunks.json", artifacts.chunks_to_json(chunks))
        progress = replace(stage.document.progress, chunks_total=len(chunks), percent=STAGE_SPAN["chunk"][1])
        return _Done(items=len(chunks), next_stage="embed", values={"progress": progress})

    # --- embed ----------------------------------------------------------------------------------

    async def _embed_part(
        self, prefix: str, model_id: str, dimension: int, number: int, part: Sequence[ChunkDraft]
    ) -> bool:
        """Embeds one part of a document's chunks with one model unless stored already; True if it did."""
        key = artifacts.vectors_key(prefix, model_id, number)
        if await self.blobs.exists(key):
            return False
        try:
            vectors = await self.batcher.embed(model_id, [embedding_text(c) for c in part])
        except grpc.aio.AioRpcError as error:
            _raise_rpc(error, f"embedding with {model_id}", "embedding_failed")
        if len(vectors) != len(part) or any(len(v) != dimension for v in vectors):
            raise permanent(
                "embedding_failed",
                f"{model_id} returned vectors of the wrong count or dimension "
                f"(expected {len(part)} × {dimension})",
            )
        await artifacts.put_json(self.blobs, key, artifacts.vectors_to_json(vectors))
        return True

    async def _vectors(self, prefix: str, model_id: str, count: int) -> list[list[float]]:
        per = self.vectors_per_artifact
        vectors: list[list[float]] = []
        for number in range((count + per - 1) // per):
            key = artifacts.vectors_key(prefix, model_id, number)
            try:
                vectors.extend(artifacts.vectors_from_json(await artifacts.get_json(self.blobs, key)))
            except BlobNotFound as error:
                raise _retryable(
                    "artifact_missing", f"{model_id} vectors of batch {number} are missing"
                ) from error
        return vectors

    @staticmethod
    def _models(kb: KnowledgeBase) -> list[tuple[str, int]]:
        """The models a document is embedded with: the active one, and a migration's target meanwhile."""
        models = [(kb.embedding_model_id, kb.embedding_dimension)]
        migration = kb.migration
        if (
            migration is not None
            and migration.state == "running"
            and migration.to_model_id != kb.embedding_model_id
        ):
            models.append((migration.to_model_id, migration.to_dimension))
        return models

    @activity.defn(name="embed_chunks")
    async def embed_chunks(self, batch: IngestBatch) -> StageResult:
        return await self._run_stage(batch, "embed", self._embed_one)

    async def _embed_one(self, stage: _Stage, kb: KnowledgeBase) -> _Done:
        job = stage.job
        chunks = await self._chunks(job)
        prefix = self._run_prefix(job)
        per = self.vectors_per_artifact
        parts = [chunks[i : i + per] for i in range(0, len(chunks), per)]
        done = 0
        embedded_now = 0
        progress = replace(stage.document.progress, chunks_total=len(chunks))
        with tracer.start_as_current_span("ingestion.embed_batches") as span:
            span.set_attribute("ks.document.id", job.document_id)
            span.set_attribute("ks.embedding.model_id", kb.embedding_model_id)
            span.set_attribute("ks.chunks", len(chunks))
            for number, part in enumerate(parts):
                fresh = False
                for model_id, dimension in self._models(kb):
                    fresh = await self._embed_part(prefix, model_id, dimension, number, part) or fresh
                if fresh:
                    embedded_now += len(part)
                done += len(part)
                _beat(number)
                progress = replace(progress, chunks_embedded=done)
                if len(parts) > 1:  # a one-part document goes straight on to its finish
                    elapsed = time.perf_counter() - stage.started
                    eta = (len(chunks) - done) * elapsed / embedded_now if embedded_now else None
                    await stage.progress(done, len(chunks), progress, force=number == len(parts) - 1, eta=eta)
            span.set_attribute("ks.chunks.resumed", len(chunks) - embedded_now)
        progress = replace(progress, percent=STAGE_SPAN["embed"][1], eta_seconds=None)
        return _Done(items=len(chunks), next_stage="index", values={"progress": progress})

    # --- index ----------------------------------------------------------------------------------

    @activity.defn(name="index_chunks")
    async def index_chunks(self, batch: IngestBatch) -> StageResult:
        return await self._run_stage(batch, "index", self._index_one)

    async def _index_one(self, stage: _Stage, kb: KnowledgeBase) -> _Done:
        job, document = stage.job, stage.document
        chunks = await self._chunks(job)
        prefix = self._run_prefix(job)
        per = self.vectors_per_artifact
        embeddings = []
        for model_id, dimension in self._models(kb):
            # A migration may have started after the embed stage: embed for its target now.
            for number in range(0, (len(chunks) + per - 1) // per):
                part = chunks[number * per : (number + 1) * per]
                await self._embed_part(prefix, model_id, dimension, number, part)
            embeddings.append((model_id, await self._vectors(prefix, model_id, len(chunks))))
        messages = [
            self._chunk_message(job, document, c, [(m, vectors[i]) for m, vectors in embeddings])
            for i, c in enumerate(chunks)
        ]
        progress = replace(document.progress, chunks_total=len(chunks), chunks_embedded=len(chunks))
        status = "graph" if kb.graph_enabled else "ready"
        try:
            for start in range(0, len(messages), self.index_batch_size):
                if start:  # the first batch was checked as the stage began
                    await self._still_current(job)
                await self.indexer.write(messages[start : start + self.index_batch_size])
                done = min(len(messages), start + self.index_batch_size)
                _beat(done)
                progress = replace(progress, chunks_indexed=done)
                if done < len(messages):
                    await stage.progress(done, len(messages), progress)
            if document.ready_time is not None:  # indexed by an earlier run: drop its chunks
                await self.retrieval.prune(job.knowledge_base_id, job.document_id, job.run_id)
            await self.infos.write([self._info(document, status, len(chunks))])
        except grpc.aio.AioRpcError as error:
            _raise_rpc(error, "indexing into retrieval", "indexing_failed")

        async def after(recorded: bool) -> None:
            if not recorded:
                # Deleted while the last batch was being written: take back what this run indexed.
                await self.retrieval.delete_document(job.knowledge_base_id, job.document_id)
            elif status == "ready":
                await self._finished(job, "ready", len(chunks))
            else:
                await self.emit_progress(job, "graph", STAGE_SPAN["graph"][0], 0, len(chunks), None)

        percent = 100.0 if status == "ready" else STAGE_SPAN["graph"][0]
        return _Done(
            items=len(chunks),
            values={
                "status": status,
                "chunk_count": len(chunks),
                "ready_time": datetime.now(UTC),
                "failure": None,
                "progress": replace(progress, percent=percent),
            },
            after=after,
        )

    async def _still_current(self, job: IngestInput) -> None:
        document = await self.store.get_document(job.tenant_id, job.document_id)
        if document is None or document.ingest_run_id != job.run_id:
            raise permanent(
                "superseded", "the document was deleted or re-ingested while this run was working"
            )

    def _chunk_message(
        self,
        job: IngestInput,
        document: Document,
        chunk: ChunkDraft,
        vectors: Sequence[tuple[str, list[float]]],
    ) -> rpb.Chunk:
        return rpb.Chunk(
            id=chunk.id,
            document_id=job.document_id,
            knowledge_base_id=job.knowledge_base_id,
            file_name=document.file_name,
            text=chunk.text,
            parent_id=chunk.parent_id,
            parent_text=chunk.parent_text,
            position=chunk.position,
            heading_path=list(chunk.heading_path),
            page=chunk.page,
            embeddings=[
                rpb.ChunkEmbedding(model_id=model_id, dimension=len(vector), values=vector)
                for model_id, vector in vectors
            ],
            metadata={**chunk.metadata, **{f"doc.{k}": v for k, v in document.metadata.items()}},
            ingest_run_id=job.run_id,
            token_count=chunk.token_count,
        )

    def _info(self, document: Document, status: str, chunk_count: int) -> rpb.DocumentMetadata:
        return rpb.DocumentMetadata(
            document_id=document.id,
            knowledge_base_id=document.knowledge_base_id,
            file_name=document.file_name,
            title=document.title,
            content_type=document.content_type,
            size_bytes=document.size_bytes,
            page_count=document.page_count,
            language=document.language,
            status=STATUS_PB[status],  # type: ignore[arg-type]
            create_time=timestamp(document.create_time),
            metadata=document.metadata,
        )

    async def _finished(
        self, job: IngestInput, status: str, chunk_count: int, failure: Failure | None = None
    ) -> None:
        try:
            await self.publish(
                DocumentFinished(
                    document_id=job.document_id,
                    knowledge_base_id=job.knowledge_base_id,
                    status=status,  # type: ignore[arg-type]
                    failed_stage=STAGE_STATUS.get(failure.stage) if failure else None,
                    reason=failure.reason if failure else None,
                    chunk_count=chunk_count,
                )
            )
        except Exception:
            log.warning("finished event not published", document_id=job.document_id, exc_info=True)

    # --- graph ----------------------------------------------------------------------------------

    @activity.defn(name="extract_graph")
    async def extract_graph(self, batch: IngestBatch) -> StageResult:
        """Extracts and stores the graph of each document still in the graph stage, then makes it ready.

        A document whose extraction fails for good becomes ready with a warning; an error a retry may
        fix is raised once the others are done, so the retry redoes only the rest.
        """
        with bound_identity(Identity(batch.tenant_id, batch.user_id)):
            jobs = batch.jobs()
            found = {
                d.id: d
                for d in await self.store.get_documents(batch.tenant_id, [j.document_id for j in jobs])
            }
            current = [
                (job, found[job.document_id])
                for job in jobs
                if job.document_id in found
                and found[job.document_id].ingest_run_id == job.run_id
                and found[job.document_id].status == "graph"
            ]
            limit = asyncio.Semaphore(GRAPH_DOCUMENTS_AT_ONCE)

            async def one(job: IngestInput, document: Document) -> int:
                async with limit:
                    return await self._graph_one(job, document)

            outcomes = await asyncio.gather(
                *(one(job, document) for job, document in current), return_exceptions=True
            )
            items = 0
            retry: BaseException | None = None
            for (job, _), outcome in zip(current, outcomes, strict=True):
                if isinstance(outcome, int):
                    items += outcome
                    await self._graph_done(job)
                elif isinstance(outcome, ApplicationError) and outcome.type == PERMANENT:
                    code, reason, _ = _details(outcome)
                    await self._graph_done(job, code, reason)
                elif isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                elif retry is None:
                    retry = outcome
            if retry is not None:
                raise retry
            return StageResult(items=items, graph_enabled=True, remaining=batch.documents)

    async def _graph_one(self, job: IngestInput, document: Document) -> int:
        stage = _Stage(self, job, "graph", document)
        chunks = await self._chunks(job)
        batches = gx.batch_chunks(
            [gx.ChunkText(id=c.id, text=c.text, heading_path=c.heading_path) for c in chunks],
            GRAPH_BATCH_TOKENS,
        )
        results: list[gx.GraphExtraction] = []
        unreadable: list[str] = []
        done = 0
        progress = document.progress
        for number, batch in enumerate(batches):
            messages = gx.build_extraction_messages(batch, document.language or "en")
            try:
                raw = await self.modelhub.complete(messages, purpose="graph_extraction")
            except grpc.aio.AioRpcError as error:
                _raise_rpc(error, "extracting entities with the LLM", "graph_failed")
            try:
                results.append(gx.parse_extraction(raw, batch))
            except gx.ExtractionOutputError as error:
                log.warning("graph extraction output unreadable", batch=number, reason=str(error))
                unreadable.append(str(error))
            done += len(batch)
            _beat(number)
            progress = replace(progress, chunks_graphed=done)
            await stage.progress(done, len(chunks), progress)
        if batches and len(unreadable) == len(batches):
            # Not one reply could be read: an empty graph would hide that the stage did nothing.
            raise permanent(
                "graph_failed",
                f"none of the LLM's {len(batches)} replies held entities and relations: {unreadable[-1]}",
            )
        merged = gx.merge_extractions(results)
        entities = [
            rpb.EntityInput(
                name=e.name,
                type=e.type,
                description=e.description,
                aliases=list(e.aliases),
                source_chunk_ids=list(e.source_chunk_ids),
            )
            for e in merged.entities
        ]
        relations = [
            rpb.RelationInput(
                source_name=r.source_name,
                target_name=r.target_name,
                type=r.type,
                description=r.description,
                weight=r.weight,
                source_chunk_ids=list(r.source_chunk_ids),
            )
            for r in merged.relations
        ]
        try:
            await self.retrieval.index_graph(job.knowledge_base_id, job.document_id, entities, relations)
        except grpc.aio.AioRpcError as error:
            _raise_rpc(error, "storing the graph", "graph_failed")
        seconds = time.perf_counter() - stage.started
        await self.store.finish_stages(
            job.tenant_id,
            "graph",
            [
                (
                    job.document_id,
                    job.run_id,
                    seconds,
                    {"progress": replace(progress, chunks_graphed=len(chunks))},
                )
            ],
        )
        return len(entities) + len(relations)

    async def _graph_done(self, job: IngestInput, failure_code: str = "", failure_reason: str = "") -> None:
        """Makes a document in the graph stage ready, with a warning when its extraction failed."""
        document = await self.store.get_document(job.tenant_id, job.document_id)
        if document is None or document.ingest_run_id != job.run_id or document.status != "graph":
            return
        warnings = list(document.warnings)
        if failure_code:
            warnings.append(
                Failure(
                    stage="graph",
                    code=failure_code,
                    reason=f"entity extraction failed; the document is searchable without it: "
                    f"{failure_reason}",
                    time=datetime.now(UTC),
                )
            )
        updated = await self.store.update_document(
            job.tenant_id,
            job.document_id,
            run_id=job.run_id,
            status="ready",
            warnings=warnings,
            progress=replace(document.progress, percent=100.0, eta_seconds=None),
        )
        if updated is None:
            return
        try:
            await self.infos.write([self._info(updated, "ready", updated.chunk_count)])
        except grpc.aio.AioRpcError as error:
            _raise_rpc(error, "recording the document in retrieval", "indexing_failed")
        await self._finished(job, "ready", updated.chunk_count)

    @activity.defn(name="finish_graph")
    async def finish_graph(self, outcome: GraphOutcome) -> None:
        """After the graph stage gave up: the documents still in it become ready with the reason."""
        batch = outcome.batch
        with bound_identity(Identity(batch.tenant_id, batch.user_id)):
            for job in batch.jobs():
                await self._graph_done(job, outcome.failure_code, outcome.failure_reason)

    # --- failure --------------------------------------------------------------------------------

    @activity.defn(name="fail_documents")
    async def fail_documents(self, failed: FailInput) -> None:
        """A stage gave up for the whole batch: every document still in it is marked failed."""
        batch = failed.batch
        with bound_identity(Identity(batch.tenant_id, batch.user_id)):
            for job in batch.jobs():
                await self._fail_one(job, failed.stage, failed.code, failed.reason, failed.attempts)

    async def _fail_one(self, job: IngestInput, stage: str, code: str, reason: str, attempts: int) -> None:
        """Removes what this run indexed and its artifacts; marks the document failed with the reason."""
        document = await self.store.get_document(job.tenant_id, job.document_id)
        if document is None or document.ingest_run_id != job.run_id or document.status == "failed":
            return  # deleted or superseded (whoever did that owns the clean-up), or failed already
        if stage in ("index", "graph") or document.chunk_count > 0:
            await self.retrieval.delete_document(job.knowledge_base_id, job.document_id)
        await self.blobs.delete_prefix(self._run_prefix(job))
        failure = Failure(
            stage=stage,
            code=code,
            reason=reason,
            attempts=max(1, attempts),
            time=datetime.now(UTC),
        )
        await self.store.update_document(
            job.tenant_id,
            job.document_id,
            run_id=job.run_id,
            status="failed",
            failure=failure,
            chunk_count=0,
            progress=replace(document.progress, eta_seconds=None),
        )
        log.info("document failed", document_id=job.document_id, stage=stage, code=code)
        await self._finished(job, "failed", 0, failure)

    # --- embedding-model migration --------------------------------------------------------------

    @activity.defn(name="migrate_embeddings")
    async def migrate_embeddings(self, job: MigrateInput) -> None:
        """Embeds every searchable document with the target model, then switches retrieval to it."""
        with bound_identity(Identity(job.tenant_id, job.user_id)):
            kb = await self.store.get_kb(job.tenant_id, job.knowledge_base_id)
            migration = kb.migration if kb is not None else None
            if (
                kb is None
                or migration is None
                or migration.state != "running"
                or migration.to_model_id != job.to_model_id
            ):
                return  # deleted, superseded or already finished
            documents = sorted(
                await self.store.kb_documents(job.tenant_id, kb.id, ["ready", "graph"]), key=lambda d: d.id
            )
            per = self.vectors_per_artifact
            for number, document in enumerate(documents):
                ingest = IngestInput(job.tenant_id, job.user_id, document.id, kb.id, document.ingest_run_id)
                prefix = self._run_prefix(ingest)
                chunks = await self._chunks(ingest)
                for part_number in range(0, (len(chunks) + per - 1) // per):
                    part = chunks[part_number * per : (part_number + 1) * per]
                    await self._embed_part(prefix, job.to_model_id, migration.to_dimension, part_number, part)
                    _beat(number)
                vectors = await self._vectors(prefix, job.to_model_id, len(chunks))
                messages = [
                    self._chunk_message(ingest, document, c, [(job.to_model_id, vectors[i])])
                    for i, c in enumerate(chunks)
                ]
                try:
                    for start in range(0, len(messages), self.index_batch_size):
                        await self.retrieval.index(messages[start : start + self.index_batch_size])
                except grpc.aio.AioRpcError as error:
                    _raise_rpc(error, "indexing the new model's vectors", "indexing_failed")
                await self.store.update_kb(
                    job.tenant_id,
                    kb.id,
                    migration=replace(migration, documents_done=number + 1, documents_total=len(documents)),
                )
            try:
                await self.retrieval.configure(
                    kb.id, job.to_model_id, migration.to_dimension, kb.language_hint, kb.graph_enabled
                )
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    # Documents became searchable meanwhile with only the old model: another pass.
                    raise _retryable(
                        "migration_incomplete", error.details() or "chunks without vectors"
                    ) from error
                _raise_rpc(error, "switching retrieval to the new model", "migration_failed")
            await self.store.update_kb(
                job.tenant_id,
                kb.id,
                embedding_model_id=job.to_model_id,
                embedding_dimension=migration.to_dimension,
                migration=replace(
                    migration,
                    state="completed",
                    documents_done=len(documents),
                    documents_total=len(documents),
                    end_time=datetime.now(UTC),
                ),
            )
            try:
                await self.retrieval.delete_embeddings(kb.id, migration.from_model_id)
            except grpc.aio.AioRpcError:
                log.warning("old vectors not deleted", knowledge_base_id=kb.id, model=migration.from_model_id)
            log.info("embedding migration completed", knowledge_base_id=kb.id, model=job.to_model_id)

    @activity.defn(name="fail_migration")
    async def fail_migration(self, failed: MigrationFailure) -> None:
        job = failed.job
        with bound_identity(Identity(job.tenant_id, job.user_id)):
            kb = await self.store.get_kb(job.tenant_id, job.knowledge_base_id)
            if kb is None or kb.migration is None or kb.migration.to_model_id != job.to_model_id:
                return
            await self.store.update_kb(
                job.tenant_id,
                kb.id,
                migration=replace(
                    kb.migration, state="failed", failure_reason=failed.reason, end_time=datetime.now(UTC)
                ),
            )
            try:
                await self.retrieval.delete_embeddings(kb.id, job.to_model_id)
            except grpc.aio.AioRpcError:
                log.warning("new vectors not deleted", knowledge_base_id=kb.id, model=job.to_model_id)
