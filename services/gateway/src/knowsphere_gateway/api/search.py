"""Retrieval testing: search a knowledge base and see each result's score parts.

``POST /api/v1/knowledge-bases/{kb_id}/search`` is the page where a team checks what a knowledge
base returns for a question before chatting with it. The answer is retrieval's ``SearchResponse`` as
JSON (``protojson``): the results with their score parts and what the search did (``stats``).
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import Field

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_clients import RetrievalClient
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES
from knowsphere_gateway.api.knowledge import INT32_MAX
from knowsphere_gateway.api.protojson import (
    JSON_INTEGER,
    JsonBool,
    JsonFloat,
    RequestBody,
    from_json,
    json_model,
    to_json,
)

SearchJson = json_model(pb.SearchResponse.DESCRIPTOR)

MAX_QUERY_CHARS = 4000
MAX_TOP_K = 100


class SearchBody(RequestBody):
    """A search with the overrides the testing page offers. Hand-written rather than generated from
    ``SearchRequest``: it is flat (the options beside the query), names two options the way the page
    does (``rerank``, ``expansion``), and checks ranges retrieval does not refuse but clamps or ignores
    (query length, ``top_k``, weights, ``mmr_lambda``)."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    top_k: Annotated[int, Field(ge=0, le=MAX_TOP_K), JSON_INTEGER] = Field(
        default=0, description="0 = server default"
    )
    mode: SearchMode = SearchMode.HYBRID
    document_ids: list[str] = Field(default_factory=list)
    rrf_k: Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER] | None = None
    vector_weight: Annotated[JsonFloat, Field(ge=0)] | None = None
    bm25_weight: Annotated[JsonFloat, Field(ge=0)] | None = None
    rerank: JsonBool | None = None
    mmr_lambda: Annotated[JsonFloat, Field(ge=0, le=1)] | None = None
    expansion: JsonBool | None = None

    def options(self) -> pb.SearchOptions:
        return from_json(
            pb.SearchOptions,
            {
                "mode": self.mode,
                "rrf_k": self.rrf_k,
                "vector_weight": self.vector_weight,
                "bm25_weight": self.bm25_weight,
                "rerank_enabled": self.rerank,
                "mmr_lambda": self.mmr_lambda,
                "expansion_enabled": self.expansion,
            },
        )


def build_search_router(retrieval: RetrievalClient, caller: Callable[..., Caller]) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["retrieval"], responses=SERVICE_RESPONSES)

    @router.post("/knowledge-bases/{kb_id}/search", response_model=SearchJson)
    async def search(kb_id: str, body: SearchBody, who: Annotated[Caller, Depends(caller)]) -> dict[str, Any]:
        """Ranked results with their score parts (vector, BM25, RRF, rerank) for one knowledge base."""
        with who.bound():
            response = await retrieval.search(
                body.query, [kb_id], top_k=body.top_k, document_ids=body.document_ids, options=body.options()
            )
        return to_json(response)

    return router


__all__ = ["SearchBody", "SearchJson", "build_search_router"]
