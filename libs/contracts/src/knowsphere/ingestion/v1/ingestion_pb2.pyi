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

class ChunkingStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHUNKING_STRATEGY_UNSPECIFIED: _ClassVar[ChunkingStrategy]
    CHUNKING_STRATEGY_HEADING: _ClassVar[ChunkingStrategy]
    CHUNKING_STRATEGY_PARENT_CHILD: _ClassVar[ChunkingStrategy]

class MigrationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MIGRATION_STATE_UNSPECIFIED: _ClassVar[MigrationState]
    MIGRATION_STATE_RUNNING: _ClassVar[MigrationState]
    MIGRATION_STATE_COMPLETED: _ClassVar[MigrationState]
    MIGRATION_STATE_FAILED: _ClassVar[MigrationState]

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

class IngestionStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INGESTION_STAGE_UNSPECIFIED: _ClassVar[IngestionStage]
    INGESTION_STAGE_PARSE: _ClassVar[IngestionStage]
    INGESTION_STAGE_CHUNK: _ClassVar[IngestionStage]
    INGESTION_STAGE_EMBED: _ClassVar[IngestionStage]
    INGESTION_STAGE_INDEX: _ClassVar[IngestionStage]
    INGESTION_STAGE_GRAPH: _ClassVar[IngestionStage]
CHUNKING_STRATEGY_UNSPECIFIED: ChunkingStrategy
CHUNKING_STRATEGY_HEADING: ChunkingStrategy
CHUNKING_STRATEGY_PARENT_CHILD: ChunkingStrategy
MIGRATION_STATE_UNSPECIFIED: MigrationState
MIGRATION_STATE_RUNNING: MigrationState
MIGRATION_STATE_COMPLETED: MigrationState
MIGRATION_STATE_FAILED: MigrationState
DOCUMENT_STATUS_UNSPECIFIED: DocumentStatus
DOCUMENT_STATUS_QUEUED: DocumentStatus
DOCUMENT_STATUS_PARSING: DocumentStatus
DOCUMENT_STATUS_CHUNKING: DocumentStatus
DOCUMENT_STATUS_EMBEDDING: DocumentStatus
DOCUMENT_STATUS_INDEXING: DocumentStatus
DOCUMENT_STATUS_GRAPH: DocumentStatus
DOCUMENT_STATUS_READY: DocumentStatus
DOCUMENT_STATUS_FAILED: DocumentStatus
INGESTION_STAGE_UNSPECIFIED: IngestionStage
INGESTION_STAGE_PARSE: IngestionStage
INGESTION_STAGE_CHUNK: IngestionStage
INGESTION_STAGE_EMBED: IngestionStage
INGESTION_STAGE_INDEX: IngestionStage
INGESTION_STAGE_GRAPH: IngestionStage

class ChunkingConfig(_message.Message):
    __slots__ = ("strategy", "chunk_size_tokens", "chunk_overlap_tokens", "parent_size_tokens", "child_size_tokens")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_OVERLAP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARENT_SIZE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHILD_SIZE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    strategy: ChunkingStrategy
    chunk_size_tokens: int
    chunk_overlap_tokens: int
    parent_size_tokens: int
    child_size_tokens: int
    def __init__(self, strategy: _Optional[_Union[ChunkingStrategy, str]] = ..., chunk_size_tokens: _Optional[int] = ..., chunk_overlap_tokens: _Optional[int] = ..., parent_size_tokens: _Optional[int] = ..., child_size_tokens: _Optional[int] = ...) -> None: ...

