"""Knowledge bases and their documents (``/api/v1/knowledge-bases``, ``/api/v1/documents``), backed by
ingestion over gRPC.

Uploads are ``multipart/form-data`` (part ``file``, optional part ``metadata`` holding a JSON object
of strings). The body is parsed as it arrives and the file part spooled to a temporary file (in
memory up to ``multipart.SPOOL_MEMORY_BYTES``, on disk above), never held whole in memory; the
spooled file is then streamed into ``UploadDocument`` in pieces of the upload policy's recommended
size, with the real size declared. A ``Content-Length`` that cannot fit the size limit is refused
with 413 before any of the body is read. Progress streams as server-sent events (``event: progress``).

The batch upload (``…/documents/batch``) takes several ``file`` parts (up to the policy's
``max_files_per_upload``; the ``metadata`` part applies to each), spools each the same way, and
streams all of them into one ``UploadDocuments`` call, so that ingestion takes them in together. It
answers one result per file, in order: a refused file (over the size limit here, or refused by
ingestion) gets its error and the others go on.
"""

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import grpc
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_gateway.api.errors import ServiceError, service_error
from knowsphere_gateway.api.multipart import (
    SpooledFile,
    read_spooled,
    refuse_oversized,
    spool_upload,
    spool_uploads,
)
from knowsphere_runtime.identity import Identity, bound_identity

T = TypeVar("T")
M = TypeVar("M")

# The upload policy is a server setting; re-read it at most this often.
UPLOAD_POLICY_TTL_SECONDS = 60.0

StatusName = Literal["queued", "parsing", "chunking", "embedding", "indexing", "graph", "ready", "failed"]
StrategyName = Literal["heading", "parent_child"]
STRATEGIES: dict[str, pb.ChunkingStrategy] = {
    "heading": pb.CHUNKING_STRATEGY_HEADING,
    "parent_child": pb.CHUNKING_STRATEGY_PARENT_CHILD,
}
# Fields of the upload header as the HTTP caller knows them.
UPLOAD_FIELDS = {
    "header.file_name": "file_name",
    "header.declared_size_bytes": "file",
    "header.content_sha256": "file",
    "header.metadata": "metadata",
    "header.knowledge_base_id": "kb_id",
    "chunk": "file",
}
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.DOTALL)


# --- views ---------------------------------------------------------------------------------------


class ChunkingBody(BaseModel):
    strategy: StrategyName = "heading"
    chunk_size_tokens: int = Field(default=0, ge=0, description="0 = server default (heading)")
    chunk_overlap_tokens: int = Field(default=0, ge=0)
    parent_size_tokens: int = Field(default=0, ge=0, description="0 = server default (parent_child)")
    child_size_tokens: int = Field(default=0, ge=0, description="0 = server default (parent_child)")

    def to_proto(self) -> pb.ChunkingConfig:
        return pb.ChunkingConfig(
            strategy=STRATEGIES[self.strategy],
            chunk_size_tokens=self.chunk_size_tokens,
            chunk_overlap_tokens=self.chunk_overlap_tokens,
            parent_size_tokens=self.parent_size_tokens,
            child_size_tokens=self.child_size_tokens,
        )


class KnowledgeBaseCreate(BaseModel):
    name: str = Field(min_length=1, description="unique per tenant")
    description: str = ""
    embedding_model_id: str = Field(default="", description="empty = the tenant's default embedding model")
    chunking: ChunkingBody | None = Field(default=None, description="unset = server defaults")
    graph_enabled: bool = False
    language_hint: str = Field(default="", description="BCP-47, e.g. zh or en; empty = detect per document")


class KnowledgeBaseUpdate(BaseModel):
    name: str | None = Field(default=None, min_length=1)
    description: str | None = None
    embedding_model_id: str | None = Field(
        default=None, description="a new model starts a migration that re-embeds every document"
    )
    chunking: ChunkingBody | None = Field(default=None, description="replaces the whole set")
    graph_enabled: bool | None = None
    language_hint: str | None = None


