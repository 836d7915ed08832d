"""Retrieval testing: search a knowledge base and see each result's score parts.

``POST /api/v1/knowledge-bases/{kb_id}/search`` is the page where a team checks what a knowledge
base returns for a question before chatting with it.
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal

import grpc
from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel, Field

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_gateway.api.errors import service_error
from knowsphere_runtime.identity import Identity, bound_identity

MODES = {"hybrid": pb.SEARCH_MODE_HYBRID, "vector": pb.SEARCH_MODE_VECTOR, "bm25": pb.SEARCH_MODE_BM25}


class SearchBody(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    top_k: int = Field(default=0, ge=0, le=100, description="0 = server default")
    mode: Literal["hybrid", "vector", "bm25"] = "hybrid"
    document_ids: list[str] = Field(default_factory=list)
    rrf_k: int | None = Field(default=None, ge=1)
    vector_weight: float | None = Field(default=None, ge=0)
    bm25_weight: float | None = Field(default=None, ge=0)
    rerank: bool | None = None
    mmr_lambda: float | None = Field(default=None, ge=0, le=1)
    expansion: bool | None = None


class ScorePartsView(BaseModel):
    vector: float | None
    bm25: float | None
    rrf: float
    rerank: float | None
    vector_rank: int | None
    bm25_rank: int | None


class SearchResultView(BaseModel):
    handle: str
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    score: float
    scores: ScorePartsView
    text: str
    parent_id: str
    parent_text: str
    position: int
    heading_path: list[str]
    page: int


class SearchView(BaseModel):
    results: list[SearchResultView]
    stats: dict[str, Any]


def _opt(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def build_search_router(retrieval: Callable[[], Any], caller: Callable[..., Identity]) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["retrieval"])

    @router.post("/knowledge-bases/{kb_id}/search")
    async def search(
        kb_id: str,
        body: SearchBody,
        identity: Annotated[Identity, Depends(caller)],
        language: Annotated[str | None, Header(alias="accept-language")] = None,
    ) -> SearchView:
        """Ranked results with their score parts (vector, BM25, RRF, rerank) for one knowledge base."""
        options = pb.SearchOptions(mode=MODES[body.mode])  # type: ignore[arg-type]
        for name, value in (
            ("rrf_k", body.rrf_k),
            ("vector_weight", body.vector_weight),
            ("bm25_weight", body.bm25_weight),
            ("rerank_enabled", body.rerank),
            ("mmr_lambda", body.mmr_lambda),
            ("expansion_enabled", body.expansion),
        ):
            if value is not None:
                setattr(options, name, value)
        request = pb.SearchRequest(
            query=body.query,
            knowledge_base_ids=[kb_id],
            top_k=body.top_k,
            document_ids=body.document_ids,
            options=options,
        )
        metadata = (("accept-language", language),) if language else ()
        with bound_identity(identity):
            try:
                response = await retrieval().Search(request, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                raise service_error(error) from error
        stats = response.stats
        return SearchView(
            results=[
                SearchResultView(
                    handle=r.handle,
                    chunk_id=r.chunk_id,
                    document_id=r.document_id,
                    file_name=r.file_name,
                    knowledge_base_id=r.knowledge_base_id,
                    score=r.score,
                    scores=ScorePartsView(
                        vector=_opt(r.scores, "vector"),
                        bm25=_opt(r.scores, "bm25"),
                        rrf=r.scores.rrf,
                        rerank=_opt(r.scores, "rerank"),
                        vector_rank=_opt(r.scores, "vector_rank"),
                        bm25_rank=_opt(r.scores, "bm25_rank"),
                    ),
                    text=r.text,
                    parent_id=r.parent_id,
                    parent_text=r.parent_text,
                    position=r.position,
                    heading_path=list(r.heading_path),
                    page=r.page,
                )
                for r in response.results
            ],
            stats={
                "vector_hits": stats.vector_hit_count,
                "bm25_hits": stats.bm25_hit_count,
                "expanded": stats.expanded,
                "expansion_queries": list(stats.expansion_queries),
                "reranked": stats.reranked,
                "rerank_skipped_reason": stats.rerank_skipped_reason,
                "mmr_applied": stats.mmr_applied,
                "vector_weight_used": stats.vector_weight_used,
                "bm25_weight_used": stats.bm25_weight_used,
                "embed_ms": stats.embed_duration.ToMilliseconds(),
                "total_ms": stats.total_duration.ToMilliseconds(),
                "unknown_knowledge_base_ids": list(stats.unknown_knowledge_base_ids),
            },
        )

    return router
