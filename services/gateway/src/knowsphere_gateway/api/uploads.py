"""Uploads into a knowledge base (``…/documents``, ``…/documents/batch``) and the upload policy.

Uploads are ``multipart/form-data`` (part ``file``, optional part ``metadata`` holding a JSON object of
strings). The body is parsed as it arrives and the file part spooled to a temporary file (in memory up
to ``multipart.SPOOL_MEMORY_BYTES``, on disk above), never held whole in memory; the spooled file is
then streamed into ingestion's ``UploadDocument`` in pieces of the upload policy's recommended size, with
the real size declared. A ``Content-Length`` that cannot fit the size limit is refused with 413 before
any of the body is read.

The batch upload takes several ``file`` parts (up to the policy's ``max_files_per_upload``; the
``metadata`` part applies to each), spools each the same way, and streams all of them into one
``UploadDocuments`` call, so that ingestion takes them in together. It answers one result per file, in
order: a refused file (over the size limit here, or refused by ingestion) gets its error and the others
go on. The files of one request are also capped by the gateway's own ``max_files`` (the smaller of the
two counts applies), and the whole body by ``KS_GATEWAY_MAX_UPLOAD_BYTES`` (``limits.BodyLimits``),
so a batch can never spool more than that to the gateway's temporary disk.
"""

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_clients import IngestionClient
from knowsphere_clients.errors import from_code
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import (
    BAD_GATEWAY,
    SERVICE_RESPONSES,
    HttpError,
    error_body,
    error_response,
)
from knowsphere_gateway.api.multipart import (
    SpooledFile,
    SpooledUpload,
    read_spooled,
    refuse_oversized,
    spool_upload,
    spool_uploads,
)
from knowsphere_gateway.api.protojson import json_model, to_json

M = TypeVar("M")

# The upload policy is a server setting; re-read it at most this often.
UPLOAD_POLICY_TTL_SECONDS = 60.0
# Smallest piece a file is streamed in, whatever the policy recommends.
MIN_PIECE_BYTES = 4096
# Files one request may carry when the gateway is given no count of its own.
DEFAULT_MAX_UPLOAD_FILES = 100

UPLOAD_PATHS = (
    "/api/v1/knowledge-bases/{kb_id}/documents",
    "/api/v1/knowledge-bases/{kb_id}/documents/batch",
)
"""The routes whose bodies are uploads (``limits.BodyLimits`` gives them the upload size limit)."""

UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: error_response("no file part, an empty or unsupported file, bad metadata or a malformed body"),
    413: error_response("over the size limit of a file or of one upload request"),
    415: error_response("the body is not multipart/form-data"),
}


class UploadErrorBody(BaseModel):
    """Why one file of a batch was refused; nothing of it is kept."""

    code: str = Field(description="e.g. invalid_argument, payload_too_large, failed_precondition")
    message: str = Field(description="what was wrong, naming the field and the limit")
    field: str | None = Field(default=None, description="the part of the upload at fault, e.g. file_name")


_UPLOAD_ERROR = pb.UploadError.DESCRIPTOR.full_name

UploadPolicyJson = json_model(pb.GetUploadPolicyResponse.DESCRIPTOR)
UploadJson = json_model(pb.UploadDocumentResponse.DESCRIPTOR)
# A refused file's ``error`` is the gateway's error body (lower-case code, the field as the HTTP caller
# named it), not ingestion's ``UploadError``.
BatchUploadJson = json_model(pb.UploadDocumentsResponse.DESCRIPTOR, replace={_UPLOAD_ERROR: UploadErrorBody})


def upload_error_json(error: pb.UploadError) -> dict[str, Any]:
    """An ``UploadError`` as the error body a single upload of the file would have had."""
    return error_body(from_code(error.code, error.message, field=error.field))


def _result_json(result: pb.UploadResult) -> dict[str, Any]:
    return to_json(result, replace={_UPLOAD_ERROR: upload_error_json})


def _refused_json(spooled: SpooledFile) -> dict[str, Any]:
    """The result of a file refused here, before it reached ingestion."""
    result = to_json(pb.UploadResult(file_name=spooled.file_name))
    result["error"] = spooled.refusal.body if spooled.refusal is not None else None
    return result


async def _file_messages(
    message: Callable[..., M],
    kb_id: str,
    upload: SpooledUpload | SpooledFile,
    metadata: dict[str, str],
    piece: int,
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
    """The OpenAPI request body of an upload: ``file`` part(s) and an optional ``metadata`` part (a JSON
    object of strings)."""
    metadata = {"type": "object", "additionalProperties": {"type": "string"}, "description": metadata_help}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["file"],
                        "properties": {"file": file, "metadata": metadata},
                    },
                    "encoding": {"metadata": {"contentType": "application/json"}},
                }
            },
        }
    }


UPLOAD_BODY = _multipart_body(
    {"type": "string", "format": "binary", "description": "the file, with its name"}, METADATA_HELP
)


