"""Knowledge bases and their documents (``/api/v1/knowledge-bases``, ``/api/v1/documents``), backed by
ingestion: create, read, change and delete; list, read, delete and re-ingest documents.

Responses are ingestion's messages as JSON (``protojson``); request bodies are generated from the
request messages, so a field added to ingestion's contract reaches this API with no edit here. Uploads
live in ``uploads``, progress streams in ``progress``.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.ingestion.v1.ingestion_enums import DocumentStatus
from knowsphere_clients import IngestionClient
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES, error_response
from knowsphere_gateway.api.protojson import body_model, from_json, json_model, to_json

KnowledgeBaseJson = json_model(pb.KnowledgeBase.DESCRIPTOR)
KnowledgeBaseListJson = json_model(pb.ListKnowledgeBasesResponse.DESCRIPTOR)
DocumentJson = json_model(pb.Document.DESCRIPTOR)
DocumentListJson = json_model(pb.ListDocumentsResponse.DESCRIPTOR)

INT32_MAX = 2**31 - 1
"""The largest value of a proto ``int32`` (page sizes, counts): a larger one is refused with a 422."""

PageSize = Annotated[
    int, Query(ge=0, le=INT32_MAX, description="0 = server default; the server's maximum applies")
]
"""The ``page_size`` of a list: the default and the maximum are the answering service's, not restated."""

# Request bodies: the request messages, the id from the path left out.
KnowledgeBaseCreate = body_model(pb.CreateKnowledgeBaseRequest.DESCRIPTOR)
KnowledgeBaseUpdate = body_model(
    pb.UpdateKnowledgeBaseRequest.DESCRIPTOR, exclude=frozenset({"knowledge_base_id"})
)


def knowledge_base_exists(
    ingestion: IngestionClient, caller: Callable[..., Caller]
) -> Callable[..., Awaitable[str]]:
    """A dependency giving the path's ``kb_id`` once ingestion knows it: a route that reads a body or
    opens a stream answers an unknown knowledge base with a plain 404 first."""

    async def existing(kb_id: str, who: Annotated[Caller, Depends(caller)]) -> str:
        with who.bound():
            await ingestion.get_knowledge_base(kb_id)
        return kb_id

    return existing


def build_knowledge_router(ingestion: IngestionClient, caller: Callable[..., Caller]) -> APIRouter:
    """``caller`` is the dependency giving each route its :class:`Caller`."""
    router = APIRouter(prefix="/api/v1", tags=["knowledge"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    # --- knowledge bases ---

    @router.post("/knowledge-bases", status_code=201, response_model=KnowledgeBaseJson)
    async def create_knowledge_base(body: KnowledgeBaseCreate, who: Who) -> dict[str, Any]:  # type: ignore[valid-type]
        """Creates a knowledge base; unset fields take the server defaults (the tenant's default
        embedding model, heading chunking)."""
        request = from_json(pb.CreateKnowledgeBaseRequest, body)  # type: ignore[arg-type]
        with who.bound():
            return to_json(await ingestion.create_knowledge_base(request))

    @router.get("/knowledge-bases", response_model=KnowledgeBaseListJson)
    async def list_knowledge_bases(
        who: Who,
        page_size: PageSize = 0,
        page_token: str = "",
    ) -> dict[str, Any]:
        request = pb.ListKnowledgeBasesRequest(page_size=page_size, page_token=page_token)
        with who.bound():
            return to_json(await ingestion.list_knowledge_bases(request))

    @router.get("/knowledge-bases/{kb_id}", response_model=KnowledgeBaseJson)
    async def get_knowledge_base(kb_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await ingestion.get_knowledge_base(kb_id))

    @router.patch("/knowledge-bases/{kb_id}", response_model=KnowledgeBaseJson)
    async def update_knowledge_base(kb_id: str, body: KnowledgeBaseUpdate, who: Who) -> dict[str, Any]:  # type: ignore[valid-type]
        """Changes only the fields given; a new embedding model starts a migration that re-embeds every
        document; ``chunking`` replaces the whole set."""
        request = from_json(pb.UpdateKnowledgeBaseRequest, body)  # type: ignore[arg-type]
        request.knowledge_base_id = kb_id
        with who.bound():
            return to_json(await ingestion.update_knowledge_base(request))

    @router.delete("/knowledge-bases/{kb_id}", status_code=204)
    async def delete_knowledge_base(kb_id: str, who: Who) -> Response:
        """Deletes the knowledge base with all its documents; storage clean-up finishes in the background."""
        with who.bound():
            await ingestion.delete_knowledge_base(kb_id)
        return Response(status_code=204)

    # --- documents ---

    @router.get("/knowledge-bases/{kb_id}/documents", response_model=DocumentListJson)
    async def list_documents(
        kb_id: str,
        who: Who,
        status: Annotated[list[DocumentStatus] | None, Query(description="repeat to allow several")] = None,
        page_size: PageSize = 0,
        page_token: str = "",
    ) -> dict[str, Any]:
        """The knowledge base's documents, newest first."""
        request = pb.ListDocumentsRequest(
            knowledge_base_id=kb_id,
            statuses=[s.to_proto() for s in status or []],
            page_size=page_size,
            page_token=page_token,
        )
        with who.bound():
            return to_json(await ingestion.list_documents(request))

    @router.get("/documents/{document_id}", response_model=DocumentJson)
    async def get_document(document_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await ingestion.get_document(document_id))

    @router.delete("/documents/{document_id}", status_code=204)
    async def delete_document(document_id: str, who: Who) -> Response:
        """Deletes the document with its chunks, vectors and graph facts; a running ingestion stops."""
        with who.bound():
            await ingestion.delete_document(document_id)
        return Response(status_code=204)

    @router.post(
        "/documents/{document_id}/reingest",
        response_model=DocumentJson,
        responses={409: error_response("the document is still being ingested")},
    )
    async def reingest_document(document_id: str, who: Who) -> dict[str, Any]:
        """Ingests the stored file again with the current settings (409 while still in progress)."""
        with who.bound():
            return to_json(await ingestion.reingest_document(document_id))

    return router


__all__ = [
    "INT32_MAX",
    "DocumentJson",
    "DocumentListJson",
    "KnowledgeBaseJson",
    "KnowledgeBaseListJson",
    "PageSize",
    "build_knowledge_router",
    "knowledge_base_exists",
]
