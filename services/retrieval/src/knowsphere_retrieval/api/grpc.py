"""The gRPC face of retrieval: indexing, doc_retrieval, the deep-reading tools and graph queries.

Handlers read the caller's tenant from the identity every call carries and pass it to every store,
so one tenant never reads or deletes another's data, even with the other's knowledge-base ids.
Bad input answers INVALID_ARGUMENT naming the field and the limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf.duration_pb2 import Duration

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_contracts.convert import timestamp
from knowsphere_contracts.services import CONTRACTS
from knowsphere_retrieval.adapters.ports import (
    ChunkStore,
    DocumentMetadata,
    GraphEntity,
    GraphRelation,
    GraphStore,
    KnowledgeBaseConfig,
    LexicalDoc,
    LexicalIndex,
    Scope,
    StoredChunk,
    VectorIndex,
    VectorPoint,
)
from knowsphere_retrieval.domain.grep import GrepLimits, plan_grep
from knowsphere_retrieval.domain.search import (
    KnowledgeBaseIndex,
    Searcher,
    SearchSettings,
    collection_name,
)
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid

log = structlog.get_logger(__name__)
T = TypeVar("T")

MODES = {
    pb.SEARCH_MODE_UNSPECIFIED: "hybrid",
    pb.SEARCH_MODE_HYBRID: "hybrid",
    pb.SEARCH_MODE_VECTOR: "vector",
    pb.SEARCH_MODE_BM25: "bm25",
}


def _duration(seconds: float) -> Duration:
    value = Duration()
    value.FromNanoseconds(int(seconds * 1e9))
    return value


def handle_of(chunk_id: str) -> str:
    """The opaque reference a result carries; ListChunks accepts it. Stable for a chunk."""
    return chunk_id


class RetrievalServicer:
    def __init__(
        self,
        *,
        settings: Settings,
        chunks: ChunkStore,
        vectors: VectorIndex,
        lexical: LexicalIndex,
        graph: GraphStore | None,
        searcher: Searcher,
        model_languages: Callable[[str, str], Awaitable[tuple[str, ...]]],
        backends: tuple[str, str, str],
    ) -> None:
        self._settings = settings
        self._chunks = chunks
        self._vectors = vectors
        self._lexical = lexical
        self._graph = graph
        self._searcher = searcher
        self._model_languages = model_languages
        self._backends = backends
        self._grep_limits = GrepLimits(
            max_pattern_length=settings.grep_max_pattern_length,
            max_matches=settings.grep_max_matches,
            context_chars=settings.grep_context_chars,
            time_budget_seconds=settings.grep_time_budget_seconds,
        )

    async def _run(self, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
        return await answer(context, work)

    async def _configs(self, tenant: str, kb_ids: Sequence[str], field: str) -> list[KnowledgeBaseConfig]:
        if not kb_ids:
            raise invalid(field, "at least one knowledge base id is required")
        if len(kb_ids) > self._settings.max_knowledge_bases_per_search:
            raise invalid(
                field, f"{len(kb_ids)} ids; the limit is {self._settings.max_knowledge_bases_per_search}"
            )
        return await self._chunks.get_kb_configs(tenant, kb_ids)

    # --- configuration and indexing -----------------------------------------------------------

    async def ConfigureKnowledgeBase(self, request: pb.ConfigureKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.ConfigureKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            if not request.knowledge_base_id:
                raise invalid("knowledge_base_id", "required")
            if not request.embedding_model_id:
                raise invalid("embedding_model_id", "required")
            if not 0 < request.embedding_dimension <= 8192:
                raise invalid("embedding_dimension", f"{request.embedding_dimension}; must be 1–8192")
            existing = await self._chunks.get_kb_configs(tenant, [request.knowledge_base_id])
            stored = dict(existing[0].stored_models) if existing else {}
            if existing and existing[0].embedding_model_id != request.embedding_model_id:
                counts = await self._chunks.knowledge_base_counts(tenant, [request.knowledge_base_id])
                chunk_count = counts[request.knowledge_base_id].chunk_count
                if chunk_count:
                    collection = collection_name(request.embedding_model_id, request.embedding_dimension)
                    have = (
                        await self._vectors.count(collection, tenant, request.knowledge_base_id)
                        if collection in await self._vectors.collections()
                        else 0
                    )
                    if have < chunk_count:
                        raise RequestError(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            f"knowledge base {request.knowledge_base_id} cannot switch to "
                            f"{request.embedding_model_id}: {chunk_count - have} of {chunk_count} chunks "
                            "have no "
                            "vector of that model yet; index them first",
                        )
            await self._vectors.ensure_collection(
                collection_name(request.embedding_model_id, request.embedding_dimension),
                request.embedding_dimension,
            )
            stored.setdefault(request.embedding_model_id, request.embedding_dimension)
            config = KnowledgeBaseConfig(
                tenant_id=tenant,
                knowledge_base_id=request.knowledge_base_id,
                embedding_model_id=request.embedding_model_id,
                embedding_dimension=request.embedding_dimension,
                language_hint=request.language_hint,
                graph_enabled=request.graph_enabled,
                stored_models=tuple(sorted(stored.items())),
            )
            await self._chunks.put_kb_config(config)
            saved = (await self._chunks.get_kb_configs(tenant, [request.knowledge_base_id]))[0]
            return pb.ConfigureKnowledgeBaseResponse(config=self._config_proto(saved))

        return await self._run(context, work)

    def _config_proto(self, config: KnowledgeBaseConfig) -> pb.KnowledgeBaseIndexConfig:
        message = pb.KnowledgeBaseIndexConfig(
            knowledge_base_id=config.knowledge_base_id,
            embedding_model_id=config.embedding_model_id,
            embedding_dimension=config.embedding_dimension,
            language_hint=config.language_hint,
            graph_enabled=config.graph_enabled,
            stored_embedding_model_ids=[model for model, _ in config.stored_models],
        )
        stamp = timestamp(config.update_time)
        if stamp is not None:
            message.update_time.CopyFrom(stamp)
        return message

    async def IndexChunks(self, request: pb.IndexChunksRequest, context: Any) -> Any:
        async def work() -> pb.IndexChunksResponse:
            tenant = require_identity().tenant_id
            if not request.chunks:
                raise invalid("chunks", "at least one chunk is required")
            if len(request.chunks) > self._settings.max_index_batch:
                raise invalid(
                    "chunks", f"{len(request.chunks)} chunks; the limit is {self._settings.max_index_batch}"
                )
            kb_ids = list(dict.fromkeys(c.knowledge_base_id for c in request.chunks))
            configs = {c.knowledge_base_id: c for c in await self._chunks.get_kb_configs(tenant, kb_ids)}
            missing = [kb for kb in kb_ids if kb not in configs]
            if missing:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"knowledge base(s) {', '.join(missing)} not configured; "
                    "call ConfigureKnowledgeBase first",
                )
            stored: list[StoredChunk] = []
            parents: dict[str, str] = {}
            points: dict[tuple[str, int], list[VectorPoint]] = {}
            new_models: dict[str, dict[str, int]] = {}
            for index, chunk in enumerate(request.chunks):
                field = f"chunks[{index}]"
                if not chunk.id or not chunk.document_id:
                    raise invalid(field, "id and document_id are required")
                if not chunk.text.strip():
                    raise invalid(f"{field}.text", "empty text")
                stored.append(
                    StoredChunk(
                        chunk_id=chunk.id,
                        tenant_id=tenant,
                        knowledge_base_id=chunk.knowledge_base_id,
                        document_id=chunk.document_id,
                        file_name=chunk.file_name,
                        text=chunk.text,
                        parent_id=chunk.parent_id,
                        position=chunk.position,
                        heading_path=tuple(chunk.heading_path),
                        page=chunk.page,
                        metadata=dict(chunk.metadata),
                        ingest_run_id=chunk.ingest_run_id,
                        token_count=chunk.token_count,
                    )
                )
                if chunk.parent_id and chunk.parent_text:
                    parents[chunk.parent_id] = chunk.parent_text
                config = configs[chunk.knowledge_base_id]
                known = dict(config.stored_models)
                for e_index, embedding in enumerate(chunk.embeddings):
                    e_field = f"{field}.embeddings[{e_index}]"
                    if embedding.dimension != len(embedding.values):
                        raise invalid(
                            e_field, f"dimension {embedding.dimension} but {len(embedding.values)} values"
                        )
                    expected = known.get(embedding.model_id) or new_models.get(
                        chunk.knowledge_base_id, {}
                    ).get(embedding.model_id)
                    if expected is not None and expected != embedding.dimension:
                        raise invalid(
                            e_field,
                            f"{embedding.model_id} vectors have dimension {expected} in this knowledge base, "
                            f"got {embedding.dimension}",
                        )
                    if expected is None:
                        new_models.setdefault(chunk.knowledge_base_id, {})[embedding.model_id] = (
                            embedding.dimension
                        )
                    points.setdefault((embedding.model_id, embedding.dimension), []).append(
                        VectorPoint(
                            chunk.id,
                            tenant,
                            chunk.knowledge_base_id,
                            chunk.document_id,
                            list(embedding.values),
                        )
                    )
            # The chunk store is the source of truth; the indexes follow. Every write is idempotent by
            # chunk id, so a retried batch converges instead of duplicating.
            await self._chunks.put_chunks(stored, parents)
            await self._lexical.upsert(
                [
                    LexicalDoc(
                        c.chunk_id,
                        tenant,
                        c.knowledge_base_id,
                        c.document_id,
                        c.text,
                        " ".join((c.file_name, *c.heading_path)),
                    )
                    for c in stored
                ]
            )
            for (model_id, dimension), batch in points.items():
                collection = collection_name(model_id, dimension)
                await self._vectors.ensure_collection(collection, dimension)
                await self._vectors.upsert(collection, batch)
            for kb_id, models in new_models.items():
                config = configs[kb_id]
                merged = dict(config.stored_models) | models
                await self._chunks.put_kb_config(replace(config, stored_models=tuple(sorted(merged.items()))))
            return pb.IndexChunksResponse(indexed_count=len(stored))

        return await self._run(context, work)

    async def PutDocumentInfo(self, request: pb.PutDocumentInfoRequest, context: Any) -> Any:
        async def work() -> pb.PutDocumentInfoResponse:
            tenant = require_identity().tenant_id
            given = ([request.document] if request.HasField("document") else []) + list(request.documents)
            if not given:
                raise invalid(
                    "document", "at least one document's metadata (document or documents) is required"
                )
            await self._chunks.put_document_infos(
                [
                    DocumentMetadata(
                        tenant_id=tenant,
                        knowledge_base_id=document.knowledge_base_id,
                        document_id=document.document_id,
                        file_name=document.file_name,
                        title=document.title,
                        content_type=document.content_type,
                        size_bytes=document.size_bytes,
                        page_count=document.page_count,
                        language=document.language,
                        status=document.status,
                        create_time=document.create_time.ToDatetime(tzinfo=UTC)
                        if document.HasField("create_time")
                        else None,
                        metadata=dict(document.metadata),
                    )
                    for document in given
                ]
            )
            return pb.PutDocumentInfoResponse()

        return await self._run(context, work)

    async def _drop_from_indexes(self, tenant: str, kb_id: str, chunk_ids: list[str]) -> None:
        if not chunk_ids:
            return
        await self._lexical.delete_chunks(tenant, chunk_ids)
        configs = await self._chunks.get_kb_configs(tenant, [kb_id])
        for model_id, dimension in configs[0].stored_models if configs else ():
            collection = collection_name(model_id, dimension)
            if collection in await self._vectors.collections():
                await self._vectors.delete_chunks(collection, tenant, chunk_ids)

    async def PruneDocumentChunks(self, request: pb.PruneDocumentChunksRequest, context: Any) -> Any:
        async def work() -> pb.PruneDocumentChunksResponse:
            tenant = require_identity().tenant_id
            removed = await self._chunks.prune_document(
                tenant, request.knowledge_base_id, request.document_id, request.keep_ingest_run_id
            )
            await self._drop_from_indexes(tenant, request.knowledge_base_id, removed)
            if self._graph is not None and removed:
                await self._graph.delete_chunks(tenant, request.knowledge_base_id, removed)
            return pb.PruneDocumentChunksResponse(deleted_chunk_count=len(removed))

        return await self._run(context, work)

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context: Any) -> Any:
        async def work() -> pb.DeleteDocumentResponse:
            tenant = require_identity().tenant_id
            if not request.knowledge_base_id or not request.document_id:
                raise invalid("document_id", "knowledge_base_id and document_id are required")
            # Indexes first, the store (the source of truth) last: a crash in between leaves chunks a
            # retried delete still finds, never index entries pointing at nothing.
            chunk_ids = await self._chunks.document_chunk_ids(tenant, request.document_id)
            await self._drop_from_indexes(tenant, request.knowledge_base_id, chunk_ids)
            await self._lexical.delete_document(tenant, request.knowledge_base_id, request.document_id)
            if self._graph is not None:
                await self._graph.delete_document(tenant, request.knowledge_base_id, request.document_id)
            removed = await self._chunks.delete_document(
                tenant, request.knowledge_base_id, request.document_id
            )
            return pb.DeleteDocumentResponse(deleted_chunk_count=len(removed))

        return await self._run(context, work)

    async def DeleteKnowledgeBase(self, request: pb.DeleteKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.DeleteKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb_id = request.knowledge_base_id
            if not kb_id:
                raise invalid("knowledge_base_id", "required")
            configs = await self._chunks.get_kb_configs(tenant, [kb_id])
            counts = await self._chunks.knowledge_base_counts(tenant, [kb_id])
            for model_id, dimension in configs[0].stored_models if configs else ():
                collection = collection_name(model_id, dimension)
                if collection in await self._vectors.collections():
                    await self._vectors.delete_knowledge_base(collection, tenant, kb_id)
            await self._lexical.delete_knowledge_base(tenant, kb_id)
            if self._graph is not None:
                await self._graph.delete_knowledge_base(tenant, kb_id)
            removed = await self._chunks.delete_knowledge_base(tenant, kb_id)
            await self._chunks.delete_kb_config(tenant, kb_id)
            return pb.DeleteKnowledgeBaseResponse(
                deleted_chunk_count=len(removed), deleted_document_count=counts[kb_id].document_count
            )

        return await self._run(context, work)

    async def DeleteEmbeddings(self, request: pb.DeleteEmbeddingsRequest, context: Any) -> Any:
        async def work() -> pb.DeleteEmbeddingsResponse:
            tenant = require_identity().tenant_id
            configs = await self._chunks.get_kb_configs(tenant, [request.knowledge_base_id])
            if not configs:
                raise RequestError(
                    grpc.StatusCode.NOT_FOUND, f"knowledge base {request.knowledge_base_id} not found"
                )
            config = configs[0]
            if request.embedding_model_id == config.embedding_model_id:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{request.embedding_model_id} is the active model of {request.knowledge_base_id}; "
                    "switch first",
                )
            stored = dict(config.stored_models)
            dimension = stored.pop(request.embedding_model_id, None)
            deleted = 0
            if dimension is not None:
                collection = collection_name(request.embedding_model_id, dimension)
                if collection in await self._vectors.collections():
                    deleted = await self._vectors.count(collection, tenant, request.knowledge_base_id)
                    await self._vectors.delete_knowledge_base(collection, tenant, request.knowledge_base_id)
                await self._chunks.put_kb_config(replace(config, stored_models=tuple(sorted(stored.items()))))
            return pb.DeleteEmbeddingsResponse(deleted_vector_count=deleted)

        return await self._run(context, work)

    async def IndexGraph(self, request: pb.IndexGraphRequest, context: Any) -> Any:
        async def work() -> pb.IndexGraphResponse:
            tenant = require_identity().tenant_id
            if self._graph is None:
                raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "the graph store is turned off")
            configs = await self._chunks.get_kb_configs(tenant, [request.knowledge_base_id])
            if not configs or not configs[0].graph_enabled:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"knowledge base {request.knowledge_base_id} is not configured with the graph on",
                )
            await self._graph.upsert(
                tenant,
                request.knowledge_base_id,
                request.document_id,
                [
                    GraphEntity(e.name, e.type, e.description, tuple(e.source_chunk_ids))
                    for e in request.entities
                ],
                [
                    GraphRelation(
                        r.source_name, r.target_name, r.type, r.description, tuple(r.source_chunk_ids)
                    )
                    for r in request.relations
                ],
            )
            return pb.IndexGraphResponse(
                entity_count=len(request.entities), relation_count=len(request.relations)
            )

        return await self._run(context, work)

    # --- reading ----------------------------------------------------------------------------------

    async def Search(self, request: pb.SearchRequest, context: Any) -> Any:
        async def work() -> pb.SearchResponse:
            tenant = require_identity().tenant_id
            if not request.query.strip():
                raise invalid("query", "empty query")
            if request.top_k < 0 or request.top_k > self._settings.max_top_k:
                raise invalid("top_k", f"{request.top_k}; must be 0–{self._settings.max_top_k}")
            configs = await self._configs(tenant, list(request.knowledge_base_ids), "knowledge_base_ids")
            known = {c.knowledge_base_id for c in configs}
            unknown = [kb for kb in request.knowledge_base_ids if kb not in known]
            indexes = [
                KnowledgeBaseIndex(
                    c.knowledge_base_id,
                    c.embedding_model_id,
                    c.embedding_dimension,
                    await self._model_languages(tenant, c.embedding_model_id),
                )
                for c in configs
            ]
            settings = self._search_settings(request)
            response = pb.SearchResponse()
            if indexes:
                outcome = await self._searcher.search(
                    tenant,
                    request.query,
                    indexes,
                    settings,
                    mode=MODES.get(request.options.mode, "hybrid"),  # type: ignore[arg-type]
                    document_ids=list(request.document_ids),
                )
                for item in outcome.results:
                    chunk, fused = item.chunk, item.fused
                    scores = pb.ScoreParts(rrf=fused.rrf)
                    if fused.vector is not None:
                        scores.vector = fused.vector
                        scores.vector_rank = fused.vector_rank or 0
                    if fused.bm25 is not None:
                        scores.bm25 = fused.bm25
                        scores.bm25_rank = fused.bm25_rank or 0
                    if item.rerank is not None:
                        scores.rerank = item.rerank
                    response.results.append(
                        pb.SearchResult(
                            handle=handle_of(chunk.chunk_id),
                            chunk_id=chunk.chunk_id,
                            document_id=chunk.document_id,
                            file_name=chunk.file_name,
                            knowledge_base_id=chunk.knowledge_base_id,
                            score=item.score,
                            scores=scores,
                            text=chunk.text,
                            parent_id=chunk.parent_id,
                            parent_text=item.parent_text,
                            position=chunk.position,
                            heading_path=list(chunk.heading_path),
                            page=chunk.page,
                            metadata=chunk.metadata,
                        )
                    )
                stats = outcome.stats
                response.stats.CopyFrom(
                    pb.SearchStats(
                        vector_hit_count=stats.vector_hit_count,
                        bm25_hit_count=stats.bm25_hit_count,
                        expanded=stats.expanded,
                        expansion_queries=stats.expansion_queries,
                        reranked=stats.reranked,
                        rerank_skipped_reason=stats.rerank_skipped_reason,
                        mmr_applied=stats.mmr_applied,
                        vector_weight_used=stats.vector_weight_used,
                        bm25_weight_used=stats.bm25_weight_used,
                        embed_duration=_duration(stats.embed_seconds),
                        total_duration=_duration(stats.total_seconds),
                    )
                )
            response.stats.unknown_knowledge_base_ids.extend(unknown)
            return response

        return await self._run(context, work)

    def _search_settings(self, request: pb.SearchRequest) -> SearchSettings:
        s, o = self._settings, request.options
        return SearchSettings(
            top_k=request.top_k or s.top_k,
            candidate_count=o.candidate_count if o.HasField("candidate_count") else s.candidate_count,
            fusion=s.fusion,
            rrf_k=o.rrf_k if o.HasField("rrf_k") else s.rrf_k,
            vector_weight=o.vector_weight if o.HasField("vector_weight") else s.vector_weight,
            bm25_weight=o.bm25_weight if o.HasField("bm25_weight") else s.bm25_weight,
            weak_leg_weight=s.weak_leg_weight,
            expansion_enabled=o.expansion_enabled if o.HasField("expansion_enabled") else s.expansion_enabled,
            expansion_min_hits=o.expansion_min_hits
            if o.HasField("expansion_min_hits")
            else s.expansion_min_hits,
            expansion_method={
                pb.QUERY_EXPANSION_METHOD_LLM_MULTI_QUERY: "llm",
                pb.QUERY_EXPANSION_METHOD_SYNONYMS: "synonyms",
            }.get(o.expansion_method, s.expansion_method),  # type: ignore[arg-type]
            rerank_enabled=o.rerank_enabled if o.HasField("rerank_enabled") else s.rerank_enabled,
            rerank_candidates=s.rerank_candidates,
            rerank_model_id=o.rerank_model_id,
            mmr_lambda=o.mmr_lambda if o.HasField("mmr_lambda") else s.mmr_lambda,
            include_parent=o.include_parent if o.HasField("include_parent") else True,
        )

    async def GrepChunks(self, request: pb.GrepChunksRequest, context: Any) -> Any:
        async def work() -> pb.GrepChunksResponse:
            tenant = require_identity().tenant_id
            configs = await self._configs(tenant, list(request.knowledge_base_ids), "knowledge_base_ids")
            plan = plan_grep(
                request.pattern,
                ignore_case=request.ignore_case,
                context_chars=request.context_chars,
                max_matches=request.max_matches,
                limits=self._grep_limits,
            )
            scope = Scope(tenant, tuple(c.knowledge_base_id for c in configs), tuple(request.document_ids))
            result = await self._chunks.grep(scope, plan) if configs else None
            response = pb.GrepChunksResponse()
            if result is not None:
                response.truncated = result.truncated
                response.timed_out = result.timed_out
                response.scanned_chunk_count = result.scanned_chunk_count
                for match in result.matches:
                    response.matches.append(
                        pb.GrepMatch(
                            handle=handle_of(match.chunk_id),
                            chunk_id=match.chunk_id,
                            document_id=match.document_id,
                            file_name=match.file_name,
                            knowledge_base_id=match.knowledge_base_id,
                            position=match.position,
                            page=match.page,
                            heading_path=list(match.heading_path),
                            match=match.match,
                            before=match.before,
                            after=match.after,
                            match_offset=match.start,
                        )
                    )
            return response

        return await self._run(context, work)

    async def ListChunks(self, request: pb.ListChunksRequest, context: Any) -> Any:
        async def work() -> pb.ListChunksResponse:
            tenant = require_identity().tenant_id
            if not request.selectors:
                raise invalid("selectors", "at least one selector is required")
            allowed = set(request.knowledge_base_ids)
            response = pb.ListChunksResponse()
            seen: set[str] = set()
            out: list[tuple[StoredChunk, bool]] = []
            for index, selector in enumerate(request.selectors):
                target = selector.WhichOneof("target")
                if target in ("handle", "chunk_id"):
                    wanted = selector.handle if target == "handle" else selector.chunk_id
                    found = await self._chunks.get_chunks(tenant, [wanted])
                    if not found or (allowed and found[0].knowledge_base_id not in allowed):
                        response.not_found.append(wanted)
                        continue
                    chunk = found[0]
                    before, after = max(0, selector.neighbours_before), max(0, selector.neighbours_after)
                    if before or after:
                        for item in await self._chunks.neighbours(
                            tenant, chunk.document_id, chunk.position - before, chunk.position + after
                        ):
                            out.append((item, item.chunk_id != chunk.chunk_id))
                    else:
                        out.append((chunk, False))
                elif target == "range":
                    rng = selector.range
                    if rng.end_position < rng.start_position:
                        raise invalid(f"selectors[{index}].range", "end_position is before start_position")
                    for item in await self._chunks.neighbours(
                        tenant, rng.document_id, rng.start_position, rng.end_position
                    ):
                        if not allowed or item.knowledge_base_id in allowed:
                            out.append((item, False))
                else:
                    raise invalid(f"selectors[{index}]", "a handle, chunk_id or range is required")
            parents = (
                await self._chunks.get_parents(tenant, [c.parent_id for c, _ in out if c.parent_id])
                if request.include_parent_text
                else {}
            )
            for chunk, neighbour in out:
                if chunk.chunk_id in seen:
                    continue
                seen.add(chunk.chunk_id)
                response.chunks.append(
                    pb.StoredChunk(
                        handle=handle_of(chunk.chunk_id),
                        chunk_id=chunk.chunk_id,
                        document_id=chunk.document_id,
                        file_name=chunk.file_name,
                        knowledge_base_id=chunk.knowledge_base_id,
                        text=chunk.text,
                        parent_id=chunk.parent_id,
                        parent_text=parents.get(chunk.parent_id, ""),
                        position=chunk.position,
                        heading_path=list(chunk.heading_path),
                        page=chunk.page,
                        metadata=chunk.metadata,
                        neighbour=neighbour,
                    )
                )
            return response

        return await self._run(context, work)

    async def GetDocumentInfo(self, request: pb.GetDocumentInfoRequest, context: Any) -> Any:
        async def work() -> pb.GetDocumentInfoResponse:
            tenant = require_identity().tenant_id
            if not request.document_ids:
                raise invalid("document_ids", "at least one document id is required")
            infos = await self._chunks.get_document_info(tenant, list(request.document_ids))
            response = pb.GetDocumentInfoResponse()
            found = {info.document_id for info in infos}
            response.not_found.extend(d for d in request.document_ids if d not in found)
            for info in infos:
                meta = info.metadata
                message = pb.DocumentInfo(
                    metadata=pb.DocumentMetadata(
                        document_id=info.document_id,
                        knowledge_base_id=info.knowledge_base_id,
                        file_name=info.file_name,
                        title=meta.title if meta else "",
                        content_type=meta.content_type if meta else "",
                        size_bytes=meta.size_bytes if meta else 0,
                        page_count=meta.page_count if meta else 0,
                        language=meta.language if meta else "",
                        status=meta.status if meta else 0,  # type: ignore[arg-type]
                        metadata=meta.metadata if meta else {},
                    ),
                    index=pb.DocumentIndexState(chunk_count=info.chunk_count, parent_count=info.parent_count),
                )
                if meta is not None and meta.create_time is not None:
                    message.metadata.create_time.FromDatetime(meta.create_time)
                if info.last_index_time is not None:
                    message.index.last_index_time.FromDatetime(info.last_index_time)
                response.documents.append(message)
            return response

        return await self._run(context, work)

    async def QueryKnowledgeGraph(self, request: pb.QueryKnowledgeGraphRequest, context: Any) -> Any:
        async def work() -> pb.QueryKnowledgeGraphResponse:
            tenant = require_identity().tenant_id
            if self._graph is None:
                raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "the graph store is turned off")
            configs = await self._configs(tenant, list(request.knowledge_base_ids), "knowledge_base_ids")
            enabled = [c.knowledge_base_id for c in configs if c.graph_enabled]
            response = pb.QueryKnowledgeGraphResponse(
                skipped_knowledge_base_ids=[kb for kb in request.knowledge_base_ids if kb not in enabled]
            )
            params = request.parameters
            if not params.entity_name.strip():
                raise invalid("parameters.entity_name", "required")
            scope = Scope(tenant, tuple(enabled))
            max_entities = params.max_entities or 20
            if not enabled:
                return response
            if request.template == pb.GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP:
                for entity in await self._graph.find_entities(scope, params.entity_name, max_entities):
                    response.entities.append(
                        pb.GraphEntity(name=entity.name, type=entity.type, description=entity.description)
                    )
                return response
            if request.template == pb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD:
                hops = params.hops or 1
                if hops not in (1, 2):
                    raise invalid("parameters.hops", f"{hops}; must be 1 or 2")
                hood = await self._graph.neighbourhood(scope, params.entity_name, hops, max_entities)
                for entity in hood.entities:
                    response.entities.append(
                        pb.GraphEntity(name=entity.name, type=entity.type, description=entity.description)
                    )
                limit = params.max_supporting_chunks or 3
                chunk_ids = list(
                    dict.fromkeys(cid for r in hood.relations for cid in r.source_chunk_ids[:limit])
                )
                stored = {c.chunk_id: c for c in await self._chunks.get_chunks(tenant, chunk_ids)}
                for relation in hood.relations[: params.max_relations or 50]:
                    message = pb.GraphRelation(
                        source_name=relation.source,
                        target_name=relation.target,
                        type=relation.type,
                        description=relation.description,
                    )
                    for chunk_id in relation.source_chunk_ids[:limit]:
                        chunk = stored.get(chunk_id)
                        if chunk is not None:
                            message.supporting_chunks.append(
                                pb.SupportingChunk(
                                    handle=handle_of(chunk_id),
                                    chunk_id=chunk_id,
                                    document_id=chunk.document_id,
                                    file_name=chunk.file_name,
                                    knowledge_base_id=chunk.knowledge_base_id,
                                    snippet=chunk.text[:300],
                                )
                            )
                    response.relations.append(message)
                return response
            raise RequestError(
                grpc.StatusCode.UNIMPLEMENTED,
                "template: only ENTITY_LOOKUP and NEIGHBOURHOOD are available; "
                "CONNECTION is not implemented yet",
            )

        return await self._run(context, work)

    async def GetIndexStats(self, request: pb.GetIndexStatsRequest, context: Any) -> Any:
        async def work() -> pb.GetIndexStatsResponse:
            tenant = require_identity().tenant_id
            configs = await self._configs(tenant, list(request.knowledge_base_ids), "knowledge_base_ids")
            counts = await self._chunks.knowledge_base_counts(tenant, [c.knowledge_base_id for c in configs])
            collections = set(await self._vectors.collections())
            response = pb.GetIndexStatsResponse(
                vector_backend=self._backends[0],
                lexical_backend=self._backends[1],
                graph_backend=self._backends[2],
            )
            for config in configs:
                kb = config.knowledge_base_id
                stats = pb.KnowledgeBaseIndexStats(
                    knowledge_base_id=kb,
                    config=self._config_proto(config),
                    document_count=counts[kb].document_count,
                    chunk_count=counts[kb].chunk_count,
                    parent_count=counts[kb].parent_count,
                    lexical_entry_count=await self._lexical.count(tenant, kb),
                )
                for model_id, dimension in config.stored_models:
                    collection = collection_name(model_id, dimension)
                    vectors = (
                        await self._vectors.count(collection, tenant, kb) if collection in collections else 0
                    )
                    stats.embeddings.append(
                        pb.EmbeddingModelStats(
                            model_id=model_id,
                            dimension=dimension,
                            vector_count=vectors,
                            active=model_id == config.embedding_model_id,
                        )
                    )
                response.knowledge_bases.append(stats)
            return response

        return await self._run(context, work)

    def attach_graph(self, graph: GraphStore | None, backend: str) -> None:
        """Set the graph store once it is up (the embedded Bolt server starts after the servicer exists)."""
        self._graph = graph
        self._backends = (self._backends[0], self._backends[1], backend)


def build_binding(servicer: RetrievalServicer) -> ServiceBinding:
    return bind_service(CONTRACTS["retrieval"].descriptor, servicer, pending="")