def batch_upload_body(max_files: int) -> dict[str, Any]:
    return _multipart_body(
        {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "minItems": 1,
            "maxItems": max_files,
            "description": "the files, each with its name: one part named 'file' per file, at most "
            f"{max_files} (KS_GATEWAY_MAX_UPLOAD_FILES) and at most the upload policy's "
            "max_files_per_upload",
        },
        f"{METADATA_HELP}; applies to every file",
    )


def build_uploads_router(
    ingestion: IngestionClient,
    caller: Callable[..., Caller],
    knowledge_base_exists: Callable[..., Awaitable[str]],
    max_files: int = DEFAULT_MAX_UPLOAD_FILES,
) -> APIRouter:
    """``caller`` gives each route its :class:`Caller`; ``knowledge_base_exists`` checks the path's
    knowledge base before a batch body is read; ``max_files`` caps the files of one batch besides the
    upload policy's count."""
    router = APIRouter(prefix="/api/v1", tags=["knowledge"], responses=SERVICE_RESPONSES)
    # By tenant: its default models decide which components a file type misses (speech recognition).
    policy_cache: dict[str, tuple[float, pb.GetUploadPolicyResponse]] = {}
    Who = Annotated[Caller, Depends(caller)]

    async def upload_policy(who: Caller) -> pb.GetUploadPolicyResponse:
        tenant = who.identity.tenant_id
        cached = policy_cache.get(tenant)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        with who.bound():
            policy = await ingestion.get_upload_policy()
        now = time.monotonic()
        for expired in [t for t, (until, _) in policy_cache.items() if until <= now]:
            del policy_cache[expired]  # tenants come and go: only the live entries are kept
        policy_cache[tenant] = (now + UPLOAD_POLICY_TTL_SECONDS, policy)
        return policy

    @router.get("/upload-policy", response_model=UploadPolicyJson)
    async def get_upload_policy(who: Who) -> dict[str, Any]:
        """Size limit and accepted file types, to refuse a file before sending it."""
        return to_json(await upload_policy(who))

    @router.post(
        "/knowledge-bases/{kb_id}/documents",
        status_code=201,
        response_model=UploadJson,
        openapi_extra=UPLOAD_BODY,
        responses={
            200: {"model": UploadJson, "description": "the same content was already there (duplicate)"},
            **UPLOAD_RESPONSES,
        },
    )
    async def upload_document(kb_id: str, request: Request, response: Response, who: Who) -> dict[str, Any]:
        """Uploads one file (multipart part ``file``); ingestion starts at once. Watch it with
        ``GET /api/v1/documents/{id}/progress``."""
        policy = await upload_policy(who)
        limit = policy.max_file_size_bytes
        refuse_oversized(request.headers.get("content-length"), limit)
        upload = await spool_upload(request.headers.get("content-type"), request.stream(), limit)
        piece = max(policy.recommended_chunk_size_bytes, MIN_PIECE_BYTES)
        try:
            messages = _file_messages(pb.UploadDocumentRequest, kb_id, upload, upload.metadata, piece)
            with who.bound():
                result = await ingestion.upload_document(messages)
        finally:
            upload.file.close()
        if result.duplicate:
            response.status_code = 200
        return to_json(result)

    @router.post(
        "/knowledge-bases/{kb_id}/documents/batch",
        response_model=BatchUploadJson,
        openapi_extra=batch_upload_body(max_files),
        responses={
            **UPLOAD_RESPONSES,
            400: error_response(
                "more files than max_files_per_upload (or the gateway's KS_GATEWAY_MAX_UPLOAD_FILES), "
                "no file, bad metadata or a malformed body"
            ),
            404: error_response("no such knowledge base"),
        },
    )
    async def upload_documents(
        kb_id: Annotated[str, Depends(knowledge_base_exists)], request: Request, who: Who
    ) -> dict[str, Any]:
        """Uploads several files (one multipart part ``file`` each) in one request; ingestion takes them
        in together, which costs far less per file than one upload each. Answers 200 with one result
        per file, in order, even when some are refused: a refused file has an ``error`` (nothing of it is
        kept), the others a ``document`` to watch with ``GET /api/v1/documents/{id}/progress``."""
        policy = await upload_policy(who)
        spooled = await spool_uploads(
            request.headers.get("content-type"),
            request.stream(),
            policy.max_file_size_bytes,
            min(policy.max_files_per_upload or max_files, max_files),
        )
        piece = max(policy.recommended_chunk_size_bytes, MIN_PIECE_BYTES)
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
                with who.bound():
                    answered = await ingestion.upload_documents(messages())
        finally:
            spooled.close()
        if len(answered) != len(accepted):
            raise HttpError(
                BAD_GATEWAY,
                "bad_gateway",
                f"ingestion answered {len(answered)} results for {len(accepted)} files",
            )
        ingested = iter(answered)
        return {
            "results": [
                _result_json(next(ingested)) if f.refusal is None else _refused_json(f) for f in spooled.files
            ]
        }

    return router


__all__ = [
    "DEFAULT_MAX_UPLOAD_FILES",
    "UPLOAD_PATHS",
    "BatchUploadJson",
    "UploadErrorBody",
    "UploadJson",
    "UploadPolicyJson",
    "build_uploads_router",
]