class MigrationView(BaseModel):
    from_model_id: str
    to_model_id: str
    state: Literal["running", "completed", "failed", "none"]
    documents_done: int
    documents_total: int
    failure_reason: str
    start_time: datetime | None
    end_time: datetime | None


class KnowledgeBaseView(BaseModel):
    id: str
    name: str
    description: str
    embedding_model_id: str
    embedding_dimension: int
    chunking: ChunkingBody
    graph_enabled: bool
    language_hint: str
    document_count: int
    chunk_count: int
    size_bytes: int
    migration: MigrationView | None = Field(description="the latest embedding-model migration")
    create_time: datetime | None
    update_time: datetime | None


class KnowledgeBaseList(BaseModel):
    knowledge_bases: list[KnowledgeBaseView]
    next_page_token: str = Field(description="empty on the last page")


class FileTypeView(BaseModel):
    extension: str
    content_types: list[str]
    missing_components: list[str] = Field(
        description="optional components (ocr, vlm, asr) this type needs that are not available"
    )


class UploadPolicyView(BaseModel):
    max_file_size_bytes: int
    recommended_chunk_size_bytes: int
    max_files_per_upload: int = Field(description="most files one batch upload may carry")
    batch_max_documents: int = Field(description="most documents ingestion takes in together")
    file_types: list[FileTypeView]


class StageFailureView(BaseModel):
    stage: Literal["parse", "chunk", "embed", "index", "graph", "unknown"]
    code: str = Field(description="e.g. corrupt_file, unsupported_format, encrypted, empty_document")
    reason: str
    attempts: int
    time: datetime | None


class ProgressView(BaseModel):
    document_id: str
    knowledge_base_id: str
    status: StatusName
    percent: int = Field(ge=0, le=100)
    pages_parsed: int
    pages_total: int
    chunks_total: int
    chunks_embedded: int
    chunks_indexed: int
    chunks_graphed: int
    eta_seconds: float | None = Field(description="estimated time to ready; null when unknown")
    failure: StageFailureView | None
    update_time: datetime | None


class DocumentView(BaseModel):
    id: str
    knowledge_base_id: str
    file_name: str
    content_type: str
    size_bytes: int
    content_sha256: str
    status: StatusName
    failure: StageFailureView | None
    warnings: list[StageFailureView]
    progress: ProgressView | None
    title: str
    page_count: int
    chunk_count: int
    language: str
    metadata: dict[str, str]
    create_time: datetime | None
    update_time: datetime | None
    ready_time: datetime | None


class DocumentList(BaseModel):
    documents: list[DocumentView]
    next_page_token: str = Field(description="empty on the last page")


class UploadView(BaseModel):
    document: DocumentView
    duplicate: bool = Field(
        description="the same content was already in this knowledge base; nothing new stored"
    )


class UploadErrorView(BaseModel):
    code: str = Field(description="e.g. invalid_argument, payload_too_large, failed_precondition")
    message: str = Field(description="what was wrong, naming the field and the limit")
    field: str | None = Field(default=None, description="the part of the upload at fault, e.g. file_name")


class UploadResultView(BaseModel):
    file_name: str
    document: DocumentView | None = Field(
        description="the new document (queued) or the existing one with the same content; null when refused"
    )
    duplicate: bool = Field(
        description="the same content was already in this knowledge base; nothing new stored"
    )
    error: UploadErrorView | None = Field(description="why the file was refused; nothing of it is kept")


class BatchUploadView(BaseModel):
    results: list[UploadResultView] = Field(description="one per file part, in the order they were sent")


def _time(message: Any, name: str) -> datetime | None:
    if not message.HasField(name):
        return None
    stamp: datetime = getattr(message, name).ToDatetime(tzinfo=UTC)
    return stamp


def _status(value: int) -> StatusName:
    return pb.DocumentStatus.Name(value).removeprefix("DOCUMENT_STATUS_").lower()  # type: ignore[arg-type,return-value]


