"""doc_retrieval: one search over a tenant's knowledge bases, in the order the spec fixes.

1. group the knowledge bases by embedding model and embed the query once per model;
2. recall with both legs (vectors per model group, BM25 over all) and fuse;
3. only when hits are too few, expand the query (synonyms or LLM multi-query) and fuse again;
4. fetch the chunks and their parents (a parent's text travels once, with its best child);
5. rerank through modelhub when a rerank model is configured, then optional MMR.

Every step is a span with its counts. I/O comes in through the ports and callables given to
:class:`Searcher`, so this module holds only the logic.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry import trace

from knowsphere_retrieval.adapters.ports import ChunkStore, Hit, LexicalIndex, Scope, StoredChunk, VectorIndex
from knowsphere_retrieval.domain.expansion import SynonymTable
from knowsphere_retrieval.domain.fusion import FusedHit, FusionMethod, fuse
from knowsphere_retrieval.domain.language import detect_language, model_reads
from knowsphere_retrieval.domain.mmr import jaccard, mmr_order_by

_tracer = trace.get_tracer("knowsphere.retrieval")

Mode = Literal["hybrid", "vector", "bm25"]
Embed = Callable[[str, str], Awaitable[list[float]]]  # (model id, query) -> vector
Rerank = Callable[[str, str, Sequence[str]], Awaitable[list[float]]]  # (model id, query, texts)
MultiQuery = Callable[[str], Awaitable[list[str]]]


class RerankUnavailable(Exception):
    """No rerank model is configured (or it cannot be used); the search goes on without it."""


@dataclass(frozen=True)
class KnowledgeBaseIndex:
    """What retrieval knows about one knowledge base of the caller's tenant."""

    knowledge_base_id: str
    embedding_model_id: str
    embedding_dimension: int
    model_languages: tuple[str, ...] = ()  # languages the embedding model reads; () = unknown

    @property
    def collection(self) -> str:
        return collection_name(self.embedding_model_id, self.embedding_dimension)


def collection_name(model_id: str, dimension: int) -> str:
    safe = "".join(ch if ch.isalnum() else "_" for ch in model_id.lower())
    return f"emb_{safe}_{dimension}"


@dataclass(frozen=True)
class SearchSettings:
    top_k: int = 8
    candidate_count: int = 100
    fusion: FusionMethod = "rrf"
    rrf_k: int = 60
    vector_weight: float = 1.0
    bm25_weight: float = 1.0
    weak_leg_weight: float = 0.0  # weight of a leg that cannot read the query's language
    expansion_enabled: bool = True
    expansion_min_hits: int = 3
    expansion_method: Literal["synonyms", "llm"] = "synonyms"
    expansion_queries: int = 3
    rerank_enabled: bool = True
    rerank_candidates: int = 30
    rerank_model_id: str = ""
    mmr_lambda: float | None = None
    include_parent: bool = True


@dataclass
class ResultItem:
    chunk: StoredChunk
    score: float
    fused: FusedHit
    rerank: float | None = None
    parent_text: str = ""


@dataclass
class SearchStats:
    vector_hit_count: int = 0
    bm25_hit_count: int = 0
    expanded: bool = False
    expansion_queries: list[str] = field(default_factory=list)
    reranked: bool = False
    rerank_skipped_reason: str = ""
    mmr_applied: bool = False
    vector_weight_used: float = 0.0
    bm25_weight_used: float = 0.0
    embed_seconds: float = 0.0
    total_seconds: float = 0.0
    query_language: str = ""


@dataclass
class SearchOutcome:
    results: list[ResultItem]
    stats: SearchStats


