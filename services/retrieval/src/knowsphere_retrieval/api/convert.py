"""Every conversion between retrieval's records and its proto messages, written once per boundary.

Same-named fields cross through :func:`knowsphere_contracts.convert.message_from` and
:func:`~knowsphere_contracts.convert.record_from`, so a field added to a record and its message crosses
with no hand edit here; only fields whose names differ are named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere.retrieval.v1.retrieval_enums import QueryExpansionMethod, SearchMode
from knowsphere_contracts.convert import message_from, record_from
from knowsphere_retrieval.domain.evaluation import SEARCH_DEPTH, QueryScores
from knowsphere_retrieval.domain.ports import (
    DocumentInfo,
    DocumentMetadata,
    GraphEntity,
    GraphRelation,
    GrepMatch,
    KnowledgeBaseConfig,
    StoredChunk,
)
from knowsphere_retrieval.domain.search import ResultItem, SearchSettings, SearchStats
from knowsphere_retrieval.settings import Settings

_SEARCH_SETTINGS: Final = frozenset(item.name for item in dataclasses.fields(SearchSettings))
_EXPANSION_METHODS: Final = {
    QueryExpansionMethod.LLM_MULTI_QUERY: "llm",
    QueryExpansionMethod.SYNONYMS: "synonyms",
}


def handle_of(chunk_id: str) -> str:
    """The opaque reference a result carries; ListChunks accepts it. Stable for a chunk."""
    return chunk_id


# --- what callers send ----------------------------------------------------------------------------


def stored_chunk(tenant_id: str, chunk: pb.Chunk) -> StoredChunk:
    return record_from(StoredChunk, chunk, chunk_id=chunk.id, tenant_id=tenant_id)


def document_metadata(tenant_id: str, document: pb.DocumentMetadata) -> DocumentMetadata:
    return record_from(DocumentMetadata, document, tenant_id=tenant_id)


def graph_entity(entity: pb.EntityInput) -> GraphEntity:
    return record_from(GraphEntity, entity)


def graph_relation(relation: pb.RelationInput) -> GraphRelation:
    return record_from(GraphRelation, relation, source=relation.source_name, target=relation.target_name)


def search_mode(request: pb.SearchRequest) -> SearchMode:
    return SearchMode.from_number(request.options.mode) or SearchMode.HYBRID


def search_settings(request: pb.SearchRequest, defaults: Settings) -> SearchSettings:
    """The service's search defaults, overridden by what the request's options set."""
    options = request.options
    values = {name: getattr(defaults, name) for name in _SEARCH_SETTINGS if hasattr(defaults, name)}
    values |= {
        field.name: getattr(options, field.name)
        for field in options.DESCRIPTOR.fields
        if field.has_presence and field.name in _SEARCH_SETTINGS and options.HasField(field.name)
    }
    method = QueryExpansionMethod.from_number(options.expansion_method)
    if method is not None:
        values["expansion_method"] = _EXPANSION_METHODS[method]
    if options.HasField("second_hop"):
        values["second_hop_enabled"] = options.second_hop
    if request.top_k:
        values["top_k"] = request.top_k
    return SearchSettings(**values, rerank_model_id=options.rerank_model_id)


def evaluation_search_settings(mode: SearchMode, defaults: Settings) -> SearchSettings:
    """The search an evaluated query runs in ``mode``: what Search runs for a request of
    ``SEARCH_DEPTH`` results in that mode without parent passages (nothing else overridden)."""
    request = pb.SearchRequest(
        top_k=SEARCH_DEPTH, options=pb.SearchOptions(mode=mode.to_proto(), include_parent=False)
    )
    return search_settings(request, defaults)


# --- what retrieval answers -----------------------------------------------------------------------


def config_message(config: KnowledgeBaseConfig) -> pb.KnowledgeBaseIndexConfig:
    return message_from(
        pb.KnowledgeBaseIndexConfig,
        config,
        stored_embedding_model_ids=[model_id for model_id, _ in config.stored_models],
    )


def search_result(item: ResultItem) -> pb.SearchResult:
    return message_from(
        pb.SearchResult,
        item.chunk,
        handle=handle_of(item.chunk.chunk_id),
        score=item.score,
        scores=message_from(pb.ScoreParts, item.fused, rerank=item.rerank),
        parent_text=item.parent_text,
    )


def search_stats(stats: SearchStats, unknown_knowledge_base_ids: Sequence[str]) -> pb.SearchStats:
    return message_from(
        pb.SearchStats,
        stats,
        embed_duration=stats.embed_seconds,
        total_duration=stats.total_seconds,
        unknown_knowledge_base_ids=unknown_knowledge_base_ids,
    )


def chunk_message(chunk: StoredChunk, *, parent_text: str = "", neighbour: bool = False) -> pb.StoredChunk:
    return message_from(
        pb.StoredChunk,
        chunk,
        handle=handle_of(chunk.chunk_id),
        parent_text=parent_text,
        neighbour=neighbour,
    )


def grep_match(match: GrepMatch) -> pb.GrepMatch:
    return message_from(pb.GrepMatch, match, handle=handle_of(match.chunk_id), match_offset=match.start)


def supporting_chunk(chunk: StoredChunk, snippet_chars: int) -> pb.SupportingChunk:
    return message_from(
        pb.SupportingChunk, chunk, handle=handle_of(chunk.chunk_id), snippet=chunk.text[:snippet_chars]
    )


def entity_message(entity: GraphEntity) -> pb.GraphEntity:
    return message_from(pb.GraphEntity, entity)


def relation_message(relation: GraphRelation, supporting: Sequence[pb.SupportingChunk]) -> pb.GraphRelation:
    return message_from(
        pb.GraphRelation,
        relation,
        source_name=relation.source,
        target_name=relation.target,
        supporting_chunks=supporting,
    )


def document_info_message(info: DocumentInfo) -> pb.DocumentInfo:
    """The pushed metadata (when there is any) with what is stored; ids and file name always set."""
    return pb.DocumentInfo(
        metadata=message_from(
            pb.DocumentMetadata,
            info.metadata,
            document_id=info.document_id,
            knowledge_base_id=info.knowledge_base_id,
            file_name=info.file_name,
        ),
        index=message_from(pb.DocumentIndexState, info),
    )


def mode_evaluation(mode: SearchMode, scores: QueryScores, ranking: Sequence[str]) -> pb.ModeEvaluation:
    return pb.ModeEvaluation(
        mode=mode.to_proto(), metrics=message_from(pb.RankingMetrics, scores), ranking=ranking
    )