def _status_value(name: str) -> pb.DocumentStatus:
    return pb.DocumentStatus.Value(f"DOCUMENT_STATUS_{name.upper()}")  # type: ignore[return-value]


def _failure_view(failure: pb.StageFailure) -> StageFailureView:
    stage = pb.IngestionStage.Name(failure.stage).removeprefix("INGESTION_STAGE_").lower()
    return StageFailureView(
        stage=stage if stage != "unspecified" else "unknown",  # type: ignore[arg-type]
        code=failure.code,
        reason=failure.reason,
        attempts=failure.attempts,
        time=_time(failure, "time"),
    )


def _progress_view(progress: pb.DocumentProgress) -> ProgressView:
    return ProgressView(
        document_id=progress.document_id,
        knowledge_base_id=progress.knowledge_base_id,
        status=_status(progress.status),
        percent=progress.percent,
        pages_parsed=progress.pages_parsed,
        pages_total=progress.pages_total,
        chunks_total=progress.chunks_total,
        chunks_embedded=progress.chunks_embedded,
        chunks_indexed=progress.chunks_indexed,
        chunks_graphed=progress.chunks_graphed,
        eta_seconds=progress.eta.ToNanoseconds() / 1e9 if progress.HasField("eta") else None,
        failure=_failure_view(progress.failure) if progress.HasField("failure") else None,
        update_time=_time(progress, "update_time"),
    )


def _document_view(document: pb.Document) -> DocumentView:
    return DocumentView(
        id=document.id,
        knowledge_base_id=document.knowledge_base_id,
        file_name=document.file_name,
        content_type=document.content_type,
        size_bytes=document.size_bytes,
        content_sha256=document.content_sha256,
        status=_status(document.status),
        failure=_failure_view(document.failure) if document.HasField("failure") else None,
        warnings=[_failure_view(w) for w in document.warnings],
        progress=_progress_view(document.progress) if document.HasField("progress") else None,
        title=document.title,
        page_count=document.page_count,
        chunk_count=document.chunk_count,
        language=document.language,
        metadata=dict(document.metadata),
        create_time=_time(document, "create_time"),
        update_time=_time(document, "update_time"),
        ready_time=_time(document, "ready_time"),
    )


def _kb_view(kb: pb.KnowledgeBase) -> KnowledgeBaseView:
    migration = None
    if kb.HasField("migration"):
        m = kb.migration
        state = pb.MigrationState.Name(m.state).removeprefix("MIGRATION_STATE_").lower()
        migration = MigrationView(
            from_model_id=m.from_model_id,
            to_model_id=m.to_model_id,
            state=state if state != "unspecified" else "none",  # type: ignore[arg-type]
            documents_done=m.documents_done,
            documents_total=m.documents_total,
            failure_reason=m.failure_reason,
            start_time=_time(m, "start_time"),
            end_time=_time(m, "end_time"),
        )
    chunking = kb.chunking
    return KnowledgeBaseView(
        id=kb.id,
        name=kb.name,
        description=kb.description,
        embedding_model_id=kb.embedding_model_id,
        embedding_dimension=kb.embedding_dimension,
        chunking=ChunkingBody(
            strategy="parent_child" if chunking.strategy == pb.CHUNKING_STRATEGY_PARENT_CHILD else "heading",
            chunk_size_tokens=chunking.chunk_size_tokens,
            chunk_overlap_tokens=chunking.chunk_overlap_tokens,
            parent_size_tokens=chunking.parent_size_tokens,
            child_size_tokens=chunking.child_size_tokens,
        ),
        graph_enabled=kb.graph_enabled,
        language_hint=kb.language_hint,
        document_count=kb.document_count,
        chunk_count=kb.chunk_count,
        size_bytes=kb.size_bytes,
        migration=migration,
        create_time=_time(kb, "create_time"),
        update_time=_time(kb, "update_time"),
    )