class EmbeddingMigration(_message.Message):
    __slots__ = ("from_model_id", "to_model_id", "state", "documents_done", "documents_total", "failure_reason", "start_time", "end_time")
    FROM_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    TO_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_DONE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    from_model_id: str
    to_model_id: str
    state: MigrationState
    documents_done: int
    documents_total: int
    failure_reason: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, from_model_id: _Optional[str] = ..., to_model_id: _Optional[str] = ..., state: _Optional[_Union[MigrationState, str]] = ..., documents_done: _Optional[int] = ..., documents_total: _Optional[int] = ..., failure_reason: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class KnowledgeBase(_message.Message):
    __slots__ = ("id", "name", "description", "embedding_model_id", "embedding_dimension", "chunking", "graph_enabled", "language_hint", "document_count", "chunk_count", "size_bytes", "migration", "create_time", "update_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CHUNKING_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_HINT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    description: str
    embedding_model_id: str
    embedding_dimension: int
    chunking: ChunkingConfig
    graph_enabled: bool
    language_hint: str
    document_count: int
    chunk_count: int
    size_bytes: int
    migration: EmbeddingMigration
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., embedding_model_id: _Optional[str] = ..., embedding_dimension: _Optional[int] = ..., chunking: _Optional[_Union[ChunkingConfig, _Mapping]] = ..., graph_enabled: _Optional[bool] = ..., language_hint: _Optional[str] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., migration: _Optional[_Union[EmbeddingMigration, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateKnowledgeBaseRequest(_message.Message):
    __slots__ = ("name", "description", "embedding_model_id", "chunking", "graph_enabled", "language_hint")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKING_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_HINT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    embedding_model_id: str
    chunking: ChunkingConfig
    graph_enabled: bool
    language_hint: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., embedding_model_id: _Optional[str] = ..., chunking: _Optional[_Union[ChunkingConfig, _Mapping]] = ..., graph_enabled: _Optional[bool] = ..., language_hint: _Optional[str] = ...) -> None: ...

class CreateKnowledgeBaseResponse(_message.Message):
    __slots__ = ("knowledge_base",)
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: KnowledgeBase
    def __init__(self, knowledge_base: _Optional[_Union[KnowledgeBase, _Mapping]] = ...) -> None: ...

class GetKnowledgeBaseRequest(_message.Message):
    __slots__ = ("knowledge_base_id",)
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    def __init__(self, knowledge_base_id: _Optional[str] = ...) -> None: ...

class GetKnowledgeBaseResponse(_message.Message):
    __slots__ = ("knowledge_base",)
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: KnowledgeBase
    def __init__(self, knowledge_base: _Optional[_Union[KnowledgeBase, _Mapping]] = ...) -> None: ...

class ListKnowledgeBasesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListKnowledgeBasesResponse(_message.Message):
    __slots__ = ("knowledge_bases", "next_page_token")
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[KnowledgeBase]
    next_page_token: str
    def __init__(self, knowledge_bases: _Optional[_Iterable[_Union[KnowledgeBase, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateKnowledgeBaseRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "name", "description", "embedding_model_id", "chunking", "graph_enabled", "language_hint")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKING_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_HINT_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    name: str
    description: str
    embedding_model_id: str
    chunking: ChunkingConfig
    graph_enabled: bool
    language_hint: str
    def __init__(self, knowledge_base_id: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., embedding_model_id: _Optional[str] = ..., chunking: _Optional[_Union[ChunkingConfig, _Mapping]] = ..., graph_enabled: _Optional[bool] = ..., language_hint: _Optional[str] = ...) -> None: ...

class UpdateKnowledgeBaseResponse(_message.Message):
    __slots__ = ("knowledge_base",)
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: KnowledgeBase
    def __init__(self, knowledge_base: _Optional[_Union[KnowledgeBase, _Mapping]] = ...) -> None: ...

class DeleteKnowledgeBaseRequest(_message.Message):
    __slots__ = ("knowledge_base_id",)
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    def __init__(self, knowledge_base_id: _Optional[str] = ...) -> None: ...

class DeleteKnowledgeBaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StageFailure(_message.Message):
    __slots__ = ("stage", "code", "reason", "attempts", "time")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    stage: IngestionStage
    code: str
    reason: str
    attempts: int
    time: _timestamp_pb2.Timestamp
    def __init__(self, stage: _Optional[_Union[IngestionStage, str]] = ..., code: _Optional[str] = ..., reason: _Optional[str] = ..., attempts: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DocumentProgress(_message.Message):
    __slots__ = ("document_id", "knowledge_base_id", "status", "percent", "pages_parsed", "pages_total", "chunks_total", "chunks_embedded", "chunks_indexed", "chunks_graphed", "eta", "failure", "update_time")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    PAGES_PARSED_FIELD_NUMBER: _ClassVar[int]
    PAGES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_EMBEDDED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_INDEXED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_GRAPHED_FIELD_NUMBER: _ClassVar[int]
    ETA_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    knowledge_base_id: str
    status: DocumentStatus
    percent: int
    pages_parsed: int
    pages_total: int
    chunks_total: int
    chunks_embedded: int
    chunks_indexed: int
    chunks_graphed: int
    eta: _duration_pb2.Duration
    failure: StageFailure
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, document_id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., status: _Optional[_Union[DocumentStatus, str]] = ..., percent: _Optional[int] = ..., pages_parsed: _Optional[int] = ..., pages_total: _Optional[int] = ..., chunks_total: _Optional[int] = ..., chunks_embedded: _Optional[int] = ..., chunks_indexed: _Optional[int] = ..., chunks_graphed: _Optional[int] = ..., eta: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., failure: _Optional[_Union[StageFailure, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("id", "knowledge_base_id", "file_name", "content_type", "size_bytes", "content_sha256", "status", "failure", "warnings", "progress", "title", "page_count", "chunk_count", "language", "metadata", "create_time", "update_time", "ready_time")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    knowledge_base_id: str
    file_name: str
    content_type: str
    size_bytes: int
    content_sha256: str
    status: DocumentStatus
    failure: StageFailure
    warnings: _containers.RepeatedCompositeFieldContainer[StageFailure]
    progress: DocumentProgress
    title: str
    page_count: int
    chunk_count: int
    language: str
    metadata: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    ready_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ..., content_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., content_sha256: _Optional[str] = ..., status: _Optional[_Union[DocumentStatus, str]] = ..., failure: _Optional[_Union[StageFailure, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[StageFailure, _Mapping]]] = ..., progress: _Optional[_Union[DocumentProgress, _Mapping]] = ..., title: _Optional[str] = ..., page_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., language: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ready_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetUploadPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SupportedFileType(_message.Message):
    __slots__ = ("extension", "content_types", "missing_components")
    EXTENSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    MISSING_COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    extension: str
    content_types: _containers.RepeatedScalarFieldContainer[str]
    missing_components: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extension: _Optional[str] = ..., content_types: _Optional[_Iterable[str]] = ..., missing_components: _Optional[_Iterable[str]] = ...) -> None: ...

class GetUploadPolicyResponse(_message.Message):
    __slots__ = ("max_file_size_bytes", "file_types", "recommended_chunk_size_bytes", "max_files_per_upload", "batch_max_documents")
    MAX_FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILE_TYPES_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDED_CHUNK_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_FILES_PER_UPLOAD_FIELD_NUMBER: _ClassVar[int]
    BATCH_MAX_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    max_file_size_bytes: int
    file_types: _containers.RepeatedCompositeFieldContainer[SupportedFileType]
    recommended_chunk_size_bytes: int
    max_files_per_upload: int
    batch_max_documents: int
    def __init__(self, max_file_size_bytes: _Optional[int] = ..., file_types: _Optional[_Iterable[_Union[SupportedFileType, _Mapping]]] = ..., recommended_chunk_size_bytes: _Optional[int] = ..., max_files_per_upload: _Optional[int] = ..., batch_max_documents: _Optional[int] = ...) -> None: ...

class UploadHeader(_message.Message):
    __slots__ = ("knowledge_base_id", "file_name", "content_type", "declared_size_bytes", "content_sha256", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DECLARED_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    file_name: str
    content_type: str
    declared_size_bytes: int
    content_sha256: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ..., content_type: _Optional[str] = ..., declared_size_bytes: _Optional[int] = ..., content_sha256: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UploadDocumentRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadDocumentResponse(_message.Message):
    __slots__ = ("document", "duplicate")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    document: Document
    duplicate: bool
    def __init__(self, document: _Optional[_Union[Document, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class UploadDocumentsRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadError(_message.Message):
    __slots__ = ("code", "message", "field")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    field: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class UploadResult(_message.Message):
    __slots__ = ("file_name", "document", "duplicate", "error")
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    file_name: str
    document: Document
    duplicate: bool
    error: UploadError
    def __init__(self, file_name: _Optional[str] = ..., document: _Optional[_Union[Document, _Mapping]] = ..., duplicate: _Optional[bool] = ..., error: _Optional[_Union[UploadError, _Mapping]] = ...) -> None: ...

class UploadDocumentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[UploadResult]
    def __init__(self, results: _Optional[_Iterable[_Union[UploadResult, _Mapping]]] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("document_id",)
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    def __init__(self, document_id: _Optional[str] = ...) -> None: ...

class GetDocumentResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: Document
    def __init__(self, document: _Optional[_Union[Document, _Mapping]] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("knowledge_base_id", "statuses", "page_size", "page_token")
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_id: str
    statuses: _containers.RepeatedScalarFieldContainer[DocumentStatus]
    page_size: int
    page_token: str
    def __init__(self, knowledge_base_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[DocumentStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    next_page_token: str
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("document_id",)
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    def __init__(self, document_id: _Optional[str] = ...) -> None: ...

class DeleteDocumentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReingestDocumentRequest(_message.Message):
    __slots__ = ("document_id",)
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    def __init__(self, document_id: _Optional[str] = ...) -> None: ...

class ReingestDocumentResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: Document
    def __init__(self, document: _Optional[_Union[Document, _Mapping]] = ...) -> None: ...

class WatchDocumentProgressRequest(_message.Message):
    __slots__ = ("documents", "knowledge_base_id")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    documents: DocumentIdList
    knowledge_base_id: str
    def __init__(self, documents: _Optional[_Union[DocumentIdList, _Mapping]] = ..., knowledge_base_id: _Optional[str] = ...) -> None: ...

class DocumentIdList(_message.Message):
    __slots__ = ("document_ids",)
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, document_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchDocumentProgressResponse(_message.Message):
    __slots__ = ("progress",)
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    progress: DocumentProgress
    def __init__(self, progress: _Optional[_Union[DocumentProgress, _Mapping]] = ...) -> None: ...
