"""doc_retrieval: one search over a tenant's knowledge bases, in the order the spec fixes.

1. recall with both legs at once — the vector leg embeds the query once per embedding model, then
   searches each model's vectors; the BM25 leg searches every knowledge base without waiting for the
   embedding — and fuse;
2. only when hits are too few, expand the query (synonyms or LLM multi-query) and fuse again;
   when asked, a second hop: bridge entities read from the best passages become follow-up queries
   whose hits merge under the first hop's (:mod:`.multihop`);
3. fetch the chunks and their parents (a parent's text travels once, with its best child);
4. rerank through modelhub when a rerank model is configured (none configured: no Rerank call),
   then optional MMR.

Every step is a span with its counts. I/O comes in through the ports given to :class:`Searcher`, so
this module holds only the logic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from opentelemetry import trace

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_clients.errors import ServiceError
from knowsphere_clients.modelhub import is_model_missing
from knowsphere_contracts.language import detect_language, model_reads
from knowsphere_retrieval.domain.expansion import SynonymTable, llm_variants
from knowsphere_retrieval.domain.fusion import FusedHit, FusionMethod, LegWeights, adaptive_weights, fuse
from knowsphere_retrieval.domain.mmr import jaccard, mmr_order_by
from knowsphere_retrieval.domain.multihop import BridgeExtractor, Passage, follow_up_queries, merge_hops
from knowsphere_retrieval.domain.ports import (
    ChunkStore,
    Hit,
    LexicalIndex,
    QueryModels,
    Scope,
    StoredChunk,
    VectorIndex,
)
from knowsphere_telemetry import attributes

_tracer = trace.get_tracer("knowsphere.retrieval")

NO_RERANK_MODEL: Final = "no rerank model configured"

ModelKey = tuple[str, int]  # (embedding model id, dimension): one vector collection


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
    adaptive_strength: float = 4.0  # how far adaptive fusion moves the weights towards the surer leg
    adaptive_depth: int = 10  # top hits of a leg whose scores tell how sure it is
    expansion_enabled: bool = True
    expansion_min_hits: int = 3
    expansion_method: Literal["synonyms", "llm"] = "synonyms"
    expansion_queries: int = 3
    rerank_enabled: bool = True
    rerank_candidates: int = 30
    rerank_model_id: str = ""
    mmr_lambda: float | None = None
    include_parent: bool = True
    second_hop_enabled: bool = False
    second_hop_passages: int = 3  # first-hop passages the bridge entities are read from
    second_hop_queries: int = 3  # follow-up queries, one per bridge entity
    second_hop_candidate_count: int = 30  # hits each leg recalls per follow-up query
    second_hop_weight: float = 0.5  # of each follow-up's ranks in the merge (the first hop's is 1)


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
    embed_seconds: float = 0.0  # embedding the query (its variants not counted)
    total_seconds: float = 0.0
    query_language: str = ""
    second_hop: bool = False
    second_hop_queries: list[str] = field(default_factory=list)


@dataclass
class SearchOutcome:
    results: list[ResultItem]
    stats: SearchStats


@dataclass(frozen=True)
class _Recall:
    """How one search recalls, the same for the query and each of its variants."""

    scope: Scope
    groups: dict[ModelKey, list[KnowledgeBaseIndex]]  # knowledge bases per vector collection
    embedded: tuple[ModelKey, ...]  # the collections the vector leg searches (their model embeds)
    use_bm25: bool
    vector_weight: float  # in the fusion
    bm25_weight: float
    keep_unlifted: bool  # keep hits a zero-weight leg found (a single-leg mode reports them all)


class Searcher:
    def __init__(
        self,
        *,
        vectors: VectorIndex,
        lexical: LexicalIndex,
        chunks: ChunkStore,
        models: QueryModels,
        synonyms: SynonymTable | None = None,
        terms: Callable[[str], list[str]] | None = None,
        bridges: BridgeExtractor | None = None,
    ) -> None:
        self._vectors = vectors
        self._lexical = lexical
        self._chunks = chunks
        self._models = models
        self._synonyms = synonyms or SynonymTable()
        self._terms = terms or (lambda text: text.lower().split())
        self._bridges = bridges or BridgeExtractor()

    async def search(
        self,
        tenant_id: str,
        query: str,
        knowledge_bases: Sequence[KnowledgeBaseIndex],
        settings: SearchSettings,
        *,
        mode: SearchMode = SearchMode.HYBRID,
        document_ids: Sequence[str] = (),
    ) -> SearchOutcome:
        started = time.perf_counter()
        stats = SearchStats(query_language=detect_language(query))
        recall = _plan_recall(tenant_id, knowledge_bases, settings, mode, stats, document_ids)

        fused, stats.embed_seconds = await self._recall(query, recall, settings, stats)
        if settings.expansion_enabled and len(fused) < settings.expansion_min_hits:
            fused = await self._expand(query, recall, settings, fused, stats)
        if settings.second_hop_enabled:
            fused = await self._second_hop(query, recall, settings, fused, stats)

        candidates = fused[
            : max(settings.top_k, settings.rerank_candidates if settings.rerank_enabled else 0)
        ]
        items = await self._load(tenant_id, candidates)
        items = await self._rerank_items(query, items, settings, stats)
        if settings.mmr_lambda is not None and len(items) > 1:
            items = self._diversify(items, settings.mmr_lambda, settings.top_k)
            stats.mmr_applied = True
        items = items[: settings.top_k]
        if settings.include_parent:
            await self._attach_parents(tenant_id, items)
        stats.total_seconds = time.perf_counter() - started
        return SearchOutcome(results=items, stats=stats)

    async def _recall(
        self, query: str, recall: _Recall, settings: SearchSettings, stats: SearchStats
    ) -> tuple[list[FusedHit], float]:
        """The fused hits of ``query`` and the seconds its embedding took; both legs run at once."""
        (vector_hits, embed_seconds), bm25_hits = await asyncio.gather(
            self._vector_leg(query, recall, settings), self._bm25_leg(query, recall, settings)
        )
        stats.vector_hit_count += len(vector_hits)
        stats.bm25_hit_count += len(bm25_hits)
        with _tracer.start_as_current_span("retrieval.fusion") as span:
            planned = LegWeights(recall.vector_weight, recall.bm25_weight)
            weights = planned
            if settings.fusion == "adaptive":
                weights = adaptive_weights(
                    vector_hits,
                    bm25_hits,
                    vector_weight=recall.vector_weight,
                    bm25_weight=recall.bm25_weight,
                    strength=settings.adaptive_strength,
                    depth=settings.adaptive_depth,
                )
            # The stats report the weights the query itself was fused with (the plan's unless adaptive
            # moved them); its expansion variants and follow-up queries, recalled after these flags are
            # set, are fused with their own.
            if weights != planned and not stats.expanded and not stats.second_hop:
                stats.vector_weight_used, stats.bm25_weight_used = weights.vector, weights.bm25
            fused = fuse(
                vector_hits,
                bm25_hits,
                method=settings.fusion,
                rrf_k=settings.rrf_k,
                vector_weight=weights.vector,
                bm25_weight=weights.bm25,
            )
            # A leg with weight 0 still recalls (its scores are reported) but cannot lift a hit.
            if not recall.keep_unlifted:
                fused = [h for h in fused if h.score > 0]
            span.set_attribute(attributes.FUSION_METHOD, settings.fusion)
            span.set_attribute(attributes.RESULT_COUNT, len(fused))
        return fused, embed_seconds

    async def _vector_leg(
        self, query: str, recall: _Recall, settings: SearchSettings
    ) -> tuple[list[Hit], float]:
        if not recall.embedded:
            return [], 0.0
        with _tracer.start_as_current_span("retrieval.embed_query") as span:
            started = time.perf_counter()
            vectors = await asyncio.gather(
                *(self._models.embed_query(model_id, query) for model_id, _ in recall.embedded)
            )
            embed_seconds = time.perf_counter() - started
            span.set_attribute(attributes.EMBED_MODELS, len(recall.embedded))
        with _tracer.start_as_current_span("retrieval.vector_query") as span:
            scope = recall.scope
            found = await asyncio.gather(
                *(
                    self._vectors.search(
                        recall.groups[key][0].collection,
                        vector,
                        Scope(
                            scope.tenant_id,
                            tuple(kb.knowledge_base_id for kb in recall.groups[key]),
                            scope.document_ids,
                        ),
                        settings.candidate_count,
                    )
                    for key, vector in zip(recall.embedded, vectors, strict=True)
                )
            )
            hits = sorted((hit for group in found for hit in group), key=lambda h: -h.score)
            hits = hits[: settings.candidate_count]
            span.set_attribute(attributes.RESULT_COUNT, len(hits))
        return hits, embed_seconds

    async def _bm25_leg(self, query: str, recall: _Recall, settings: SearchSettings) -> list[Hit]:
        if not recall.use_bm25:
            return []
        with _tracer.start_as_current_span("retrieval.bm25_query") as span:
            hits = await self._lexical.search(query, recall.scope, settings.candidate_count)
            span.set_attribute(attributes.RESULT_COUNT, len(hits))
        return hits

    async def _expand(
        self,
        query: str,
        recall: _Recall,
        settings: SearchSettings,
        fused: list[FusedHit],
        stats: SearchStats,
    ) -> list[FusedHit]:
        with _tracer.start_as_current_span("retrieval.expansion") as span:
            if settings.expansion_method == "llm":
                variants = await llm_variants(self._models, query, settings.expansion_queries)
            else:
                variants = self._synonyms.expand(query, settings.expansion_queries)
            span.set_attribute(attributes.EXPANSION_METHOD, settings.expansion_method)
            span.set_attribute(attributes.EXPANSION_QUERIES, len(variants))
            if not variants:
                return fused
            stats.expanded = True
            stats.expansion_queries = variants
            recalled = await asyncio.gather(*(self._recall(v, recall, settings, stats) for v in variants))
            merged = _merge_by_rank([fused, *(hits for hits, _ in recalled)], settings.rrf_k)
            span.set_attribute(attributes.RESULT_COUNT, len(merged))
            return merged

    async def _second_hop(
        self,
        query: str,
        recall: _Recall,
        settings: SearchSettings,
        fused: list[FusedHit],
        stats: SearchStats,
    ) -> list[FusedHit]:
        """Bridge entities read from the first hop's best passages, recalled as follow-up queries and
        merged under the first hop (see :mod:`.multihop`)."""
        with _tracer.start_as_current_span("retrieval.second_hop") as span:
            read = await self._load(recall.scope.tenant_id, fused[: settings.second_hop_passages])
            passages = [Passage(item.chunk.text, item.chunk.heading_path) for item in read]
            bridges = self._bridges.bridges(query, passages, settings.second_hop_queries)
            follow_ups = follow_up_queries(query, bridges)
            span.set_attribute(attributes.CHUNKS, len(passages))
            span.set_attribute(attributes.EXPANSION_QUERIES, len(follow_ups))
            stats.second_hop = True
            stats.second_hop_queries = follow_ups
            if not follow_ups:
                span.set_attribute(attributes.RESULT_COUNT, len(fused))
                return fused
            narrow = dataclasses.replace(
                settings, candidate_count=min(settings.candidate_count, settings.second_hop_candidate_count)
            )
            recalled = await asyncio.gather(*(self._recall(q, recall, narrow, stats) for q in follow_ups))
            merged = merge_hops(
                fused,
                [hits for hits, _ in recalled],
                keep=len(read),
                follow_up_weight=settings.second_hop_weight,
                rrf_k=settings.rrf_k,
            )
            span.set_attribute(attributes.RESULT_COUNT, len(merged))
            return merged

    async def _load(self, tenant_id: str, hits: Sequence[FusedHit]) -> list[ResultItem]:
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
        with _tracer.start_as_current_span("retrieval.rerank") as span:
            skipped = await self._rerank_scores(settings.rerank_model_id, query, items)
            if isinstance(skipped, str):
                stats.rerank_skipped_reason = skipped
                span.set_attribute(attributes.RERANK_SKIPPED, skipped)
                return items
            for item, score in zip(items, skipped, strict=True):
                item.rerank = score
                item.score = score
            stats.reranked = True
            span.set_attribute(attributes.RESULT_COUNT, len(items))
            return sorted(items, key=lambda item: -item.score)

    async def _rerank_scores(self, model_id: str, query: str, items: list[ResultItem]) -> list[float] | str:
        """A score per item, or why reranking is skipped (no usable rerank model: no failure)."""
        # Asking whether a default exists is cached; a Rerank call that must fail is not made.
        if not model_id and not await self._models.has_default(ModelType.RERANK):
            return NO_RERANK_MODEL
        try:
            return await self._models.rerank(model_id, query, [item.chunk.text for item in items])
        except ServiceError as error:
            if not is_model_missing(error):
                raise
            return f"rerank model {model_id} cannot rerank: {error.message}" if model_id else NO_RERANK_MODEL

    def _diversify(self, items: list[ResultItem], mmr_lambda: float, top_k: int) -> list[ResultItem]:
        with _tracer.start_as_current_span("retrieval.mmr") as span:
            term_sets = [frozenset(self._terms(item.chunk.text)) for item in items]
            order = mmr_order_by(
                [item.score for item in items],
                lambda i, j: jaccard(term_sets[i], term_sets[j]),
                mmr_lambda,
                top_k,
            )
            span.set_attribute(attributes.RESULT_COUNT, len(order))
            return [items[i] for i in order]

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
            span.set_attribute(attributes.PARENT_COUNT, len(seen))


def _plan_recall(
    tenant_id: str,
    knowledge_bases: Sequence[KnowledgeBaseIndex],
    settings: SearchSettings,
    mode: SearchMode,
    stats: SearchStats,
    document_ids: Sequence[str],
) -> _Recall:
    """Which legs run with which weights; reports the weights used in ``stats``."""
    groups: dict[ModelKey, list[KnowledgeBaseIndex]] = {}
    for kb in knowledge_bases:
        groups.setdefault((kb.embedding_model_id, kb.embedding_dimension), []).append(kb)
    # A model group whose model does not read the query's language is a weak leg.
    readable = {
        key: all(model_reads(kb.model_languages, stats.query_language) for kb in kbs)
        for key, kbs in groups.items()
    }
    use_vector = mode in (SearchMode.HYBRID, SearchMode.VECTOR) and bool(groups)
    use_bm25 = mode in (SearchMode.HYBRID, SearchMode.BM25)
    if mode == SearchMode.VECTOR:
        vector_weight = settings.vector_weight  # asked for explicitly: no down-weighting
    else:
        vector_weight = settings.vector_weight if any(readable.values()) else settings.weak_leg_weight
    stats.vector_weight_used = vector_weight if use_vector else 0.0
    stats.bm25_weight_used = settings.bm25_weight if use_bm25 else 0.0
    embedded: tuple[ModelKey, ...] = ()
    if use_vector and (vector_weight > 0 or mode == SearchMode.VECTOR):
        # Where some models read the query, only theirs are asked; where none does, all are.
        embedded = tuple(
            key for key in groups if mode == SearchMode.VECTOR or readable[key] or not any(readable.values())
        )
    return _Recall(
        scope=Scope(tenant_id, tuple(kb.knowledge_base_id for kb in knowledge_bases), tuple(document_ids)),
        groups=groups,
        embedded=embedded,
        use_bm25=use_bm25,
        vector_weight=vector_weight if mode != SearchMode.BM25 else 0.0,
        bm25_weight=settings.bm25_weight if mode != SearchMode.VECTOR else 0.0,
        keep_unlifted=mode != SearchMode.HYBRID,
    )


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
