"""Documents over gRPC: read, list, delete (with the purge that follows) and re-ingest.

A deletion first marks the document (from then on it is gone for every reader), then removes it
everywhere: its workflow, its index entries, its files, its row. :class:`DocumentRemoval` does the
second half, and the reconciler repeats it for documents a crash left marked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_clients import RetrievalClient
from knowsphere_contracts.vocabulary import TERMINAL_STATUSES, DocumentStatus
from knowsphere_ingestion import artifacts
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api import lookup
from knowsphere_ingestion.api.convert import document_pb
from knowsphere_ingestion.api.replies import reply
from knowsphere_ingestion.api.runs import Runs, new_run_id
from knowsphere_ingestion.domain.records import Document, Progress
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, invalid
from knowsphere_sqlstore.pages import decode_page_token, encode_page_token

log = structlog.get_logger(__name__)


Announce = Callable[[str, list[str]], Awaitable[None]]
"""Tells the platform that documents of a knowledge base are gone: (knowledge base id, document ids)."""


class DocumentRemoval:
    """Removes a document marked for deletion from everywhere; safe to repeat after a crash."""

    def __init__(
        self,
        *,
        store: IngestionStore,
        blobs: BlobStore,
        retrieval: RetrievalClient,
        runs: Runs,
        announce: Announce | None = None,
    ) -> None:
        self._store = store
        self._blobs = blobs
        self._retrieval = retrieval
        self._runs = runs
        self.announce = announce
        """Tells consumers (memory) which documents are gone; None announces nothing."""

    async def purge(self, document: Document) -> None:
        await self._runs.cancel(document)
        await self._retrieval.delete_document(document.knowledge_base_id, document.id)
        for prefix in artifacts.document_prefixes(
            document.tenant_id, document.knowledge_base_id, document.id
        ):
            await self._blobs.delete_prefix(prefix)
        if self.announce is not None:
            # Before the record goes: if announcing fails, the document stays marked for deletion and
            # the reconciler runs the whole purge again, announcing then (consumers apply it once).
            await self.announce(document.knowledge_base_id, [document.id])
        await self._store.purge_document(document.tenant_id, document.id)
        log.info("document deleted", document_id=document.id)


def statuses_of(numbers: Any) -> list[DocumentStatus]:
    """The statuses a list request filters on, from their proto numbers."""
    statuses = []
    for number in numbers:
        status = DocumentStatus.from_number(number)
        if status is None:
            raise invalid("statuses", f"{number} is not a document status")
        statuses.append(status)
    return statuses


class Documents:
    """GetDocument, ListDocuments, DeleteDocument, ReingestDocument."""

    def __init__(
        self, *, settings: Settings, store: IngestionStore, runs: Runs, removal: DocumentRemoval
    ) -> None:
        self._settings = settings
        self._store = store
        self._runs = runs
        self._removal = removal

    async def GetDocument(self, request: pb.GetDocumentRequest, context: Any) -> Any:
        async def work() -> pb.GetDocumentResponse:
            document = await lookup.document(self._store, request.document_id)
            return pb.GetDocumentResponse(document=document_pb(document))

        return await reply(context, work)

    async def ListDocuments(self, request: pb.ListDocumentsRequest, context: Any) -> Any:
        async def work() -> pb.ListDocumentsResponse:
            tenant = require_identity().tenant_id
            kb = await lookup.knowledge_base(self._store, request.knowledge_base_id, with_counts=False)
            size = lookup.page_size(self._settings, request.page_size)
            statuses = statuses_of(request.statuses)
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

        return await reply(context, work)

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context: Any) -> Any:
        async def work() -> pb.DeleteDocumentResponse:
            tenant = require_identity().tenant_id
            document = await lookup.document(self._store, request.document_id)
            await self._store.mark_deleting(tenant, document.id)
            await self._removal.purge(document)
            return pb.DeleteDocumentResponse()

        return await reply(context, work)

    async def ReingestDocument(self, request: pb.ReingestDocumentRequest, context: Any) -> Any:
        async def work() -> pb.ReingestDocumentResponse:
            tenant = require_identity().tenant_id
            document = await lookup.document(self._store, request.document_id)
            if document.status not in TERMINAL_STATUSES:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"document {document.id} is still being ingested ({document.status})",
                    field="document_id",
                )
            updated = await self._store.update_document(
                tenant,
                document.id,
                run_id=document.ingest_run_id,
                ingest_run_id=new_run_id(),
                status=DocumentStatus.QUEUED,
                failure=None,
                progress=Progress(),
            )
            if updated is None:
                raise RequestError(
                    grpc.StatusCode.ABORTED, f"document {document.id} changed meanwhile; retry"
                )
            try:
                await self._runs.start([updated])
            except RequestError:
                # Recorded as queued: the reconciler starts it once Temporal answers again.
                log.warning("re-ingest queued while Temporal is unreachable", document_id=document.id)
            return pb.ReingestDocumentResponse(document=document_pb(updated))

        return await reply(context, work)