def _policy_view(policy: pb.GetUploadPolicyResponse) -> UploadPolicyView:
    return UploadPolicyView(
        max_file_size_bytes=policy.max_file_size_bytes,
        recommended_chunk_size_bytes=policy.recommended_chunk_size_bytes,
        max_files_per_upload=policy.max_files_per_upload,
        batch_max_documents=policy.batch_max_documents,
        file_types=[
            FileTypeView(
                extension=t.extension,
                content_types=list(t.content_types),
                missing_components=list(t.missing_components),
            )
            for t in policy.file_types
        ],
    )


# --- errors --------------------------------------------------------------------------------------


def _named_field(code: grpc.StatusCode, message: str) -> tuple[str | None, str]:
    """The field ingestion names at the start of its message ("field: why"), renamed to what the HTTP
    caller sent, and the message with that name; (None, message) when it names none."""
    match = _FIELD_PREFIX.match(message)
    if match and code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
        field = UPLOAD_FIELDS.get(match.group(1), match.group(1).removeprefix("header."))
        return field, f"{field}: {match.group(2)}"
    return None, message


def _http_error(error: grpc.aio.AioRpcError) -> ServiceError:
    """``service_error``, plus the field ingestion names at the start of its message."""
    mapped = service_error(error)
    message = mapped.body.get("message")
    if "field" not in mapped.body and isinstance(message, str):
        field, message = _named_field(error.code(), message)
        if field is not None:
            mapped.body["field"] = field
            mapped.body["message"] = message
    return mapped


def _upload_error_view(error: pb.UploadError) -> UploadErrorView:
    code = (
        grpc.StatusCode[error.code] if error.code in grpc.StatusCode.__members__ else grpc.StatusCode.UNKNOWN
    )
    field, message = _named_field(code, error.message)
    return UploadErrorView(code=error.code.lower(), message=message, field=field)


def _result_view(result: pb.UploadResult) -> UploadResultView:
    return UploadResultView(
        file_name=result.file_name,
        document=_document_view(result.document) if result.HasField("document") else None,
        duplicate=result.duplicate,
        error=_upload_error_view(result.error) if result.HasField("error") else None,
    )


def _refused_view(spooled: SpooledFile) -> UploadResultView:
    """The result of a file refused here, before it reached ingestion."""
    body = spooled.refusal.body if spooled.refusal is not None else {}
    return UploadResultView(
        file_name=spooled.file_name,
        document=None,
        duplicate=False,
        error=UploadErrorView.model_validate(body),
    )


async def _file_messages(
    message: Callable[..., M], kb_id: str, upload: Any, metadata: dict[str, str], piece: int
) -> AsyncIterator[M]:
    """A spooled file as upload messages of type ``message``: its header, then its bytes in pieces."""
    yield message(
        header=pb.UploadHeader(
            knowledge_base_id=kb_id,
            file_name=upload.file_name,
            content_type=upload.content_type,
            declared_size_bytes=upload.size,
            content_sha256=upload.sha256,
            metadata=metadata,
        )
    )
    while data := await read_spooled(upload.file, piece):
        yield message(chunk=data)


METADATA_HELP = 'a JSON object of strings kept with the document, e.g. {"source": "https://…"}'