class Searcher:
    def __init__(
        self,
        *,
        vectors: VectorIndex,
        lexical: LexicalIndex,
        chunks: ChunkStore,
        embed: Embed,
        rerank: Rerank | None = None,
        multi_query: MultiQuery | None = None,
        synonyms: SynonymTable | None = None,
        terms: Callable[[str], list[str]] | None = None,
    ) -> None:
        self._vectors = vectors
        self._lexical = lexical
        self._chunks = chunks
        self._embed = embed
        self._rerank = rerank
        self._multi_query = multi_query
        self._synonyms = synonyms or SynonymTable()
        self._terms = terms or (lambda text: text.lower().split())

    async def search(
        self,
        tenant_id: str,
        query: str,
        knowledge_bases: Sequence[KnowledgeBaseIndex],
        settings: SearchSettings,
        *,
        mode: Mode = "hybrid",
        document_ids: Sequence[str] = (),
    ) -> SearchOutcome:
        started = time.perf_counter()
        stats = SearchStats(query_language=detect_language(query))
        scope = Scope(tenant_id, tuple(kb.knowledge_base_id for kb in knowledge_bases), tuple(document_ids))
        groups: dict[tuple[str, int], list[KnowledgeBaseIndex]] = {}
        for kb in knowledge_bases:
            groups.setdefault((kb.embedding_model_id, kb.embedding_dimension), []).append(kb)

        # A model group whose model does not read the query's language is a weak leg.
        readable = {
            key: all(model_reads(kb.model_languages, stats.query_language) for kb in kbs)
            for key, kbs in groups.items()
        }
        use_vector = mode in ("hybrid", "vector") and bool(groups)
        use_bm25 = mode in ("hybrid", "bm25")
        vector_weight = settings.vector_weight if any(readable.values()) else settings.weak_leg_weight
        if mode == "vector":
            vector_weight = settings.vector_weight  # asked for explicitly: no down-weighting
        stats.vector_weight_used = vector_weight if use_vector else 0.0
        stats.bm25_weight_used = settings.bm25_weight if use_bm25 else 0.0

        vectors_by_model: dict[tuple[str, int], list[float]] = {}
        if use_vector and (vector_weight > 0 or mode == "vector"):
            with _tracer.start_as_current_span("retrieval.embed_query") as span:
                t0 = time.perf_counter()
                for key in groups:
                    if mode == "vector" or readable[key] or not any(readable.values()):
                        vectors_by_model[key] = await self._embed(key[0], query)
                stats.embed_seconds = time.perf_counter() - t0
                span.set_attribute("ks.embed.models", len(vectors_by_model))

        fused = await self._recall(
            query, scope, groups, vectors_by_model, settings, mode, vector_weight, stats
        )

        if settings.expansion_enabled and len(fused) < settings.expansion_min_hits:
            fused = await self._expand(query, scope, groups, settings, mode, vector_weight, fused, stats)

        candidates = fused[
            : max(settings.top_k, settings.rerank_candidates if settings.rerank_enabled else 0)
        ]
        items = await self._load(tenant_id, candidates, settings)
        items = await self._rerank_items(query, items, settings, stats)
        if settings.mmr_lambda is not None and len(items) > 1:
            with _tracer.start_as_current_span("retrieval.mmr") as span:
                term_sets = [frozenset(self._terms(item.chunk.text)) for item in items]
                order = mmr_order_by(
                    [item.score for item in items],
                    lambda i, j: jaccard(term_sets[i], term_sets[j]),
                    settings.mmr_lambda,
                    settings.top_k,
                )
                items = [items[i] for i in order]
                stats.mmr_applied = True
                span.set_attribute("ks.result.count", len(items))
        items = items[: settings.top_k]
        if settings.include_parent:
            await self._attach_parents(tenant_id, items)
        stats.total_seconds = time.perf_counter() - started
        return SearchOutcome(results=items, stats=stats)

    async def _legs(
        self,
        query: str,
        scope: Scope,
        groups: dict[tuple[str, int], list[KnowledgeBaseIndex]],
        vectors_by_model: dict[tuple[str, int], list[float]],
        settings: SearchSettings,
        use_bm25: bool,
    ) -> tuple[list[Hit], list[Hit]]:
        vector_hits: list[Hit] = []
        with _tracer.start_as_current_span("retrieval.vector_query") as span:
            for key, vector in vectors_by_model.items():
                group_scope = Scope(
                    scope.tenant_id, tuple(kb.knowledge_base_id for kb in groups[key]), scope.document_ids
                )
                vector_hits += await self._vectors.search(
                    groups[key][0].collection, vector, group_scope, settings.candidate_count
                )
            vector_hits.sort(key=lambda h: -h.score)
            vector_hits = vector_hits[: settings.candidate_count]
            span.set_attribute("ks.result.count", len(vector_hits))
        bm25_hits: list[Hit] = []
        if use_bm25:
            with _tracer.start_as_current_span("retrieval.bm25_query") as span:
                bm25_hits = await self._lexical.search(query, scope, settings.candidate_count)
                span.set_attribute("ks.result.count", len(bm25_hits))
        return vector_hits, bm25_hits

    async def _recall(
        self,
        query: str,
        scope: Scope,
        groups: dict[tuple[str, int], list[KnowledgeBaseIndex]],
        vectors_by_model: dict[tuple[str, int], list[float]],
        settings: SearchSettings,
        mode: Mode,
        vector_weight: float,
        stats: SearchStats,
    ) -> list[FusedHit]:
        vector_hits, bm25_hits = await self._legs(
            query, scope, groups, vectors_by_model, settings, mode in ("hybrid", "bm25")
        )
        stats.vector_hit_count += len(vector_hits)
        stats.bm25_hit_count += len(bm25_hits)
        with _tracer.start_as_current_span("retrieval.fusion") as span:
            fused = fuse(
                vector_hits,
                bm25_hits,
                method=settings.fusion,
                rrf_k=settings.rrf_k,
                vector_weight=vector_weight if mode != "bm25" else 0.0,
                bm25_weight=settings.bm25_weight if mode != "vector" else 0.0,
            )
            # A leg with weight 0 still recalls (its scores are reported) but cannot lift a hit.
            fused = [h for h in fused if h.score > 0 or mode != "hybrid"]
            span.set_attribute("ks.fusion.method", settings.fusion)
            span.set_attribute("ks.result.count", len(fused))
        return fused

    async def _expand(
        self,
        query: str,
        scope: Scope,
        groups: dict[tuple[str, int], list[KnowledgeBaseIndex]],
        settings: SearchSettings,
        mode: Mode,
        vector_weight: float,
        fused: list[FusedHit],
        stats: SearchStats,
    ) -> list[FusedHit]:
        with _tracer.start_as_current_span("retrieval.expansion") as span:
            if settings.expansion_method == "llm" and self._multi_query is not None:
                variants = (await self._multi_query(query))[: settings.expansion_queries]
            else:
                variants = self._synonyms.expand(query, settings.expansion_queries)
            span.set_attribute("ks.expansion.method", settings.expansion_method)
            span.set_attribute("ks.expansion.queries", len(variants))
            if not variants:
                return fused
            stats.expanded = True
            stats.expansion_queries = variants
            lists = [fused]
            for variant in variants:
                vectors = (
                    {key: await self._embed(key[0], variant) for key in groups} if vector_weight > 0 else {}
                )
                lists.append(
                    await self._recall(variant, scope, groups, vectors, settings, mode, vector_weight, stats)
                )
            merged = _merge_by_rank(lists, settings.rrf_k)
            span.set_attribute("ks.result.count", len(merged))
            return merged

    async def _load(
        self, tenant_id: str, hits: Sequence[FusedHit], settings: SearchSettings
    ) -> list[ResultItem]:
        if not hits:
            return []
        stored = {c.chunk_id: c for c in await self._chunks.get_chunks(tenant_id, [h.chunk_id for h in hits])}
        return [
            ResultItem(chunk=stored[h.chunk_id], score=h.score, fused=h) for h in hits if h.chunk_id in stored
        ]

    async def _rerank_items(
        self, query: str, items: list[ResultItem], settings: SearchSettings, stats: SearchStats
    ) -> list[ResultItem]:
        if not settings.rerank_enabled or not items:
            return items
        if self._rerank is None:
            stats.rerank_skipped_reason = "reranking is not available in this deployment"
            return items
        with _tracer.start_as_current_span("retrieval.rerank") as span:
            try:
                scores = await self._rerank(
                    settings.rerank_model_id, query, [item.chunk.text for item in items]
                )
            except RerankUnavailable as why:
                stats.rerank_skipped_reason = str(why)
                span.set_attribute("ks.rerank.skipped", str(why))
                return items
            for item, score in zip(items, scores, strict=True):
                item.rerank = score
                item.score = score
            stats.reranked = True
            span.set_attribute("ks.result.count", len(items))
            return sorted(items, key=lambda item: -item.score)

    async def _attach_parents(self, tenant_id: str, items: list[ResultItem]) -> None:
        with _tracer.start_as_current_span("retrieval.parent_fetch") as span:
            parent_ids = list(dict.fromkeys(item.chunk.parent_id for item in items if item.chunk.parent_id))
            parents = await self._chunks.get_parents(tenant_id, parent_ids) if parent_ids else {}
            seen: set[str] = set()
            for item in items:
                parent_id = item.chunk.parent_id
                if parent_id and parent_id not in seen and parent_id in parents:
                    item.parent_text = parents[parent_id]
                    seen.add(parent_id)
            span.set_attribute("ks.parent.count", len(seen))


def _merge_by_rank(lists: Sequence[Sequence[FusedHit]], rrf_k: int) -> list[FusedHit]:
    """Combine the fused lists of the original and the expanded queries by reciprocal rank."""
    merged: dict[str, FusedHit] = {}
    combined: dict[str, float] = {}
    for hits in lists:
        for rank, hit in enumerate(hits, start=1):
            combined[hit.chunk_id] = combined.get(hit.chunk_id, 0.0) + 1.0 / (rrf_k + rank)
            best = merged.get(hit.chunk_id)
            if best is None or hit.score > best.score:
                merged[hit.chunk_id] = hit
    for chunk_id, hit in merged.items():
        hit.score = combined[chunk_id]
    return sorted(merged.values(), key=lambda h: (-h.score, h.chunk_id))
