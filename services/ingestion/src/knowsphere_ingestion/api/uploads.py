"""Uploads over gRPC: the upload policy, one file (UploadDocument), many files in one stream
(UploadDocuments).

A file's bytes go to the object store as they arrive; the document is recorded (queued) once they
are all there and hold up, and the accepted files of one knowledge base are ingested together, by one
workflow per ``batch_max_documents`` of them. A refused file (bad header, content that is not what
its name says, the same content already in the knowledge base) leaves nothing behind; in a
many-file stream it gets its own error and the others go on.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from opentelemetry import trace

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients import ModelHubClient, ServiceError
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.adapters.store import DuplicateContent, IngestionStore
from knowsphere_ingestion.api import lookup
from knowsphere_ingestion.api.convert import document_pb, upload_error
from knowsphere_ingestion.api.replies import reply
from knowsphere_ingestion.api.runs import Runs, new_run_id
from knowsphere_ingestion.api.upload_protocol import ContentCheck, FileStream, check_header, single_file
from knowsphere_ingestion.domain.records import Document, KnowledgeBase
from knowsphere_ingestion.formats import FILE_TYPES, FileType
from knowsphere_ingestion.parsing.ocr import ocr_available
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore, BlobTooLarge
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, invalid, precondition
from knowsphere_telemetry import attributes as attr

log = structlog.get_logger(__name__)
tracer = trace.get_tracer("knowsphere.ingestion")

NOT_STORED = "nothing was stored, retry later"


def _refused(file_name: str, error: RequestError) -> pb.UploadResult:
    return pb.UploadResult(file_name=file_name, error=upload_error(error))


@dataclass
class _Run:
    """Files of one knowledge base accepted in a stream and not started yet, with their result's index."""

    run_id: str = field(default_factory=new_run_id)
    accepted: list[tuple[Document, int]] = field(default_factory=list)


