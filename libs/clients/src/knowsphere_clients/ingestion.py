"""The ingestion client: knowledge bases, uploads (streamed), documents and progress."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere_clients.base import ServiceClient

UPLOAD_TIMEOUT_SECONDS = 600.0


class IngestionClient(ServiceClient):
    service = "ingestion"

    # --- knowledge bases --------------------------------------------------------------------------

    async def create_knowledge_base(self, request: ipb.CreateKnowledgeBaseRequest) -> ipb.KnowledgeBase:
        response: ipb.CreateKnowledgeBaseResponse = await self._call("CreateKnowledgeBase", request)
        return response.knowledge_base

    async def get_knowledge_base(self, knowledge_base_id: str) -> ipb.KnowledgeBase:
        response: ipb.GetKnowledgeBaseResponse = await self._call(
            "GetKnowledgeBase", ipb.GetKnowledgeBaseRequest(knowledge_base_id=knowledge_base_id)
        )
        return response.knowledge_base

    async def list_knowledge_bases(
        self, request: ipb.ListKnowledgeBasesRequest
    ) -> ipb.ListKnowledgeBasesResponse:
        response: ipb.ListKnowledgeBasesResponse = await self._call("ListKnowledgeBases", request)
        return response

    async def update_knowledge_base(self, request: ipb.UpdateKnowledgeBaseRequest) -> ipb.KnowledgeBase:
        response: ipb.UpdateKnowledgeBaseResponse = await self._call("UpdateKnowledgeBase", request)
        return response.knowledge_base

    async def delete_knowledge_base(self, knowledge_base_id: str) -> None:
        await self._call(
            "DeleteKnowledgeBase", ipb.DeleteKnowledgeBaseRequest(knowledge_base_id=knowledge_base_id)
        )

    # --- uploads ----------------------------------------------------------------------------------

    async def get_upload_policy(self) -> ipb.GetUploadPolicyResponse:
        response: ipb.GetUploadPolicyResponse = await self._call(
            "GetUploadPolicy", ipb.GetUploadPolicyRequest()
        )
        return response

    async def upload_document(
        self, messages: AsyncIterable[ipb.UploadDocumentRequest]
    ) -> ipb.UploadDocumentResponse:
        """One file: its header message, then its bytes."""
        response: ipb.UploadDocumentResponse = await self._call(
            "UploadDocument", messages, timeout=UPLOAD_TIMEOUT_SECONDS
        )
        return response

    async def upload_documents(
        self, messages: AsyncIterable[ipb.UploadDocumentsRequest]
    ) -> list[ipb.UploadResult]:
        """Several files in one stream (header, bytes, next header …); a result per file, in order."""
        response: ipb.UploadDocumentsResponse = await self._call(
            "UploadDocuments", messages, timeout=UPLOAD_TIMEOUT_SECONDS
        )
        return list(response.results)

    # --- documents --------------------------------------------------------------------------------

    async def get_document(self, document_id: str) -> ipb.Document:
        response: ipb.GetDocumentResponse = await self._call(
            "GetDocument", ipb.GetDocumentRequest(document_id=document_id)
        )
        return response.document

    async def list_documents(self, request: ipb.ListDocumentsRequest) -> ipb.ListDocumentsResponse:
        response: ipb.ListDocumentsResponse = await self._call("ListDocuments", request)
        return response

    async def delete_document(self, document_id: str) -> None:
        await self._call("DeleteDocument", ipb.DeleteDocumentRequest(document_id=document_id))

    async def reingest_document(self, document_id: str) -> ipb.Document:
        response: ipb.ReingestDocumentResponse = await self._call(
            "ReingestDocument", ipb.ReingestDocumentRequest(document_id=document_id)
        )
        return response.document

    def watch_documents(self, document_ids: Sequence[str]) -> AsyncIterator[ipb.DocumentProgress]:
        """Progress of documents: their current state, then every change, until all are ready or failed."""
        request = ipb.WatchDocumentProgressRequest(
            documents=ipb.DocumentIdList(document_ids=list(document_ids))
        )
        return self._progress(request)

    def watch_knowledge_base(self, knowledge_base_id: str) -> AsyncIterator[ipb.DocumentProgress]:
        """Progress of every document of a knowledge base (also later ones), until the caller stops."""
        return self._progress(ipb.WatchDocumentProgressRequest(knowledge_base_id=knowledge_base_id))

    async def _progress(
        self, request: ipb.WatchDocumentProgressRequest
    ) -> AsyncIterator[ipb.DocumentProgress]:
        async for update in self._stream("WatchDocumentProgress", request):
            yield update.progress
