"""The gRPC face of ingestion: knowledge bases, uploads, document status and progress.

Handlers read the tenant from the caller's identity and pass it to every store call, so ids of another
tenant's knowledge bases or documents answer NOT_FOUND. Bad input answers INVALID_ARGUMENT naming the
field and the limit, before anything is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf.duration_pb2 import Duration
from opentelemetry import trace
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_contracts.convert import timestamp
from knowsphere_contracts.services import CONTRACTS
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.adapters.peers import EmbeddingModel, ModelHub, Retrieval
from knowsphere_ingestion.adapters.store import (
    DuplicateContent,
    DuplicateName,
    IngestionStore,
    decode_page_token,
    encode_page_token,
)
from knowsphere_ingestion.api.feed import ProgressFeed
from knowsphere_ingestion.domain.records import (
    TERMINAL,
    ChunkingSettings,
    Document,
    Failure,
    KnowledgeBase,
    Migration,
    Progress,
)
from knowsphere_ingestion.formats import BY_EXTENSION, FILE_TYPES, check_content, extension_of
from knowsphere_ingestion.parsing.ocr import ocr_available
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore, BlobTooLarge
from knowsphere_ingestion.workflows import (
    MIGRATION_WORKFLOW_NAME,
    WORKFLOW_NAME,
    DocumentRun,
    IngestBatch,
    MigrateInput,
    migration_workflow_id,
    workflow_id,
)
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid, not_found

log = structlog.get_logger(__name__)
tracer = trace.get_tracer("knowsphere.ingestion")
T = TypeVar("T")

SNIFF_BYTES = 8192
DELETE_WAIT_SECONDS = 30.0

STATUS_TO_PB = {
    "queued": pb.DOCUMENT_STATUS_QUEUED,
    "parsing": pb.DOCUMENT_STATUS_PARSING,
    "chunking": pb.DOCUMENT_STATUS_CHUNKING,
    "embedding": pb.DOCUMENT_STATUS_EMBEDDING,
    "indexing": pb.DOCUMENT_STATUS_INDEXING,
    "graph": pb.DOCUMENT_STATUS_GRAPH,
    "ready": pb.DOCUMENT_STATUS_READY,
    "failed": pb.DOCUMENT_STATUS_FAILED,
}
PB_TO_STATUS = {value: key for key, value in STATUS_TO_PB.items()}
STAGE_TO_PB = {
    "parse": pb.INGESTION_STAGE_PARSE,
    "chunk": pb.INGESTION_STAGE_CHUNK,
    "embed": pb.INGESTION_STAGE_EMBED,
    "index": pb.INGESTION_STAGE_INDEX,
    "graph": pb.INGESTION_STAGE_GRAPH,
}
MIGRATION_TO_PB = {
    "running": pb.MIGRATION_STATE_RUNNING,
    "completed": pb.MIGRATION_STATE_COMPLETED,
    "failed": pb.MIGRATION_STATE_FAILED,
}


def _failure_pb(failure: Failure) -> pb.StageFailure:
    return pb.StageFailure(
        stage=STAGE_TO_PB.get(failure.stage, pb.INGESTION_STAGE_UNSPECIFIED),  # type: ignore[arg-type]
        code=failure.code,
        reason=failure.reason,
        attempts=failure.attempts,
        time=timestamp(failure.time),
    )


def progress_pb(document: Document) -> pb.DocumentProgress:
    progress = document.progress
    message = pb.DocumentProgress(
        document_id=document.id,
        knowledge_base_id=document.knowledge_base_id,
        status=STATUS_TO_PB[document.status],  # type: ignore[arg-type]
        percent=round(progress.percent),
        pages_parsed=progress.pages_parsed,
        pages_total=progress.pages_total,
        chunks_total=progress.chunks_total,
        chunks_embedded=progress.chunks_embedded,
        chunks_indexed=progress.chunks_indexed,
        chunks_graphed=progress.chunks_graphed,
        update_time=timestamp(document.update_time),
    )
    if progress.eta_seconds is not None and document.status not in TERMINAL:
        eta = Duration()
        eta.FromNanoseconds(int(progress.eta_seconds * 1e9))
        message.eta.CopyFrom(eta)
    if document.failure is not None and document.status == "failed":
        message.failure.CopyFrom(_failure_pb(document.failure))
    return message


def document_pb(document: Document) -> pb.Document:
    message = pb.Document(
        id=document.id,
        knowledge_base_id=document.knowledge_base_id,
        file_name=document.file_name,
        content_type=document.content_type,
        size_bytes=document.size_bytes,
        content_sha256=document.content_sha256,
        status=STATUS_TO_PB[document.status],  # type: ignore[arg-type]
        warnings=[_failure_pb(w) for w in document.warnings],
        progress=progress_pb(document),
        title=document.title,
        page_count=document.page_count,
        chunk_count=document.chunk_count,
        language=document.language,
        metadata=document.metadata,
        create_time=timestamp(document.create_time),
        update_time=timestamp(document.update_time),
        ready_time=timestamp(document.ready_time),
    )
    if document.failure is not None and document.status == "failed":
        message.failure.CopyFrom(_failure_pb(document.failure))
    return message


def kb_pb(kb: KnowledgeBase) -> pb.KnowledgeBase:
    strategy = (
        pb.CHUNKING_STRATEGY_PARENT_CHILD
        if kb.chunking.strategy == "parent_child"
        else pb.CHUNKING_STRATEGY_HEADING
    )
    message = pb.KnowledgeBase(
        id=kb.id,
        name=kb.name,
        description=kb.description,
        embedding_model_id=kb.embedding_model_id,
        embedding_dimension=kb.embedding_dimension,
        chunking=pb.ChunkingConfig(
            strategy=strategy,
            chunk_size_tokens=kb.chunking.chunk_size_tokens,
            chunk_overlap_tokens=kb.chunking.chunk_overlap_tokens,
            parent_size_tokens=kb.chunking.parent_size_tokens,
            child_size_tokens=kb.chunking.child_size_tokens,
        ),
        graph_enabled=kb.graph_enabled,
        language_hint=kb.language_hint,
        document_count=kb.document_count,
        chunk_count=kb.chunk_count,
        size_bytes=kb.size_bytes,
        create_time=timestamp(kb.create_time),
        update_time=timestamp(kb.update_time),
    )
    if kb.migration is not None:
        m = kb.migration
        message.migration.CopyFrom(
            pb.EmbeddingMigration(
                from_model_id=m.from_model_id,
                to_model_id=m.to_model_id,
                state=MIGRATION_TO_PB[m.state],  # type: ignore[arg-type]
                documents_done=m.documents_done,
                documents_total=m.documents_total,
                failure_reason=m.failure_reason,
                start_time=timestamp(m.start_time),
                end_time=timestamp(m.end_time),
            )
        )
    return message


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def _refused(file_name: str, error: RequestError) -> pb.UploadResult:
    return pb.UploadResult(
        file_name=file_name, error=pb.UploadError(code=error.code.name, message=error.message)
    )


class _FileStream:
    """The messages of an UploadDocuments stream as files: a header, then that file's bytes."""

    def __init__(self, messages: AsyncIterator[pb.UploadDocumentsRequest]) -> None:
        self._messages = aiter(messages)
        self._header: pb.UploadHeader | None = None  # the next file's header, once read
        self._ended = False

    async def _next(self) -> pb.UploadDocumentsRequest | None:
        if self._ended:
            return None
        message = await anext(self._messages, None)
        if message is None:
            self._ended = True
        return message

    async def next_header(self) -> pb.UploadHeader | None:
        """The next file's header; None at the end of the stream."""
        if self._header is None:
            message = await self._next()
            if message is None:
                return None
            if not message.HasField("header"):
                raise invalid("header", "each file must start with a header message")
            self._header = message.header
        header, self._header = self._header, None
        return header

    async def file_bytes(self) -> AsyncIterator[bytes]:
        """The bytes of the current file, up to the next header."""
        while self._header is None:
            message = await self._next()
            if message is None:
                return
            if message.HasField("header"):
                self._header = message.header
                return
            yield message.chunk

    async def skip_file(self) -> None:
        """Reads past what is left of the current file."""
        async for _ in self.file_bytes():
            pass