class Uploads:
    """GetUploadPolicy, UploadDocument, UploadDocuments."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: IngestionStore,
        blobs: BlobStore,
        modelhub: ModelHubClient,
        runs: Runs,
    ) -> None:
        self._settings = settings
        self._store = store
        self._blobs = blobs
        self._modelhub = modelhub
        self._runs = runs

    async def _has_asr(self) -> bool:
        """Whether the tenant has a default ASR model, as the client's per-tenant cache says (modelhub's
        change events clear it, see :mod:`knowsphere_ingestion.api.bus`)."""
        try:
            return await self._modelhub.has_default(ModelType.ASR)
        except ServiceError:
            return False

    async def _can_transcribe(self) -> bool:
        """Whether audio can be transcribed, before a file is refused for it.

        A cached "no" is asked again uncached, so a model configured a moment ago counts even if its
        change event has not reached this process yet (only the refusal path pays the second lookup).
        """
        if await self._has_asr():
            return True
        try:
            fresh = await self._modelhub.get_default_model(ModelType.ASR)
        except ServiceError:
            return False
        if not fresh.HasField("model"):
            return False
        # The cached "no" is stale: drop what is cached of the defaults and of the model found.
        self._modelhub.invalidate(require_identity().tenant_id, fresh.model.id)
        return True

    async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
        async def work() -> pb.GetUploadPolicyResponse:
            missing = {"ocr": not ocr_available(), "asr": not await self._has_asr()}
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

        return await reply(context, work)

    async def _accept_header(
        self, header: pb.UploadHeader, known: dict[str, KnowledgeBase] | None = None
    ) -> tuple[KnowledgeBase, FileType]:
        """Checks an upload's header; returns its knowledge base (from ``known`` when looked up before
        in the same stream) and the file's type."""
        kb = (known or {}).get(header.knowledge_base_id)
        if kb is None:
            kb = await lookup.knowledge_base(
                self._store, header.knowledge_base_id, "header.knowledge_base_id", with_counts=False
            )
            if known is not None:
                known[kb.id] = kb
        file_type = check_header(self._settings, header)
        if file_type.needs == "asr" and not await self._can_transcribe():
            raise precondition(
                "header.file_name",
                f"{file_type.extension} audio is transcribed by a speech-to-text (ASR) model and none is "
                "configured",
            )
        return kb, file_type

    async def _receive(
        self,
        kb: KnowledgeBase,
        file_type: FileType,
        header: pb.UploadHeader,
        chunks: AsyncIterator[bytes],
        run_id: str,
    ) -> Document:
        """Stores the bytes of one file whose header was checked and records it (queued, in run
        ``run_id``).

        Raises RequestError for a refused file and DuplicateContent when the knowledge base holds the
        same content; either way nothing of the file is kept.
        """
        span = trace.get_current_span()
        span.set_attribute(attr.KNOWLEDGE_BASE_ID, kb.id)
        span.set_attribute(attr.FILE_DECLARED_SIZE_BYTES, header.declared_size_bytes)
        document_id = uuid.uuid4().hex
        key = artifacts.file_key(kb.tenant_id, kb.id, document_id)
        content = ContentCheck(header)
        limit = min(header.declared_size_bytes, self._settings.max_file_size_bytes)
        try:
            stored = await self._blobs.put(key, content.passed(chunks), max_bytes=limit)
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
            content.finish()
            now = datetime.now(UTC)
            document = Document(
                id=document_id,
                tenant_id=kb.tenant_id,
                knowledge_base_id=kb.id,
                file_name=header.file_name,
                content_type=file_type.content_types[0],
                size_bytes=stored.size_bytes,
                content_sha256=stored.sha256,
                blob_key=key,
                status=DocumentStatus.QUEUED,
                ingest_run_id=run_id,
                metadata=dict(header.metadata),
                create_time=now,
                update_time=now,
            )
            # The store refuses the same content twice in a knowledge base and answers with the
            # document that has it (DuplicateContent): no lookup of our own before.
            await self._store.create_document(document)
        except BaseException:
            await self._blobs.delete(key)
            raise
        span.set_attribute(attr.DOCUMENT_ID, document.id)
        # One line per file at DEBUG; a stream of many files logs its counts once (UploadDocuments).
        log.debug("document uploaded", document_id=document.id, size=stored.size_bytes)
        return document

    async def _start_or_drop(self, documents: Sequence[Document]) -> None:
        """Starts the ingestion of freshly uploaded documents; if that fails, they are not kept, and a
        refusal says so."""
        try:
            await self._runs.start(documents)
        except BaseException as error:
            for document in documents:
                await self._store.purge_document(document.tenant_id, document.id)
                await self._blobs.delete(document.blob_key)
            if isinstance(error, RequestError):
                raise RequestError(error.code, f"{error.message}; {NOT_STORED}", field=error.field) from error
            raise

    async def UploadDocument(
        self, request_iterator: AsyncIterator[pb.UploadDocumentRequest], context: Any
    ) -> Any:
        async def work() -> pb.UploadDocumentResponse:
            header, chunks = await single_file(request_iterator)
            with tracer.start_as_current_span("ingestion.upload") as span:
                try:
                    kb, file_type = await self._accept_header(header)
                    document = await self._receive(kb, file_type, header, chunks, new_run_id())
                except DuplicateContent as duplicate:
                    span.set_attribute(attr.DOCUMENT_DUPLICATE, True)
                    return pb.UploadDocumentResponse(document=document_pb(duplicate.existing), duplicate=True)
                await self._start_or_drop([document])
                log.info("document uploaded", document_id=document.id, size=document.size_bytes)
                return pb.UploadDocumentResponse(document=document_pb(document), duplicate=False)

        return await reply(context, work)

    async def _one_file(
        self,
        stream: FileStream,
        header: pb.UploadHeader,
        known: dict[str, KnowledgeBase],
        runs: dict[str, _Run],
    ) -> tuple[pb.UploadResult, Document | None]:
        """The result of one file of a stream, and its document when it was accepted (it joined the
        run of its knowledge base)."""
        with tracer.start_as_current_span("ingestion.upload_file"):
            try:
                kb, file_type = await self._accept_header(header, known)
                run = runs.setdefault(kb.id, _Run())
                document = await self._receive(kb, file_type, header, stream.file_bytes(), run.run_id)
            except DuplicateContent as duplicate:
                result = pb.UploadResult(
                    file_name=header.file_name, document=document_pb(duplicate.existing), duplicate=True
                )
                return result, None
            except RequestError as error:
                return _refused(header.file_name, error), None
            return pb.UploadResult(file_name=header.file_name, document=document_pb(document)), document

    async def UploadDocuments(
        self, request_iterator: AsyncIterator[pb.UploadDocumentsRequest], context: Any
    ) -> Any:
        async def work() -> pb.UploadDocumentsResponse:
            stream = FileStream(request_iterator)
            results: list[pb.UploadResult] = []
            # Per knowledge base, the run its next accepted files join. One workflow ingests one run.
            runs: dict[str, _Run] = {}
            known: dict[str, KnowledgeBase] = {}
            limit = self._settings.max_files_per_upload

            async def start(kb_id: str) -> None:
                run = runs.pop(kb_id)
                try:
                    await self._start_or_drop([document for document, _ in run.accepted])
                except RequestError as error:
                    for _, index in run.accepted:
                        results[index] = _refused(results[index].file_name, error)

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
                    else:
                        result, document = await self._one_file(stream, header, known, runs)
                        results.append(result)
                        if document is not None:
                            run = runs[document.knowledge_base_id]
                            run.accepted.append((document, len(results) - 1))
                            if len(run.accepted) >= self._settings.batch_max_documents:
                                await start(document.knowledge_base_id)
                    await stream.skip_file()  # what a refused file had left in the stream
                    header = await stream.next_header()
                for kb_id in [kb_id for kb_id, run in runs.items() if run.accepted]:
                    await start(kb_id)
                refused = sum(1 for r in results if r.HasField("error"))
                span.set_attribute(attr.UPLOAD_FILES, len(results))
                span.set_attribute(attr.UPLOAD_REFUSED, refused)
            log.info("documents uploaded", files=len(results), refused=refused)
            return pb.UploadDocumentsResponse(results=results)

        return await reply(context, work)
