"""Retrieval's gRPC face for readers (conversation, tools, the gateway): search and the deep-reading tools.

Handlers read the caller's tenant from the identity every call carries and pass it to every store,
so one tenant never reads another's data, even with the other's knowledge-base ids. Bad input
answers INVALID_ARGUMENT naming the field and the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_retrieval.api.convert import (
    chunk_message,
    config_message,
    document_info_message,
    grep_match,
    search_mode,
    search_result,
    search_settings,
    search_stats,
)
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.grep import GrepLimits, plan_grep
from knowsphere_retrieval.domain.ports import KnowledgeBaseConfig, QueryModels, Scope, StoredChunk
from knowsphere_retrieval.domain.search import KnowledgeBaseIndex, Searcher, collection_name
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import answer, invalid


async def search_indexes(
    configs: Sequence[KnowledgeBaseConfig], models: QueryModels
) -> list[KnowledgeBaseIndex]:
    """What a search needs to know of each configured knowledge base (its model and the languages the
    model reads)."""
    return [
        KnowledgeBaseIndex(
            c.knowledge_base_id,
            c.embedding_model_id,
            c.embedding_dimension,
            await models.model_languages(c.embedding_model_id),
        )
        for c in configs
    ]


class ReadingServicer:
    def __init__(
        self, *, settings: Settings, stores: Stores, searcher: Searcher, models: QueryModels
    ) -> None:
        self._settings = settings
        self._stores = stores
        self._searcher = searcher
        self._models = models
        self._grep_limits = GrepLimits(
            max_pattern_length=settings.grep_max_pattern_length,
            max_matches=settings.grep_max_matches,
            context_chars=settings.grep_context_chars,
            time_budget_seconds=settings.grep_time_budget_seconds,
        )

    async def _configs(self, tenant: str, knowledge_base_ids: Sequence[str]) -> list[KnowledgeBaseConfig]:
        return await self._stores.configs(
            tenant, knowledge_base_ids, "knowledge_base_ids", self._settings.max_knowledge_bases_per_search
        )

    async def Search(self, request: pb.SearchRequest, context: Any) -> Any:
        async def work() -> pb.SearchResponse:
            tenant = require_identity().tenant_id
            if not request.query.strip():
                raise invalid("query", "empty query")
            if request.top_k < 0 or request.top_k > self._settings.max_top_k:
                raise invalid("top_k", f"{request.top_k}; must be 0–{self._settings.max_top_k}")
            configs = await self._configs(tenant, list(request.knowledge_base_ids))
            known = {c.knowledge_base_id for c in configs}
            unknown = [kb for kb in request.knowledge_base_ids if kb not in known]
            indexes = await search_indexes(configs, self._models)
            if not indexes:
                return pb.SearchResponse(stats=pb.SearchStats(unknown_knowledge_base_ids=unknown))
            outcome = await self._searcher.search(
                tenant,
                request.query,
                indexes,
                search_settings(request, self._settings),
                mode=search_mode(request),
                document_ids=list(request.document_ids),
            )
            return pb.SearchResponse(
                results=[search_result(item) for item in outcome.results],
                stats=search_stats(outcome.stats, unknown),
            )

        return await answer(context, work)

    async def GrepChunks(self, request: pb.GrepChunksRequest, context: Any) -> Any:
        async def work() -> pb.GrepChunksResponse:
            tenant = require_identity().tenant_id
            configs = await self._configs(tenant, list(request.knowledge_base_ids))
            plan = plan_grep(
                request.pattern,
                ignore_case=request.ignore_case,
                context_chars=request.context_chars,
                max_matches=request.max_matches,
                limits=self._grep_limits,
            )
            if not configs:
                return pb.GrepChunksResponse()
            scope = Scope(tenant, tuple(c.knowledge_base_id for c in configs), tuple(request.document_ids))
            result = await self._stores.chunks.grep(scope, plan)
            return pb.GrepChunksResponse(
                matches=[grep_match(match) for match in result.matches],
                truncated=result.truncated,
                timed_out=result.timed_out,
                scanned_chunk_count=result.scanned_chunk_count,
            )

        return await answer(context, work)

    async def ListChunks(self, request: pb.ListChunksRequest, context: Any) -> Any:
        async def work() -> pb.ListChunksResponse:
            tenant = require_identity().tenant_id
            if not request.selectors:
                raise invalid("selectors", "at least one selector is required")
            chunks = self._stores.chunks
            allowed = set(request.knowledge_base_ids)
            response = pb.ListChunksResponse()
            out: list[tuple[StoredChunk, bool]] = []  # (chunk, is a neighbour of the one asked for)
            for index, selector in enumerate(request.selectors):
                target = selector.WhichOneof("target")
                if target in ("handle", "chunk_id"):
                    wanted = selector.handle if target == "handle" else selector.chunk_id
                    found = await chunks.get_chunks(tenant, [wanted])
                    if not found or (allowed and found[0].knowledge_base_id not in allowed):
                        response.not_found.append(wanted)
                        continue
                    chunk = found[0]
                    before, after = max(0, selector.neighbours_before), max(0, selector.neighbours_after)
                    if before or after:
                        for item in await chunks.neighbours(
                            tenant, chunk.document_id, chunk.position - before, chunk.position + after
                        ):
                            out.append((item, item.chunk_id != chunk.chunk_id))
                    else:
                        out.append((chunk, False))
                elif target == "range":
                    span = selector.range
                    if span.end_position < span.start_position:
                        raise invalid(f"selectors[{index}].range", "end_position is before start_position")
                    for item in await chunks.neighbours(
                        tenant, span.document_id, span.start_position, span.end_position
                    ):
                        if not allowed or item.knowledge_base_id in allowed:
                            out.append((item, False))
                else:
                    raise invalid(f"selectors[{index}]", "a handle, chunk_id or range is required")
            parents = (
                await chunks.get_parents(tenant, [c.parent_id for c, _ in out if c.parent_id])
                if request.include_parent_text
                else {}
            )
            seen: set[str] = set()
            for chunk, neighbour in out:
                if chunk.chunk_id in seen:
                    continue
                seen.add(chunk.chunk_id)
                response.chunks.append(
                    chunk_message(chunk, parent_text=parents.get(chunk.parent_id, ""), neighbour=neighbour)
                )
            return response

        return await answer(context, work)

    async def GetDocumentInfo(self, request: pb.GetDocumentInfoRequest, context: Any) -> Any:
        async def work() -> pb.GetDocumentInfoResponse:
            tenant = require_identity().tenant_id
            if not request.document_ids:
                raise invalid("document_ids", "at least one document id is required")
            infos = await self._stores.chunks.get_document_info(tenant, list(request.document_ids))
            found = {info.document_id for info in infos}
            return pb.GetDocumentInfoResponse(
                documents=[document_info_message(info) for info in infos],
                not_found=[d for d in request.document_ids if d not in found],
            )

        return await answer(context, work)

    async def GetIndexStats(self, request: pb.GetIndexStatsRequest, context: Any) -> Any:
        async def work() -> pb.GetIndexStatsResponse:
            tenant = require_identity().tenant_id
            stores = self._stores
            configs = await self._configs(tenant, list(request.knowledge_base_ids))
            counts = await stores.chunks.knowledge_base_counts(tenant, [c.knowledge_base_id for c in configs])
            response = pb.GetIndexStatsResponse(
                vector_backend=stores.vector_backend,
                lexical_backend=stores.lexical_backend,
                graph_backend=stores.graph_backend,
            )
            existing = await stores.collections()  # once per call, not per knowledge base
            for config in configs:
                kb = config.knowledge_base_id
                stats = pb.KnowledgeBaseIndexStats(
                    knowledge_base_id=kb,
                    config=config_message(config),
                    document_count=counts[kb].document_count,
                    chunk_count=counts[kb].chunk_count,
                    parent_count=counts[kb].parent_count,
                    lexical_entry_count=await stores.lexical.count(tenant, kb),
                )
                for model_id, dimension in config.stored_models:
                    stats.embeddings.append(
                        pb.EmbeddingModelStats(
                            model_id=model_id,
                            dimension=dimension,
                            vector_count=await stores.vector_count(
                                collection_name(model_id, dimension), tenant, kb, existing=existing
                            ),
                            active=model_id == config.embedding_model_id,
                        )
                    )
                response.knowledge_bases.append(stats)
            return response

        return await answer(context, work)