@dataclass
class _Upload:
    """What the byte stream of an upload turned out to be."""

    head: bytes = b""
    size: int = 0


class IngestionServicer:
    def __init__(
        self,
        *,
        settings: Settings,
        store: IngestionStore,
        blobs: BlobStore,
        modelhub: ModelHub,
        retrieval: Retrieval,
        temporal: Callable[[], Client],
        feed: ProgressFeed | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._blobs = blobs
        self._modelhub = modelhub
        self._retrieval = retrieval
        self._temporal = temporal
        self._feed = feed

    async def _run(self, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await answer(context, work)
        except grpc.aio.AioRpcError as error:  # a peer refused: pass its code and words on
            await context.abort(error.code(), error.details() or error.code().name)
        raise AssertionError("unreachable")

    # --- knowledge bases ------------------------------------------------------------------------

    def _chunking(self, config: pb.ChunkingConfig | None) -> ChunkingSettings:
        if config is None:
            return ChunkingSettings()
        sizes = {
            "chunking.chunk_size_tokens": config.chunk_size_tokens,
            "chunking.chunk_overlap_tokens": config.chunk_overlap_tokens,
            "chunking.parent_size_tokens": config.parent_size_tokens,
            "chunking.child_size_tokens": config.child_size_tokens,
        }
        low, high = self._settings.min_chunk_size_tokens, self._settings.max_chunk_size_tokens
        for field, value in sizes.items():
            if value < 0:
                raise invalid(field, f"{value} is negative")
            if field.endswith("overlap_tokens"):
                continue
            if value and not low <= value <= high:
                raise invalid(field, f"{value} tokens is outside the allowed range {low}–{high}")
        settings = ChunkingSettings(
            strategy="parent_child" if config.strategy == pb.CHUNKING_STRATEGY_PARENT_CHILD else "headings",
            chunk_size_tokens=config.chunk_size_tokens,
            chunk_overlap_tokens=config.chunk_overlap_tokens,
            parent_size_tokens=config.parent_size_tokens,
            child_size_tokens=config.child_size_tokens,
        )
        try:
            settings.to_config()  # the chunker's own checks (overlap below size, parent above child)
        except ValueError as error:
            raise invalid("chunking", str(error)) from error
        return settings

    def _name(self, name: str) -> str:
        name = " ".join(name.split())
        if not name:
            raise invalid("name", "required")
        if len(name) > self._settings.max_name_length:
            raise invalid("name", f"{len(name)} characters; the limit is {self._settings.max_name_length}")
        return name

    def _description(self, description: str) -> str:
        if len(description) > self._settings.max_description_length:
            raise invalid(
                "description",
                f"{len(description)} characters; the limit is {self._settings.max_description_length}",
            )
        return description

    @staticmethod
    def _language(value: str) -> str:
        value = value.strip()
        if value and (len(value) > 16 or not all(c.isalnum() or c == "-" for c in value)):
            raise invalid("language_hint", f"{value!r} is not a BCP-47 tag such as 'zh' or 'en'")
        return value

    async def _kb(
        self, kb_id: str, field: str = "knowledge_base_id", *, with_counts: bool = True
    ) -> KnowledgeBase:
        if not kb_id:
            raise invalid(field, "required")
        kb = await self._store.get_kb(require_identity().tenant_id, kb_id, with_counts=with_counts)
        if kb is None:
            raise not_found("knowledge base", kb_id)
        return kb

    async def CreateKnowledgeBase(self, request: pb.CreateKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.CreateKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            name = self._name(request.name)
            description = self._description(request.description)
            chunking = self._chunking(request.chunking if request.HasField("chunking") else None)
            language = self._language(request.language_hint)
            try:
                model = await self._modelhub.resolve_embedding_model(request.embedding_model_id)
            except LookupError as error:
                raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, str(error)) from error
            except ValueError as error:
                raise invalid("embedding_model_id", str(error)) from error
            now = datetime.now(UTC)
            kb = KnowledgeBase(
                id=uuid.uuid4().hex,
                tenant_id=tenant,
                name=name,
                description=description,
                embedding_model_id=model.model_id,
                embedding_dimension=model.dimension,
                chunking=chunking,
                graph_enabled=request.graph_enabled,
                language_hint=language,
                create_time=now,
                update_time=now,
            )
            try:
                await self._store.create_kb(kb)
            except DuplicateName as error:
                raise RequestError(
                    grpc.StatusCode.ALREADY_EXISTS, f"name: a knowledge base named {name!r} already exists"
                ) from error
            try:
                await self._retrieval.configure(
                    kb.id, kb.embedding_model_id, kb.embedding_dimension, kb.language_hint, kb.graph_enabled
                )
            except BaseException:
                await self._store.delete_kb(tenant, kb.id)
                raise
            log.info("knowledge base created", knowledge_base_id=kb.id, model=kb.embedding_model_id)
            return pb.CreateKnowledgeBaseResponse(knowledge_base=kb_pb(kb))

        return await self._run(context, work)

    async def GetKnowledgeBase(self, request: pb.GetKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.GetKnowledgeBaseResponse:
            return pb.GetKnowledgeBaseResponse(
                knowledge_base=kb_pb(await self._kb(request.knowledge_base_id))
            )

        return await self._run(context, work)

    def _page_size(self, requested: int) -> int:
        if requested < 0:
            raise invalid("page_size", f"{requested} is negative")
        if requested > self._settings.max_page_size:
            raise invalid("page_size", f"{requested}; the limit is {self._settings.max_page_size}")
        return requested or self._settings.default_page_size

    async def ListKnowledgeBases(self, request: pb.ListKnowledgeBasesRequest, context: Any) -> Any:
        async def work() -> pb.ListKnowledgeBasesResponse:
            tenant = require_identity().tenant_id
            size = self._page_size(request.page_size)
            after = decode_page_token(request.page_token, 1)[0] if request.page_token else None
            kbs = await self._store.list_kbs(tenant, size + 1, after)
            token = encode_page_token([kbs[size - 1].name]) if len(kbs) > size else ""
            return pb.ListKnowledgeBasesResponse(
                knowledge_bases=[kb_pb(kb) for kb in kbs[:size]], next_page_token=token
            )

        return await self._run(context, work)

    async def UpdateKnowledgeBase(self, request: pb.UpdateKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.UpdateKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb = await self._kb(request.knowledge_base_id)
            values: dict[str, Any] = {}
            if request.HasField("name"):
                values["name"] = self._name(request.name)
            if request.HasField("description"):
                values["description"] = self._description(request.description)
            if request.HasField("chunking"):
                values["chunking"] = self._chunking(request.chunking)
            if request.HasField("graph_enabled"):
                values["graph_enabled"] = request.graph_enabled
            if request.HasField("language_hint"):
                values["language_hint"] = self._language(request.language_hint)
            migrate_to = None
            if request.HasField("embedding_model_id"):
                migrate_to = await self._migration_target(kb, request.embedding_model_id)
            if migrate_to is not None:
                values["migration"] = Migration(
                    from_model_id=kb.embedding_model_id,
                    to_model_id=migrate_to.model_id,
                    to_dimension=migrate_to.dimension,
                    state="running",
                    documents_total=kb.document_count,
                    start_time=datetime.now(UTC),
                )
            if not values:
                return pb.UpdateKnowledgeBaseResponse(knowledge_base=kb_pb(kb))
            try:
                updated = await self._store.update_kb(tenant, kb.id, **values)
            except DuplicateName as error:
                raise RequestError(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"name: a knowledge base named {values['name']!r} already exists",
                ) from error
            if updated is None:
                raise not_found("knowledge base", kb.id)
            if migrate_to is not None:
                await self._start_migration(updated, migrate_to.model_id)
            if "graph_enabled" in values or "language_hint" in values:
                await self._retrieval.configure(
                    updated.id,
                    updated.embedding_model_id,
                    updated.embedding_dimension,
                    updated.language_hint,
                    updated.graph_enabled,
                )
            return pb.UpdateKnowledgeBaseResponse(knowledge_base=kb_pb(updated))

        return await self._run(context, work)

    async def _migration_target(self, kb: KnowledgeBase, model_id: str) -> EmbeddingModel | None:
        """The model to migrate to, or None when the request changes nothing (a harmless retry)."""
        running = kb.migration is not None and kb.migration.state == "running"
        if model_id in (
            kb.embedding_model_id,
            kb.migration.to_model_id if running and kb.migration else None,
        ):
            return None
        if running and kb.migration is not None:
            raise RequestError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"embedding_model_id: a migration to {kb.migration.to_model_id} is running "
                f"({kb.migration.documents_done}/{kb.migration.documents_total} documents); "
                "wait for it to end",
            )
        try:
            return await self._modelhub.resolve_embedding_model(model_id)
        except ValueError as error:
            raise invalid("embedding_model_id", str(error)) from error

    async def _start_migration(self, kb: KnowledgeBase, to_model_id: str) -> None:
        identity = require_identity()
        job = MigrateInput(
            tenant_id=kb.tenant_id,
            user_id=identity.user_id,
            knowledge_base_id=kb.id,
            to_model_id=to_model_id,
            heartbeat_seconds=self._settings.activity_heartbeat_seconds,
        )
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._temporal().start_workflow(
                MIGRATION_WORKFLOW_NAME,
                job,
                id=migration_workflow_id(kb.id, to_model_id),
                task_queue=self._settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            )

    async def DeleteKnowledgeBase(self, request: pb.DeleteKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.DeleteKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb = await self._kb(request.knowledge_base_id)
            documents = await self._store.kb_documents(
                tenant, kb.id, ["queued", "parsing", "chunking", "embedding", "indexing", "graph"]
            )
            if not await self._store.delete_kb(tenant, kb.id):
                raise not_found("knowledge base", kb.id)
            for run_id in sorted({d.ingest_run_id for d in documents}):
                await self._cancel_run(run_id)  # every document of the run goes with the knowledge base
            await self._retrieval.delete_knowledge_base(kb.id)
            await self._blobs.delete_prefix(artifacts.kb_prefix(tenant, kb.id))
            await self._store.purge_kb_documents(tenant, kb.id)
            log.info("knowledge base deleted", knowledge_base_id=kb.id, documents=len(documents))
            return pb.DeleteKnowledgeBaseResponse()

        return await self._run(context, work)

    # --- uploads --------------------------------------------------------------------------------

    async def _missing_components(self) -> dict[str, bool]:
        return {"ocr": not ocr_available()}

    async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
        async def work() -> pb.GetUploadPolicyResponse:
            missing = await self._missing_components()
            try:
                missing["asr"] = not await self._modelhub.has_asr()
            except grpc.aio.AioRpcError:
                missing["asr"] = True
            return pb.GetUploadPolicyResponse(
                max_file_size_bytes=self._settings.max_file_size_bytes,
                recommended_chunk_size_bytes=self._settings.upload_chunk_size_bytes,
                max_files_per_upload=self._settings.max_files_per_upload,
                batch_max_documents=self._settings.batch_max_documents,
                file_types=[
                    pb.SupportedFileType(
                        extension=t.extension.lstrip("."),
                        content_types=list(t.content_types),
                        missing_components=[t.needs] if t.needs and missing.get(t.needs) else [],
                    )
                    for t in FILE_TYPES
                ],
            )

        return await self._run(context, work)

    async def _check_header(
        self, header: pb.UploadHeader, known: dict[str, KnowledgeBase] | None = None
    ) -> KnowledgeBase:
        """Checks an upload's header; returns its knowledge base (from ``known`` when there)."""
        kb = (known or {}).get(header.knowledge_base_id)
        if kb is None:
            kb = await self._kb(header.knowledge_base_id, "header.knowledge_base_id", with_counts=False)
            if known is not None:
                known[kb.id] = kb
        name = header.file_name
        if not name or "/" in name or "\\" in name or "\x00" in name or len(name) > 255:
            raise invalid("header.file_name", "a plain file name (no path), 1–255 characters, is required")
        extension = extension_of(name)
        file_type = BY_EXTENSION.get(extension)
        if file_type is None:
            accepted = ", ".join(t.extension.lstrip(".") for t in FILE_TYPES)
            raise invalid(
                "header.file_name",
                f"unsupported file type {extension or '(no extension)'!r}; accepted: {accepted}",
            )
        if file_type.needs == "asr":
            try:
                has_asr = await self._modelhub.has_asr()
            except grpc.aio.AioRpcError:
                has_asr = False
            if not has_asr:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"header.file_name: {extension} audio is transcribed by a speech-to-text (ASR) model "
                    "and none is configured",
                )
        limit = self._settings.max_file_size_bytes
        if header.declared_size_bytes <= 0:
            raise invalid("header.declared_size_bytes", "must be > 0 (an empty file cannot be ingested)")
        if header.declared_size_bytes > limit:
            raise invalid(
                "header.declared_size_bytes",
                f"{header.declared_size_bytes} bytes is over the limit of {limit} bytes",
            )
        if header.content_sha256 and (
            len(header.content_sha256) != 64
            or any(c not in "0123456789abcdef" for c in header.content_sha256.lower())
        ):
            raise invalid("header.content_sha256", "must be 64 hex characters")
        if len(header.metadata) > self._settings.max_metadata_entries:
            raise invalid(
                "header.metadata",
                f"{len(header.metadata)} entries; the limit is {self._settings.max_metadata_entries}",
            )
        for key, value in header.metadata.items():
            if not key or len(key) > 64 or len(value) > 2048:
                raise invalid("header.metadata", f"key {key[:64]!r}: keys 1–64 and values ≤ 2048 characters")
        return kb

    async def _receive(
        self,
        tenant: str,
        kb: KnowledgeBase,
        header: pb.UploadHeader,
        messages: AsyncIterator[bytes],
        run_id: str,
    ) -> Document:
        """Stores the bytes of one file whose header was checked and records it (queued, in run
        ``run_id``).

        Raises RequestError for a refused file and DuplicateContent when the knowledge base holds the
        same content; either way nothing of the file is kept."""
        span = trace.get_current_span()
        span.set_attribute("ks.knowledge_base.id", kb.id)
        span.set_attribute("ks.file.declared_size_bytes", header.declared_size_bytes)
        document_id = uuid.uuid4().hex
        key = artifacts.file_key(tenant, kb.id, document_id)
        seen = _Upload()
        digest = hashlib.sha256()

        async def chunks() -> AsyncIterator[bytes]:
            async for data in messages:
                if len(seen.head) < SNIFF_BYTES:
                    seen.head += data[: SNIFF_BYTES - len(seen.head)]
                    problem = (
                        check_content(header.file_name, seen.head)
                        if len(seen.head) >= min(SNIFF_BYTES, header.declared_size_bytes)
                        else None
                    )
                    if problem:
                        raise invalid("header.file_name", problem)
                seen.size += len(data)
                digest.update(data)
                yield data

        limit = min(header.declared_size_bytes, self._settings.max_file_size_bytes)
        try:
            stored = await self._blobs.put(key, chunks(), max_bytes=limit)
        except BlobTooLarge as error:
            raise invalid(
                "chunk",
                f"more bytes arrived than the declared {header.declared_size_bytes} "
                f"(limit {self._settings.max_file_size_bytes} bytes)",
            ) from error
        try:
            if stored.size_bytes != header.declared_size_bytes:
                raise invalid(
                    "header.declared_size_bytes",
                    f"declared {header.declared_size_bytes} bytes but {stored.size_bytes} arrived",
                )
            if header.content_sha256 and header.content_sha256.lower() != stored.sha256:
                raise invalid("header.content_sha256", f"does not match the content ({stored.sha256})")
            problem = check_content(header.file_name, seen.head)
            if problem:
                raise invalid("header.file_name", problem)
            existing = await self._store.find_by_content(tenant, kb.id, stored.sha256)
            if existing is not None:
                raise DuplicateContent(existing)
            now = datetime.now(UTC)
            document = Document(
                id=document_id,
                tenant_id=tenant,
                knowledge_base_id=kb.id,
                file_name=header.file_name,
                content_type=BY_EXTENSION[extension_of(header.file_name)].content_types[0],
                size_bytes=stored.size_bytes,
                content_sha256=stored.sha256,
                blob_key=key,
                status="queued",
                ingest_run_id=run_id,
                metadata=dict(header.metadata),
                create_time=now,
                update_time=now,
            )
            await self._store.create_document(document)
        except BaseException:
            await self._blobs.delete(key)
            raise
        span.set_attribute("ks.document.id", document.id)
        log.info("document uploaded", document_id=document.id, size=stored.size_bytes)
        return document

    async def _start_or_drop(self, documents: list[Document]) -> None:
        """Starts the ingestion of freshly uploaded documents; if that fails, they are not kept."""
        try:
            await self._start(documents)
        except BaseException:
            for document in documents:
                await self._store.purge_document(document.tenant_id, document.id)
                await self._blobs.delete(document.blob_key)
            raise

    async def UploadDocument(
        self, request_iterator: AsyncIterator[pb.UploadDocumentRequest], context: Any
    ) -> Any:
        async def work() -> pb.UploadDocumentResponse:
            tenant = require_identity().tenant_id
            first = await anext(aiter(request_iterator), None)
            if first is None or not first.HasField("header"):
                raise invalid("header", "the first message of an upload must carry the header")

            async def chunks() -> AsyncIterator[bytes]:
                async for message in request_iterator:
                    if message.HasField("header"):
                        raise invalid(
                            "header",
                            "only the first message may carry a header (several files go through "
                            "UploadDocuments)",
                        )
                    yield message.chunk

            with tracer.start_as_current_span("ingestion.upload") as span:
                try:
                    kb = await self._check_header(first.header)
                    document = await self._receive(tenant, kb, first.header, chunks(), new_run_id())
                except DuplicateContent as duplicate:
                    span.set_attribute("ks.document.duplicate", True)
                    return pb.UploadDocumentResponse(document=document_pb(duplicate.existing), duplicate=True)
                try:
                    await self._start_or_drop([document])
                except RequestError as error:
                    raise RequestError(
                        error.code, f"{error.message}; nothing was stored, retry later"
                    ) from error
                return pb.UploadDocumentResponse(document=document_pb(document), duplicate=False)

        return await self._run(context, work)

    async def UploadDocuments(
        self, request_iterator: AsyncIterator[pb.UploadDocumentsRequest], context: Any
    ) -> Any:
        async def work() -> pb.UploadDocumentsResponse:
            tenant = require_identity().tenant_id
            stream = _FileStream(request_iterator)
            results: list[pb.UploadResult] = []
            # Per knowledge base: the run its next documents join, and those not started yet (with
            # the index of their result). One workflow ingests one run of one knowledge base.
            groups: dict[str, tuple[str, list[tuple[Document, int]]]] = {}
            known: dict[str, KnowledgeBase] = {}
            limit = self._settings.max_files_per_upload

            async def start_group(kb_id: str) -> None:
                _, group = groups.pop(kb_id)
                documents = [document for document, _ in group]
                try:
                    await self._start_or_drop(documents)
                except RequestError as error:
                    for _, index in group:
                        results[index] = pb.UploadResult(
                            file_name=results[index].file_name,
                            error=pb.UploadError(
                                code=error.code.name,
                                message=f"{error.message}; nothing was stored, retry later",
                            ),
                        )

            with tracer.start_as_current_span("ingestion.upload") as span:
                header = await stream.next_header()
                if header is None:
                    raise invalid("header", "the first message of an upload must carry a header")
                while header is not None:
                    if len(results) >= limit:
                        results.append(
                            _refused(
                                header.file_name, invalid("header", f"more than {limit} files in one upload")
                            )
                        )
                        await stream.skip_file()
                    else:
                        with tracer.start_as_current_span("ingestion.upload_file"):
                            try:
                                kb = await self._check_header(header, known)
                                run_id, group = groups.setdefault(kb.id, (new_run_id(), []))
                                document = await self._receive(
                                    tenant, kb, header, stream.file_bytes(), run_id
                                )
                            except DuplicateContent as duplicate:
                                results.append(
                                    pb.UploadResult(
                                        file_name=header.file_name,
                                        document=document_pb(duplicate.existing),
                                        duplicate=True,
                                    )
                                )
                            except RequestError as error:
                                results.append(_refused(header.file_name, error))
                            else:
                                results.append(
                                    pb.UploadResult(
                                        file_name=header.file_name, document=document_pb(document)
                                    )
                                )
                                group.append((document, len(results) - 1))
                        await stream.skip_file()  # what a refused file had left in the stream
                        for kb_id, (_, group) in list(groups.items()):
                            if len(group) >= self._settings.batch_max_documents:
                                await start_group(kb_id)
                    header = await stream.next_header()
                for kb_id in list(groups):
                    if groups[kb_id][1]:
                        await start_group(kb_id)
                span.set_attribute("ks.upload.files", len(results))
                span.set_attribute("ks.upload.refused", sum(1 for r in results if r.HasField("error")))
            return pb.UploadDocumentsResponse(results=results)

        return await self._run(context, work)

    def _batch(self, documents: list[Document]) -> IngestBatch:
        identity = require_identity()
        first = documents[0]
        return IngestBatch(
            tenant_id=first.tenant_id,
            user_id=identity.user_id,
            knowledge_base_id=first.knowledge_base_id,
            documents=[DocumentRun(d.id, d.ingest_run_id) for d in documents],
            max_attempts=self._settings.activity_max_attempts,
            heartbeat_seconds=self._settings.activity_heartbeat_seconds,
            local_activities=self._settings.local_activities,
        )

    async def _start(self, documents: list[Document]) -> None:
        """Starts the workflow of documents of one run; UNAVAILABLE (a RequestError) when Temporal
        cannot be reached."""
        try:
            await self._temporal().start_workflow(
                WORKFLOW_NAME,
                self._batch(documents),
                id=workflow_id(documents[0].ingest_run_id),
                task_queue=self._settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass  # a retried start: the run is there
        except Exception as error:  # the SDK raises RPCError / RuntimeError when the server is away
            raise RequestError(
                grpc.StatusCode.UNAVAILABLE, f"the workflow service (Temporal) cannot be reached: {error}"
            ) from error

    async def _cancel(self, document: Document) -> None:
        """Cancels the workflow of a document ingested alone and waits (bounded) until it stopped
        touching the indexes. A workflow ingesting other documents too goes on: it drops this one at
        its next step, and takes back anything it indexed for it after the deletion."""
        if document.status in TERMINAL:
            return
        if await self._store.run_size(document.tenant_id, document.ingest_run_id) > 1:
            return
        await self._cancel_run(document.ingest_run_id)

    async def _cancel_run(self, run_id: str) -> None:
        handle: WorkflowHandle[Any, Any] = self._temporal().get_workflow_handle(workflow_id(run_id))
        try:
            await handle.cancel()
            await asyncio.wait_for(handle.result(), timeout=DELETE_WAIT_SECONDS)
        except Exception:  # cancelled, already finished, or never started: all fine here
            pass

    # --- documents ------------------------------------------------------------------------------

    async def _document(self, document_id: str) -> Document:
        if not document_id:
            raise invalid("document_id", "required")
        document = await self._store.get_document(require_identity().tenant_id, document_id)
        if document is None:
            raise not_found("document", document_id)
        return document

    async def GetDocument(self, request: pb.GetDocumentRequest, context: Any) -> Any:
        async def work() -> pb.GetDocumentResponse:
            return pb.GetDocumentResponse(document=document_pb(await self._document(request.document_id)))

        return await self._run(context, work)

    async def ListDocuments(self, request: pb.ListDocumentsRequest, context: Any) -> Any:
        async def work() -> pb.ListDocumentsResponse:
            tenant = require_identity().tenant_id
            kb = await self._kb(request.knowledge_base_id)
            size = self._page_size(request.page_size)
            statuses = []
            for value in request.statuses:
                if value not in PB_TO_STATUS:
                    raise invalid("statuses", f"{value} is not a document status")
                statuses.append(PB_TO_STATUS[value])
            after = None
            if request.page_token:
                rank, last_id = decode_page_token(request.page_token, 2)
                after = (float(rank), last_id)
            documents = await self._store.list_documents(
                tenant, kb.id, statuses=statuses, limit=size + 1, after=after
            )
            token = ""
            if len(documents) > size:
                last = documents[size - 1]
                token = encode_page_token([repr(last.create_time.timestamp()), last.id])
            return pb.ListDocumentsResponse(
                documents=[document_pb(d) for d in documents[:size]], next_page_token=token
            )

        return await self._run(context, work)

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context: Any) -> Any:
        async def work() -> pb.DeleteDocumentResponse:
            tenant = require_identity().tenant_id
            document = await self._document(request.document_id)
            await self._store.mark_deleting(tenant, document.id)
            await self._purge(document)
            return pb.DeleteDocumentResponse()

        return await self._run(context, work)

    async def _purge(self, document: Document) -> None:
        """Removes a document marked for deletion everywhere; safe to repeat after a crash."""
        await self._cancel(document)
        await self._retrieval.delete_document(document.knowledge_base_id, document.id)
        await self._blobs.delete_prefix(
            artifacts.document_prefix(document.tenant_id, document.knowledge_base_id, document.id)
        )
        await self._store.purge_document(document.tenant_id, document.id)
        log.info("document deleted", document_id=document.id)

    async def ReingestDocument(self, request: pb.ReingestDocumentRequest, context: Any) -> Any:
        async def work() -> pb.ReingestDocumentResponse:
            tenant = require_identity().tenant_id
            document = await self._document(request.document_id)
            if document.status not in TERMINAL:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"document {document.id} is still being ingested ({document.status})",
                )
            run_id = new_run_id()
            updated = await self._store.update_document(
                tenant,
                document.id,
                run_id=document.ingest_run_id,
                ingest_run_id=run_id,
                status="queued",
                failure=None,
                progress=Progress(),
            )
            if updated is None:
                raise RequestError(
                    grpc.StatusCode.ABORTED, f"document {document.id} changed meanwhile; retry"
                )
            try:
                await self._start([updated])
            except RequestError:
                # Recorded as queued: the reconciler starts it once Temporal answers again.
                log.warning("re-ingest queued while Temporal is unreachable", document_id=document.id)
            return pb.ReingestDocumentResponse(document=document_pb(updated))

        return await self._run(context, work)

    async def WatchDocumentProgress(self, request: pb.WatchDocumentProgressRequest, context: Any) -> Any:
        tenant = require_identity().tenant_id
        target = request.WhichOneof("target")
        try:
            if target is None:
                raise invalid("target", "documents or knowledge_base_id is required")
            if target == "documents":
                ids = list(dict.fromkeys(request.documents.document_ids))
                if not ids:
                    raise invalid("documents.document_ids", "at least one id is required")
                if len(ids) > self._settings.max_watch_documents:
                    raise invalid(
                        "documents.document_ids",
                        f"{len(ids)} ids; the limit is {self._settings.max_watch_documents}",
                    )
                kb_id = ""
            else:
                kb_id = (await self._kb(request.knowledge_base_id)).id
                ids = []
        except RequestError as error:
            await context.abort(error.code, error.message)
            return
        if self._feed is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "progress events are not connected")
            return
        async with self._feed.subscribe() as events:
            # Subscribe first, then read the current state, so no change between the two is lost.
            waiting: set[str] = set()
            if ids:
                found = await self._store.get_documents(tenant, ids)
                missing = set(ids) - {d.id for d in found}
                if missing:
                    await context.abort(
                        grpc.StatusCode.NOT_FOUND, f"documents not found: {', '.join(sorted(missing))}"
                    )
                    return
            else:
                found = await self._store.list_documents(tenant, kb_id, statuses=[], limit=10_000, after=None)
            for document in found:
                yield pb.WatchDocumentProgressResponse(progress=progress_pb(document))
                if document.status not in TERMINAL:
                    waiting.add(document.id)
            if ids and not waiting:
                return
            async for event in events:
                if event.knowledge_base_id != kb_id and event.document_id not in waiting:
                    continue
                document = await self._store.get_document(tenant, event.document_id)
                if document is None:
                    continue
                yield pb.WatchDocumentProgressResponse(progress=progress_pb(document))
                if ids and document.status in TERMINAL:
                    waiting.discard(document.id)
                    if not waiting:
                        return


def build_binding(servicer: IngestionServicer) -> ServiceBinding:
    return bind_service(
        CONTRACTS["ingestion"].descriptor,
        servicer,
        pending="",
    )