def _multipart_body(file: dict[str, Any], metadata_help: str) -> dict[str, Any]:
    """The OpenAPI request body of an upload: ``file`` part(s) and an optional ``metadata`` part."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {
                            "file": file,
                            "metadata": {"type": "string", "description": metadata_help},
                        },
                    }
                }
            },
        }
    }


UPLOAD_BODY = _multipart_body(
    {"type": "string", "format": "binary", "description": "the file, with its name"}, METADATA_HELP
)
BATCH_UPLOAD_BODY = _multipart_body(
    {
        "type": "array",
        "items": {"type": "string", "format": "binary"},
        "description": "the files, each with its name: one part named 'file' per file, "
        "at most the upload policy's max_files_per_upload",
    },
    f"{METADATA_HELP}; applies to every file",
)
PROGRESS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "`event: progress` events whose data is a ProgressView (JSON); "
        "an `event: error` with an error body if the watch fails",
        "content": {"text/event-stream": {"schema": ProgressView.model_json_schema()}},
    }
}


# --- router --------------------------------------------------------------------------------------


def build_knowledge_router(ingestion: Callable[[], Any], caller: Callable[..., Identity]) -> APIRouter:
    """``ingestion()`` returns the IngestionService stub; ``caller`` is the identity dependency."""
    router = APIRouter(prefix="/api/v1", tags=["knowledge"])
    policy_cache: dict[str, tuple[float, pb.GetUploadPolicyResponse]] = {}

    async def call(identity: Identity, rpc: Callable[[], Awaitable[T]]) -> T:
        with bound_identity(identity):
            try:
                return await rpc()
            except grpc.aio.AioRpcError as error:
                raise _http_error(error) from error

    async def upload_policy(identity: Identity) -> pb.GetUploadPolicyResponse:
        cached = policy_cache.get("policy")
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        policy: pb.GetUploadPolicyResponse = await call(
            identity, lambda: ingestion().GetUploadPolicy(pb.GetUploadPolicyRequest())
        )
        policy_cache["policy"] = (time.monotonic() + UPLOAD_POLICY_TTL_SECONDS, policy)
        return policy

    Caller = Annotated[Identity, Depends(caller)]

    async def existing_knowledge_base(kb_id: str, identity: Caller) -> str:
        # Checked before the body is read, so an unknown id is a plain 404.
        await call(
            identity,
            lambda: ingestion().GetKnowledgeBase(pb.GetKnowledgeBaseRequest(knowledge_base_id=kb_id)),
        )
        return kb_id

    # --- knowledge bases ---

    @router.post("/knowledge-bases", status_code=201)
    async def create_knowledge_base(body: KnowledgeBaseCreate, identity: Caller) -> KnowledgeBaseView:
        request = pb.CreateKnowledgeBaseRequest(
            name=body.name,
            description=body.description,
            embedding_model_id=body.embedding_model_id,
            graph_enabled=body.graph_enabled,
            language_hint=body.language_hint,
        )
        if body.chunking is not None:
            request.chunking.CopyFrom(body.chunking.to_proto())
        response = await call(identity, lambda: ingestion().CreateKnowledgeBase(request))
        return _kb_view(response.knowledge_base)

    @router.get("/knowledge-bases")
    async def list_knowledge_bases(
        identity: Caller,
        page_size: Annotated[int, Query(ge=0, description="0 = server default")] = 0,
        page_token: str = "",
    ) -> KnowledgeBaseList:
        request = pb.ListKnowledgeBasesRequest(page_size=page_size, page_token=page_token)
        response = await call(identity, lambda: ingestion().ListKnowledgeBases(request))
        return KnowledgeBaseList(
            knowledge_bases=[_kb_view(kb) for kb in response.knowledge_bases],
            next_page_token=response.next_page_token,
        )

    @router.get("/knowledge-bases/{kb_id}")
    async def get_knowledge_base(kb_id: str, identity: Caller) -> KnowledgeBaseView:
        request = pb.GetKnowledgeBaseRequest(knowledge_base_id=kb_id)
        response = await call(identity, lambda: ingestion().GetKnowledgeBase(request))
        return _kb_view(response.knowledge_base)

    @router.patch("/knowledge-bases/{kb_id}")
    async def update_knowledge_base(
        kb_id: str, body: KnowledgeBaseUpdate, identity: Caller
    ) -> KnowledgeBaseView:
        """Changes only the fields given; a new embedding model starts a migration."""
        request = pb.UpdateKnowledgeBaseRequest(knowledge_base_id=kb_id)
        for name in ("name", "description", "embedding_model_id", "graph_enabled", "language_hint"):
            value = getattr(body, name)
            if value is not None:
                setattr(request, name, value)
        if body.chunking is not None:
            request.chunking.CopyFrom(body.chunking.to_proto())
        response = await call(identity, lambda: ingestion().UpdateKnowledgeBase(request))
        return _kb_view(response.knowledge_base)

    @router.delete("/knowledge-bases/{kb_id}", status_code=204)
    async def delete_knowledge_base(kb_id: str, identity: Caller) -> Response:
        """Deletes the knowledge base with all its documents; storage clean-up finishes in the background."""
        request = pb.DeleteKnowledgeBaseRequest(knowledge_base_id=kb_id)
        await call(identity, lambda: ingestion().DeleteKnowledgeBase(request))
        return Response(status_code=204)

    @router.get("/upload-policy")
    async def get_upload_policy(identity: Caller) -> UploadPolicyView:
        """Size limit and accepted file types, to refuse a file before sending it."""
        return _policy_view(await upload_policy(identity))

    # --- documents ---

    @router.post(
        "/knowledge-bases/{kb_id}/documents",
        status_code=201,
        openapi_extra=UPLOAD_BODY,
        responses={
            200: {"model": UploadView, "description": "the same content was already there (duplicate)"},
            413: {"description": "the file is over the size limit"},
        },
    )
    async def upload_document(
        kb_id: str, request: Request, response: Response, identity: Caller
    ) -> UploadView:
        """Uploads one file (multipart part ``file``); ingestion starts at once. Watch it with
        ``GET /api/v1/documents/{id}/progress``."""
        policy = await upload_policy(identity)
        limit = policy.max_file_size_bytes
        refuse_oversized(request.headers.get("content-length"), limit)
        upload = await spool_upload(request.headers.get("content-type"), request.stream(), limit)
        piece = max(policy.recommended_chunk_size_bytes, 4096)
        try:

            async def messages() -> AsyncIterator[pb.UploadDocumentRequest]:
                async for message in _file_messages(
                    pb.UploadDocumentRequest, kb_id, upload, upload.metadata, piece
                ):
                    yield message

            result = await call(identity, lambda: ingestion().UploadDocument(messages()))
        finally:
            upload.file.close()
        if result.duplicate:
            response.status_code = 200
        return UploadView(document=_document_view(result.document), duplicate=result.duplicate)

    @router.post(
        "/knowledge-bases/{kb_id}/documents/batch",
        openapi_extra=BATCH_UPLOAD_BODY,
        responses={
            400: {"description": "more files than max_files_per_upload, no file, bad metadata or a bad body"},
            404: {"description": "no such knowledge base"},
        },
    )
    async def upload_documents(
        kb_id: Annotated[str, Depends(existing_knowledge_base)], request: Request, identity: Caller
    ) -> BatchUploadView:
        """Uploads several files (one multipart part ``file`` each) in one request; ingestion takes them
        in together, which costs far less per file than one upload each. Answers 200 with one result
        per file, in order, even when some are refused: a refused file has an ``error`` (nothing of it is
        kept), the others a ``document`` to watch with ``GET /api/v1/documents/{id}/progress``."""
        policy = await upload_policy(identity)
        spooled = await spool_uploads(
            request.headers.get("content-type"),
            request.stream(),
            policy.max_file_size_bytes,
            policy.max_files_per_upload,
        )
        piece = max(policy.recommended_chunk_size_bytes, 4096)
        try:
            accepted = [f for f in spooled.files if f.refusal is None]

            async def messages() -> AsyncIterator[pb.UploadDocumentsRequest]:
                for upload in accepted:
                    async for message in _file_messages(
                        pb.UploadDocumentsRequest, kb_id, upload, spooled.metadata, piece
                    ):
                        yield message

            answered: list[pb.UploadResult] = []
            if accepted:
                result = await call(identity, lambda: ingestion().UploadDocuments(messages()))
                answered = list(result.results)
        finally:
            spooled.close()
        if len(answered) != len(accepted):
            raise ServiceError(
                502,
                {
                    "code": "bad_gateway",
                    "message": f"ingestion answered {len(answered)} results for {len(accepted)} files",
                },
            )
        ingested = iter(answered)
        return BatchUploadView(
            results=[
                _result_view(next(ingested)) if f.refusal is None else _refused_view(f) for f in spooled.files
            ]
        )

    @router.get("/knowledge-bases/{kb_id}/documents")
    async def list_documents(
        kb_id: str,
        identity: Caller,
        status: Annotated[list[StatusName] | None, Query(description="repeat to allow several")] = None,
        page_size: Annotated[int, Query(ge=0, description="0 = server default")] = 0,
        page_token: str = "",
    ) -> DocumentList:
        """The knowledge base's documents, newest first."""
        request = pb.ListDocumentsRequest(
            knowledge_base_id=kb_id,
            statuses=[_status_value(s) for s in status or []],
            page_size=page_size,
            page_token=page_token,
        )
        response = await call(identity, lambda: ingestion().ListDocuments(request))
        return DocumentList(
            documents=[_document_view(d) for d in response.documents],
            next_page_token=response.next_page_token,
        )

    @router.get("/documents/{document_id}")
    async def get_document(document_id: str, identity: Caller) -> DocumentView:
        request = pb.GetDocumentRequest(document_id=document_id)
        response = await call(identity, lambda: ingestion().GetDocument(request))
        return _document_view(response.document)

    @router.delete("/documents/{document_id}", status_code=204)
    async def delete_document(document_id: str, identity: Caller) -> Response:
        """Deletes the document with its chunks, vectors and graph facts; a running ingestion stops."""
        request = pb.DeleteDocumentRequest(document_id=document_id)
        await call(identity, lambda: ingestion().DeleteDocument(request))
        return Response(status_code=204)

    @router.post("/documents/{document_id}/reingest")
    async def reingest_document(document_id: str, identity: Caller) -> DocumentView:
        """Ingests the stored file again with the current settings (409 while still in progress)."""
        request = pb.ReingestDocumentRequest(document_id=document_id)
        response = await call(identity, lambda: ingestion().ReingestDocument(request))
        return _document_view(response.document)

    # --- progress ---

    async def progress_events(
        identity: Identity, request: pb.WatchDocumentProgressRequest
    ) -> AsyncIterator[ServerSentEvent]:
        # The channel gives every stream a deadline; a watch that outlives it is opened again (it
        # starts with the current state, so nothing is missed).
        while True:
            with bound_identity(identity):
                stream = ingestion().WatchDocumentProgress(request)
            try:
                async for update in stream:
                    yield ServerSentEvent(
                        event="progress", data=_progress_view(update.progress).model_dump(mode="json")
                    )
                return
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    continue
                yield ServerSentEvent(event="error", data={"error": _http_error(error).body})
                return
            finally:
                stream.cancel()  # the client went away, or the stream ended: stop the watch

    async def existing_document(document_id: str, identity: Caller) -> str:
        # Checked before the stream starts, so an unknown id is a plain 404 rather than an event.
        await call(identity, lambda: ingestion().GetDocument(pb.GetDocumentRequest(document_id=document_id)))
        return document_id

    @router.get(
        "/documents/{document_id}/progress", response_class=EventSourceResponse, responses=PROGRESS_RESPONSE
    )
    async def document_progress(
        document_id: Annotated[str, Depends(existing_document)], identity: Caller
    ) -> AsyncIterator[ServerSentEvent]:
        """The document's progress: its current state, then every change; ends when it is ready or failed."""
        request = pb.WatchDocumentProgressRequest(documents=pb.DocumentIdList(document_ids=[document_id]))
        async for event in progress_events(identity, request):
            yield event

    @router.get(
        "/knowledge-bases/{kb_id}/progress", response_class=EventSourceResponse, responses=PROGRESS_RESPONSE
    )
    async def knowledge_base_progress(
        kb_id: Annotated[str, Depends(existing_knowledge_base)], identity: Caller
    ) -> AsyncIterator[ServerSentEvent]:
        """Progress of every document of the knowledge base (also ones uploaded later), until the client
        disconnects."""
        request = pb.WatchDocumentProgressRequest(knowledge_base_id=kb_id)
        async for event in progress_events(identity, request):
            yield event

    return router


__all__ = ["build_knowledge_router"]
