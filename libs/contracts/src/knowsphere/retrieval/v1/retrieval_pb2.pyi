import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DocumentStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOCUMENT_STATUS_UNSPECIFIED: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_QUEUED: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_PARSING: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_CHUNKING: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_EMBEDDING: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_INDEXING: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_GRAPH: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_READY: _ClassVar[DocumentStatus]
    DOCUMENT_STATUS_FAILED: _ClassVar[DocumentStatus]

class SearchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_MODE_UNSPECIFIED: _ClassVar[SearchMode]
    SEARCH_MODE_HYBRID: _ClassVar[SearchMode]
    SEARCH_MODE_VECTOR: _ClassVar[SearchMode]
    SEARCH_MODE_BM25: _ClassVar[SearchMode]

class QueryExpansionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUERY_EXPANSION_METHOD_UNSPECIFIED: _ClassVar[QueryExpansionMethod]
    QUERY_EXPANSION_METHOD_LLM_MULTI_QUERY: _ClassVar[QueryExpansionMethod]
    QUERY_EXPANSION_METHOD_SYNONYMS: _ClassVar[QueryExpansionMethod]

class GraphQueryTemplate(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GRAPH_QUERY_TEMPLATE_UNSPECIFIED: _ClassVar[GraphQueryTemplate]
    GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP: _ClassVar[GraphQueryTemplate]
    GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD: _ClassVar[GraphQueryTemplate]
    GRAPH_QUERY_TEMPLATE_CONNECTION: _ClassVar[GraphQueryTemplate]
DOCUMENT_STATUS_UNSPECIFIED: DocumentStatus
DOCUMENT_STATUS_QUEUED: DocumentStatus
DOCUMENT_STATUS_PARSING: DocumentStatus
DOCUMENT_STATUS_CHUNKING: DocumentStatus
DOCUMENT_STATUS_EMBEDDING: DocumentStatus
DOCUMENT_STATUS_INDEXING: DocumentStatus
DOCUMENT_STATUS_GRAPH: DocumentStatus
DOCUMENT_STATUS_READY: DocumentStatus
DOCUMENT_STATUS_FAILED: DocumentStatus
SEARCH_MODE_UNSPECIFIED: SearchMode
SEARCH_MODE_HYBRID: SearchMode
SEARCH_MODE_VECTOR: SearchMode
SEARCH_MODE_BM25: SearchMode
QUERY_EXPANSION_METHOD_UNSPECIFIED: QueryExpansionMethod
QUERY_EXPANSION_METHOD_LLM_MULTI_QUERY: QueryExpansionMethod
QUERY_EXPANSION_METHOD_SYNONYMS: QueryExpansionMethod
GRAPH_QUERY_TEMPLATE_UNSPECIFIED: GraphQueryTemplate
GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP: GraphQueryTemplate
GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD: GraphQueryTemplate
GRAPH_QUERY_TEMPLATE_CONNECTION: GraphQueryTemplate

class KnowledgeBaseIndexConfig(_message.Message):
    __slots__ = ("knowledge_base_id", "embedding_model_id", "embedding_dimension", "language_hint", "graph_enabled", "stored_embedding_model_ids", "update_time")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_HINT_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    STORED_EMBEDDING_MODEL_IDS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    embedding_model_id: str
    embedding_dimension: int
    language_hint: str
    graph_enabled: bool
    stored_embedding_model_ids: _containers.RepeatedScalarFieldContainer[str]
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, knowledge_base_id: _Optional[str] = ..., embedding_model_id: _Optional[str] = ..., embedding_dimension: _Optional[int] = ..., language_hint: _Optional[str] = ..., graph_enabled: _Optional[bool] = ..., stored_embedding_model_ids: _Optional[_Iterable[str]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ConfigureKnowledgeBaseRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "embedding_model_id", "embedding_dimension", "language_hint", "graph_enabled")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_HINT_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    embedding_model_id: str
    embedding_dimension: int
    language_hint: str
    graph_enabled: bool
    def __init__(self, knowledge_base_id: _Optional[str] = ..., embedding_model_id: _Optional[str] = ..., embedding_dimension: _Optional[int] = ..., language_hint: _Optional[str] = ..., graph_enabled: _Optional[bool] = ...) -> None: ...

class ConfigureKnowledgeBaseResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: KnowledgeBaseIndexConfig
    def __init__(self, config: _Optional[_Union[KnowledgeBaseIndexConfig, _Mapping]] = ...) -> None: ...

class ChunkEmbedding(_message.Message):
    __slots__ = ("model_id", "dimension", "values")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    dimension: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("id", "document_id", "knowledge_base_id", "file_name", "text", "parent_id", "parent_text", "position", "heading_path", "page", "embeddings", "metadata", "ingest_run_id", "token_count")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    INGEST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    document_id: str
    knowledge_base_id: str
    file_name: str
    text: str
    parent_id: str
    parent_text: str
    position: int
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    page: int
    embeddings: _containers.RepeatedCompositeFieldContainer[ChunkEmbedding]
    metadata: _containers.ScalarMap[str, str]
    ingest_run_id: str
    token_count: int
    def __init__(self, id: _Optional[str] = ..., document_id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ..., text: _Optional[str] = ..., parent_id: _Optional[str] = ..., parent_text: _Optional[str] = ..., position: _Optional[int] = ..., heading_path: _Optional[_Iterable[str]] = ..., page: _Optional[int] = ..., embeddings: _Optional[_Iterable[_Union[ChunkEmbedding, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., ingest_run_id: _Optional[str] = ..., token_count: _Optional[int] = ...) -> None: ...

class IndexChunksRequest(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[Chunk]
    def __init__(self, chunks: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ...) -> None: ...

class IndexChunksResponse(_message.Message):
    __slots__ = ("indexed_count",)
    INDEXED_COUNT_FIELD_NUMBER: _ClassVar[int]
    indexed_count: int
    def __init__(self, indexed_count: _Optional[int] = ...) -> None: ...

class DocumentMetadata(_message.Message):
    __slots__ = ("document_id", "knowledge_base_id", "file_name", "title", "content_type", "size_bytes", "page_count", "language", "status", "create_time", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    knowledge_base_id: str
    file_name: str
    title: str
    content_type: str
    size_bytes: int
    page_count: int
    language: str
    status: DocumentStatus
    create_time: _timestamp_pb2.Timestamp
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, document_id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ..., title: _Optional[str] = ..., content_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., page_count: _Optional[int] = ..., language: _Optional[str] = ..., status: _Optional[_Union[DocumentStatus, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PutDocumentInfoRequest(_message.Message):
    __slots__ = ("document", "documents")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    document: DocumentMetadata
    documents: _containers.RepeatedCompositeFieldContainer[DocumentMetadata]
    def __init__(self, document: _Optional[_Union[DocumentMetadata, _Mapping]] = ..., documents: _Optional[_Iterable[_Union[DocumentMetadata, _Mapping]]] = ...) -> None: ...

class PutDocumentInfoResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PruneDocumentChunksRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "document_id", "keep_ingest_run_id")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_INGEST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    document_id: str
    keep_ingest_run_id: str
    def __init__(self, knowledge_base_id: _Optional[str] = ..., document_id: _Optional[str] = ..., keep_ingest_run_id: _Optional[str] = ...) -> None: ...

class PruneDocumentChunksResponse(_message.Message):
    __slots__ = ("deleted_chunk_count",)
    DELETED_CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_chunk_count: int
    def __init__(self, deleted_chunk_count: _Optional[int] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "document_id")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    document_id: str
    def __init__(self, knowledge_base_id: _Optional[str] = ..., document_id: _Optional[str] = ...) -> None: ...

class DeleteDocumentResponse(_message.Message):
    __slots__ = ("deleted_chunk_count", "deleted_graph_fact_count")
    DELETED_CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETED_GRAPH_FACT_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_chunk_count: int
    deleted_graph_fact_count: int
    def __init__(self, deleted_chunk_count: _Optional[int] = ..., deleted_graph_fact_count: _Optional[int] = ...) -> None: ...

class DeleteKnowledgeBaseRequest(_message.Message):
    __slots__ = ("knowledge_base_id",)
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    def __init__(self, knowledge_base_id: _Optional[str] = ...) -> None: ...

class DeleteKnowledgeBaseResponse(_message.Message):
    __slots__ = ("deleted_chunk_count", "deleted_document_count")
    DELETED_CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETED_DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_chunk_count: int
    deleted_document_count: int
    def __init__(self, deleted_chunk_count: _Optional[int] = ..., deleted_document_count: _Optional[int] = ...) -> None: ...

class DeleteEmbeddingsRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "embedding_model_id")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    embedding_model_id: str
    def __init__(self, knowledge_base_id: _Optional[str] = ..., embedding_model_id: _Optional[str] = ...) -> None: ...

class DeleteEmbeddingsResponse(_message.Message):
    __slots__ = ("deleted_vector_count",)
    DELETED_VECTOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_vector_count: int
    def __init__(self, deleted_vector_count: _Optional[int] = ...) -> None: ...

class EntityInput(_message.Message):
    __slots__ = ("name", "type", "description", "aliases", "source_chunk_ids")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    description: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    source_chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., description: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., source_chunk_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RelationInput(_message.Message):
    __slots__ = ("source_name", "target_name", "type", "description", "weight", "source_chunk_ids")
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    source_name: str
    target_name: str
    type: str
    description: str
    weight: float
    source_chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, source_name: _Optional[str] = ..., target_name: _Optional[str] = ..., type: _Optional[str] = ..., description: _Optional[str] = ..., weight: _Optional[float] = ..., source_chunk_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class IndexGraphRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "document_id", "entities", "relations")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    document_id: str
    entities: _containers.RepeatedCompositeFieldContainer[EntityInput]
    relations: _containers.RepeatedCompositeFieldContainer[RelationInput]
    def __init__(self, knowledge_base_id: _Optional[str] = ..., document_id: _Optional[str] = ..., entities: _Optional[_Iterable[_Union[EntityInput, _Mapping]]] = ..., relations: _Optional[_Iterable[_Union[RelationInput, _Mapping]]] = ...) -> None: ...

class IndexGraphResponse(_message.Message):
    __slots__ = ("entity_count", "relation_count")
    ENTITY_COUNT_FIELD_NUMBER: _ClassVar[int]
    RELATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    entity_count: int
    relation_count: int
    def __init__(self, entity_count: _Optional[int] = ..., relation_count: _Optional[int] = ...) -> None: ...

class SearchOptions(_message.Message):
    __slots__ = ("mode", "rrf_k", "vector_weight", "bm25_weight", "expansion_enabled", "expansion_min_hits", "expansion_method", "rerank_enabled", "rerank_model_id", "mmr_lambda", "include_parent", "candidate_count", "second_hop")
    MODE_FIELD_NUMBER: _ClassVar[int]
    RRF_K_FIELD_NUMBER: _ClassVar[int]
    VECTOR_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    BM25_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    EXPANSION_ENABLED_FIELD_NUMBER: _ClassVar[int]
    EXPANSION_MIN_HITS_FIELD_NUMBER: _ClassVar[int]
    EXPANSION_METHOD_FIELD_NUMBER: _ClassVar[int]
    RERANK_ENABLED_FIELD_NUMBER: _ClassVar[int]
    RERANK_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MMR_LAMBDA_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PARENT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SECOND_HOP_FIELD_NUMBER: _ClassVar[int]
    mode: SearchMode
    rrf_k: int
    vector_weight: float
    bm25_weight: float
    expansion_enabled: bool
    expansion_min_hits: int
    expansion_method: QueryExpansionMethod
    rerank_enabled: bool
    rerank_model_id: str
    mmr_lambda: float
    include_parent: bool
    candidate_count: int
    second_hop: bool
    def __init__(self, mode: _Optional[_Union[SearchMode, str]] = ..., rrf_k: _Optional[int] = ..., vector_weight: _Optional[float] = ..., bm25_weight: _Optional[float] = ..., expansion_enabled: _Optional[bool] = ..., expansion_min_hits: _Optional[int] = ..., expansion_method: _Optional[_Union[QueryExpansionMethod, str]] = ..., rerank_enabled: _Optional[bool] = ..., rerank_model_id: _Optional[str] = ..., mmr_lambda: _Optional[float] = ..., include_parent: _Optional[bool] = ..., candidate_count: _Optional[int] = ..., second_hop: _Optional[bool] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("query", "knowledge_base_ids", "top_k", "document_ids", "options")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    query: str
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    options: SearchOptions
    def __init__(self, query: _Optional[str] = ..., knowledge_base_ids: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., document_ids: _Optional[_Iterable[str]] = ..., options: _Optional[_Union[SearchOptions, _Mapping]] = ...) -> None: ...

class ScoreParts(_message.Message):
    __slots__ = ("vector", "bm25", "rrf", "rerank", "vector_rank", "bm25_rank")
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    BM25_FIELD_NUMBER: _ClassVar[int]
    RRF_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    VECTOR_RANK_FIELD_NUMBER: _ClassVar[int]
    BM25_RANK_FIELD_NUMBER: _ClassVar[int]
    vector: float
    bm25: float
    rrf: float
    rerank: float
    vector_rank: int
    bm25_rank: int
    def __init__(self, vector: _Optional[float] = ..., bm25: _Optional[float] = ..., rrf: _Optional[float] = ..., rerank: _Optional[float] = ..., vector_rank: _Optional[int] = ..., bm25_rank: _Optional[int] = ...) -> None: ...

class SearchResult(_message.Message):
    __slots__ = ("handle", "chunk_id", "document_id", "file_name", "knowledge_base_id", "score", "scores", "text", "parent_id", "parent_text", "position", "heading_path", "page", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    handle: str
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    score: float
    scores: ScoreParts
    text: str
    parent_id: str
    parent_text: str
    position: int
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    page: int
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, handle: _Optional[str] = ..., chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., file_name: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., score: _Optional[float] = ..., scores: _Optional[_Union[ScoreParts, _Mapping]] = ..., text: _Optional[str] = ..., parent_id: _Optional[str] = ..., parent_text: _Optional[str] = ..., position: _Optional[int] = ..., heading_path: _Optional[_Iterable[str]] = ..., page: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SearchStats(_message.Message):
    __slots__ = ("vector_hit_count", "bm25_hit_count", "expanded", "expansion_queries", "reranked", "rerank_skipped_reason", "mmr_applied", "vector_weight_used", "bm25_weight_used", "embed_duration", "total_duration", "unknown_knowledge_base_ids", "second_hop", "second_hop_queries")
    VECTOR_HIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    BM25_HIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXPANDED_FIELD_NUMBER: _ClassVar[int]
    EXPANSION_QUERIES_FIELD_NUMBER: _ClassVar[int]
    RERANKED_FIELD_NUMBER: _ClassVar[int]
    RERANK_SKIPPED_REASON_FIELD_NUMBER: _ClassVar[int]
    MMR_APPLIED_FIELD_NUMBER: _ClassVar[int]
    VECTOR_WEIGHT_USED_FIELD_NUMBER: _ClassVar[int]
    BM25_WEIGHT_USED_FIELD_NUMBER: _ClassVar[int]
    EMBED_DURATION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DURATION_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    SECOND_HOP_FIELD_NUMBER: _ClassVar[int]
    SECOND_HOP_QUERIES_FIELD_NUMBER: _ClassVar[int]
    vector_hit_count: int
    bm25_hit_count: int
    expanded: bool
    expansion_queries: _containers.RepeatedScalarFieldContainer[str]
    reranked: bool
    rerank_skipped_reason: str
    mmr_applied: bool
    vector_weight_used: float
    bm25_weight_used: float
    embed_duration: _duration_pb2.Duration
    total_duration: _duration_pb2.Duration
    unknown_knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    second_hop: bool
    second_hop_queries: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, vector_hit_count: _Optional[int] = ..., bm25_hit_count: _Optional[int] = ..., expanded: _Optional[bool] = ..., expansion_queries: _Optional[_Iterable[str]] = ..., reranked: _Optional[bool] = ..., rerank_skipped_reason: _Optional[str] = ..., mmr_applied: _Optional[bool] = ..., vector_weight_used: _Optional[float] = ..., bm25_weight_used: _Optional[float] = ..., embed_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., total_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., unknown_knowledge_base_ids: _Optional[_Iterable[str]] = ..., second_hop: _Optional[bool] = ..., second_hop_queries: _Optional[_Iterable[str]] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("results", "stats")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SearchResult]
    stats: SearchStats
    def __init__(self, results: _Optional[_Iterable[_Union[SearchResult, _Mapping]]] = ..., stats: _Optional[_Union[SearchStats, _Mapping]] = ...) -> None: ...

class EvaluationQuery(_message.Message):
    __slots__ = ("id", "text", "relevance")
    class RelevanceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    relevance: _containers.ScalarMap[str, int]
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., relevance: _Optional[_Mapping[str, int]] = ...) -> None: ...

class EvaluateQueriesRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "modes", "queries")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    modes: _containers.RepeatedScalarFieldContainer[SearchMode]
    queries: _containers.RepeatedCompositeFieldContainer[EvaluationQuery]
    def __init__(self, knowledge_base_id: _Optional[str] = ..., modes: _Optional[_Iterable[_Union[SearchMode, str]]] = ..., queries: _Optional[_Iterable[_Union[EvaluationQuery, _Mapping]]] = ...) -> None: ...

class RankingMetrics(_message.Message):
    __slots__ = ("ndcg_at_10", "recall_at_5", "recall_at_10", "recall_at_20", "mrr_at_10")
    NDCG_AT_10_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_5_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_10_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_20_FIELD_NUMBER: _ClassVar[int]
    MRR_AT_10_FIELD_NUMBER: _ClassVar[int]
    ndcg_at_10: float
    recall_at_5: float
    recall_at_10: float
    recall_at_20: float
    mrr_at_10: float
    def __init__(self, ndcg_at_10: _Optional[float] = ..., recall_at_5: _Optional[float] = ..., recall_at_10: _Optional[float] = ..., recall_at_20: _Optional[float] = ..., mrr_at_10: _Optional[float] = ...) -> None: ...

class ModeEvaluation(_message.Message):
    __slots__ = ("mode", "metrics", "ranking")
    MODE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    mode: SearchMode
    metrics: RankingMetrics
    ranking: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[_Union[SearchMode, str]] = ..., metrics: _Optional[_Union[RankingMetrics, _Mapping]] = ..., ranking: _Optional[_Iterable[str]] = ...) -> None: ...

class QueryEvaluation(_message.Message):
    __slots__ = ("query_id", "modes")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    modes: _containers.RepeatedCompositeFieldContainer[ModeEvaluation]
    def __init__(self, query_id: _Optional[str] = ..., modes: _Optional[_Iterable[_Union[ModeEvaluation, _Mapping]]] = ...) -> None: ...

class EvaluateQueriesResponse(_message.Message):
    __slots__ = ("queries",)
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    queries: _containers.RepeatedCompositeFieldContainer[QueryEvaluation]
    def __init__(self, queries: _Optional[_Iterable[_Union[QueryEvaluation, _Mapping]]] = ...) -> None: ...

class GrepChunksRequest(_message.Message):
    __slots__ = ("pattern", "ignore_case", "knowledge_base_ids", "document_ids", "context_chars", "max_matches")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    IGNORE_CASE_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_MATCHES_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    ignore_case: bool
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    context_chars: int
    max_matches: int
    def __init__(self, pattern: _Optional[str] = ..., ignore_case: _Optional[bool] = ..., knowledge_base_ids: _Optional[_Iterable[str]] = ..., document_ids: _Optional[_Iterable[str]] = ..., context_chars: _Optional[int] = ..., max_matches: _Optional[int] = ...) -> None: ...

class GrepMatch(_message.Message):
    __slots__ = ("handle", "chunk_id", "document_id", "file_name", "knowledge_base_id", "position", "page", "heading_path", "match", "before", "after", "match_offset")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    MATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    handle: str
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    position: int
    page: int
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    match: str
    before: str
    after: str
    match_offset: int
    def __init__(self, handle: _Optional[str] = ..., chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., file_name: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., position: _Optional[int] = ..., page: _Optional[int] = ..., heading_path: _Optional[_Iterable[str]] = ..., match: _Optional[str] = ..., before: _Optional[str] = ..., after: _Optional[str] = ..., match_offset: _Optional[int] = ...) -> None: ...

class GrepChunksResponse(_message.Message):
    __slots__ = ("matches", "truncated", "timed_out", "scanned_chunk_count")
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    SCANNED_CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    matches: _containers.RepeatedCompositeFieldContainer[GrepMatch]
    truncated: bool
    timed_out: bool
    scanned_chunk_count: int
    def __init__(self, matches: _Optional[_Iterable[_Union[GrepMatch, _Mapping]]] = ..., truncated: _Optional[bool] = ..., timed_out: _Optional[bool] = ..., scanned_chunk_count: _Optional[int] = ...) -> None: ...

class PositionRange(_message.Message):
    __slots__ = ("document_id", "start_position", "end_position")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    END_POSITION_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    start_position: int
    end_position: int
    def __init__(self, document_id: _Optional[str] = ..., start_position: _Optional[int] = ..., end_position: _Optional[int] = ...) -> None: ...

class ChunkSelector(_message.Message):
    __slots__ = ("handle", "chunk_id", "range", "neighbours_before", "neighbours_after")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_AFTER_FIELD_NUMBER: _ClassVar[int]
    handle: str
    chunk_id: str
    range: PositionRange
    neighbours_before: int
    neighbours_after: int
    def __init__(self, handle: _Optional[str] = ..., chunk_id: _Optional[str] = ..., range: _Optional[_Union[PositionRange, _Mapping]] = ..., neighbours_before: _Optional[int] = ..., neighbours_after: _Optional[int] = ...) -> None: ...

class ListChunksRequest(_message.Message):
    __slots__ = ("selectors", "knowledge_base_ids", "include_parent_text", "page_size", "page_token")
    SELECTORS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PARENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    selectors: _containers.RepeatedCompositeFieldContainer[ChunkSelector]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    include_parent_text: bool
    page_size: int
    page_token: str
    def __init__(self, selectors: _Optional[_Iterable[_Union[ChunkSelector, _Mapping]]] = ..., knowledge_base_ids: _Optional[_Iterable[str]] = ..., include_parent_text: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class StoredChunk(_message.Message):
    __slots__ = ("handle", "chunk_id", "document_id", "file_name", "knowledge_base_id", "text", "parent_id", "parent_text", "position", "heading_path", "page", "metadata", "neighbour")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOUR_FIELD_NUMBER: _ClassVar[int]
    handle: str
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    text: str
    parent_id: str
    parent_text: str
    position: int
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    page: int
    metadata: _containers.ScalarMap[str, str]
    neighbour: bool
    def __init__(self, handle: _Optional[str] = ..., chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., file_name: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., text: _Optional[str] = ..., parent_id: _Optional[str] = ..., parent_text: _Optional[str] = ..., position: _Optional[int] = ..., heading_path: _Optional[_Iterable[str]] = ..., page: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., neighbour: _Optional[bool] = ...) -> None: ...

class ListChunksResponse(_message.Message):
    __slots__ = ("chunks", "not_found", "next_page_token")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[StoredChunk]
    not_found: _containers.RepeatedScalarFieldContainer[str]
    next_page_token: str
    def __init__(self, chunks: _Optional[_Iterable[_Union[StoredChunk, _Mapping]]] = ..., not_found: _Optional[_Iterable[str]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetDocumentInfoRequest(_message.Message):
    __slots__ = ("document_ids",)
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, document_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DocumentIndexState(_message.Message):
    __slots__ = ("chunk_count", "parent_count", "entity_count", "relation_count", "embedding_model_ids", "last_index_time")
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENTITY_COUNT_FIELD_NUMBER: _ClassVar[int]
    RELATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_IDS_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_TIME_FIELD_NUMBER: _ClassVar[int]
    chunk_count: int
    parent_count: int
    entity_count: int
    relation_count: int
    embedding_model_ids: _containers.RepeatedScalarFieldContainer[str]
    last_index_time: _timestamp_pb2.Timestamp
    def __init__(self, chunk_count: _Optional[int] = ..., parent_count: _Optional[int] = ..., entity_count: _Optional[int] = ..., relation_count: _Optional[int] = ..., embedding_model_ids: _Optional[_Iterable[str]] = ..., last_index_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DocumentInfo(_message.Message):
    __slots__ = ("metadata", "index")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    metadata: DocumentMetadata
    index: DocumentIndexState
    def __init__(self, metadata: _Optional[_Union[DocumentMetadata, _Mapping]] = ..., index: _Optional[_Union[DocumentIndexState, _Mapping]] = ...) -> None: ...

class GetDocumentInfoResponse(_message.Message):
    __slots__ = ("documents", "not_found")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentInfo]
    not_found: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentInfo, _Mapping]]] = ..., not_found: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphQueryParameters(_message.Message):
    __slots__ = ("entity_name", "other_entity_name", "hops", "relation_types", "entity_types", "max_entities", "max_relations", "max_supporting_chunks")
    ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    OTHER_ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    RELATION_TYPES_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTITIES_FIELD_NUMBER: _ClassVar[int]
    MAX_RELATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SUPPORTING_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    entity_name: str
    other_entity_name: str
    hops: int
    relation_types: _containers.RepeatedScalarFieldContainer[str]
    entity_types: _containers.RepeatedScalarFieldContainer[str]
    max_entities: int
    max_relations: int
    max_supporting_chunks: int
    def __init__(self, entity_name: _Optional[str] = ..., other_entity_name: _Optional[str] = ..., hops: _Optional[int] = ..., relation_types: _Optional[_Iterable[str]] = ..., entity_types: _Optional[_Iterable[str]] = ..., max_entities: _Optional[int] = ..., max_relations: _Optional[int] = ..., max_supporting_chunks: _Optional[int] = ...) -> None: ...

class QueryKnowledgeGraphRequest(_message.Message):
    __slots__ = ("knowledge_base_ids", "template", "parameters")
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    template: GraphQueryTemplate
    parameters: GraphQueryParameters
    def __init__(self, knowledge_base_ids: _Optional[_Iterable[str]] = ..., template: _Optional[_Union[GraphQueryTemplate, str]] = ..., parameters: _Optional[_Union[GraphQueryParameters, _Mapping]] = ...) -> None: ...

class GraphEntity(_message.Message):
    __slots__ = ("id", "name", "type", "description", "aliases", "knowledge_base_id", "degree")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    DEGREE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    type: str
    description: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    knowledge_base_id: str
    degree: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., type: _Optional[str] = ..., description: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., knowledge_base_id: _Optional[str] = ..., degree: _Optional[int] = ...) -> None: ...

class SupportingChunk(_message.Message):
    __slots__ = ("handle", "chunk_id", "document_id", "file_name", "knowledge_base_id", "snippet")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    handle: str
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    snippet: str
    def __init__(self, handle: _Optional[str] = ..., chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., file_name: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., snippet: _Optional[str] = ...) -> None: ...

class GraphRelation(_message.Message):
    __slots__ = ("source_entity_id", "target_entity_id", "source_name", "target_name", "type", "description", "weight", "knowledge_base_id", "supporting_chunks")
    SOURCE_ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    SUPPORTING_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    source_entity_id: str
    target_entity_id: str
    source_name: str
    target_name: str
    type: str
    description: str
    weight: float
    knowledge_base_id: str
    supporting_chunks: _containers.RepeatedCompositeFieldContainer[SupportingChunk]
    def __init__(self, source_entity_id: _Optional[str] = ..., target_entity_id: _Optional[str] = ..., source_name: _Optional[str] = ..., target_name: _Optional[str] = ..., type: _Optional[str] = ..., description: _Optional[str] = ..., weight: _Optional[float] = ..., knowledge_base_id: _Optional[str] = ..., supporting_chunks: _Optional[_Iterable[_Union[SupportingChunk, _Mapping]]] = ...) -> None: ...

class QueryKnowledgeGraphResponse(_message.Message):
    __slots__ = ("entities", "relations", "truncated", "skipped_knowledge_base_ids")
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    entities: _containers.RepeatedCompositeFieldContainer[GraphEntity]
    relations: _containers.RepeatedCompositeFieldContainer[GraphRelation]
    truncated: bool
    skipped_knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entities: _Optional[_Iterable[_Union[GraphEntity, _Mapping]]] = ..., relations: _Optional[_Iterable[_Union[GraphRelation, _Mapping]]] = ..., truncated: _Optional[bool] = ..., skipped_knowledge_base_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetIndexStatsRequest(_message.Message):
    __slots__ = ("knowledge_base_ids",)
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, knowledge_base_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class EmbeddingModelStats(_message.Message):
    __slots__ = ("model_id", "dimension", "vector_count", "active")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    VECTOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    dimension: int
    vector_count: int
    active: bool
    def __init__(self, model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., vector_count: _Optional[int] = ..., active: _Optional[bool] = ...) -> None: ...

class KnowledgeBaseIndexStats(_message.Message):
    __slots__ = ("knowledge_base_id", "config", "document_count", "chunk_count", "parent_count", "lexical_entry_count", "embeddings", "entity_count", "relation_count")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    ENTITY_COUNT_FIELD_NUMBER: _ClassVar[int]
    RELATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    config: KnowledgeBaseIndexConfig
    document_count: int
    chunk_count: int
    parent_count: int
    lexical_entry_count: int
    embeddings: _containers.RepeatedCompositeFieldContainer[EmbeddingModelStats]
    entity_count: int
    relation_count: int
    def __init__(self, knowledge_base_id: _Optional[str] = ..., config: _Optional[_Union[KnowledgeBaseIndexConfig, _Mapping]] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., parent_count: _Optional[int] = ..., lexical_entry_count: _Optional[int] = ..., embeddings: _Optional[_Iterable[_Union[EmbeddingModelStats, _Mapping]]] = ..., entity_count: _Optional[int] = ..., relation_count: _Optional[int] = ...) -> None: ...

class GetIndexStatsResponse(_message.Message):
    __slots__ = ("knowledge_bases", "vector_backend", "lexical_backend", "graph_backend")
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    VECTOR_BACKEND_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_BACKEND_FIELD_NUMBER: _ClassVar[int]
    GRAPH_BACKEND_FIELD_NUMBER: _ClassVar[int]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[KnowledgeBaseIndexStats]
    vector_backend: str
    lexical_backend: str
    graph_backend: str
    def __init__(self, knowledge_bases: _Optional[_Iterable[_Union[KnowledgeBaseIndexStats, _Mapping]]] = ..., vector_backend: _Optional[str] = ..., lexical_backend: _Optional[str] = ..., graph_backend: _Optional[str] = ...) -> None: ...
