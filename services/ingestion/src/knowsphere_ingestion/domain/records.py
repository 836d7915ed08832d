"""Knowledge bases and documents as the ingestion service stores them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from knowsphere_contracts.vocabulary import ChunkingStrategy, DocumentStatus, IngestionStage, MigrationState
from knowsphere_ingestion.domain.chunking import (
    DEFAULT_PARENT_SIZE,
    ChunkingConfig,
    fitted_config,
)

# Share of the overall percentage each stage covers (graph is extra work after the document is usable).
STAGE_SPAN: dict[IngestionStage, tuple[float, float]] = {
    IngestionStage.PARSE: (0.0, 15.0),
    IngestionStage.CHUNK: (15.0, 20.0),
    IngestionStage.EMBED: (20.0, 85.0),
    IngestionStage.INDEX: (85.0, 99.0),
    IngestionStage.GRAPH: (99.0, 100.0),
}


@dataclass(frozen=True)
class ChunkingSettings:
    """A knowledge base's chunking choice; 0 sizes mean the defaults."""

    strategy: ChunkingStrategy = ChunkingStrategy.HEADING
    chunk_size_tokens: int = 0
    chunk_overlap_tokens: int = 0
    parent_size_tokens: int = 0
    child_size_tokens: int = 0

    def __post_init__(self) -> None:
        # The one place a stored strategy word becomes the vocabulary's member; rows written before the
        # vocabulary was shared say "headings" for the heading strategy.
        if not isinstance(self.strategy, ChunkingStrategy):
            strategy = "heading" if self.strategy == "headings" else self.strategy
            object.__setattr__(self, "strategy", ChunkingStrategy.parse(strategy))

    def to_config(self, model_window_tokens: int = 0) -> ChunkingConfig:
        """The chunker's configuration. Sizes left at 0 take the defaults fitted to the input window of
        the knowledge base's embedding model (``model_window_tokens``; 0 when unknown), so that what is
        embedded is embedded whole."""
        fitted = fitted_config(model_window_tokens, self.strategy)
        if self.strategy == ChunkingStrategy.PARENT_CHILD:
            return ChunkingConfig(
                strategy=self.strategy,
                child_size=self.child_size_tokens or fitted.child_size,
                child_overlap=self.chunk_overlap_tokens or fitted.child_overlap,
                parent_size=self.parent_size_tokens or DEFAULT_PARENT_SIZE,
            )
        return ChunkingConfig(
            strategy=self.strategy,
            heading_max_size=self.chunk_size_tokens or fitted.heading_max_size,
            child_overlap=self.chunk_overlap_tokens or fitted.child_overlap,
        )


@dataclass(frozen=True)
class Migration:
    from_model_id: str
    to_model_id: str
    state: MigrationState
    to_dimension: int = 0
    documents_done: int = 0
    documents_total: int = 0
    failure_reason: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None


@dataclass(frozen=True)
class KnowledgeBase:
    id: str
    tenant_id: str
    name: str
    description: str
    embedding_model_id: str
    embedding_dimension: int
    chunking: ChunkingSettings
    graph_enabled: bool
    language_hint: str
    create_time: datetime
    update_time: datetime
    migration: Migration | None = None
    document_count: int = 0
    chunk_count: int = 0
    size_bytes: int = 0


@dataclass(frozen=True)
class Failure:
    stage: IngestionStage | None  # None before the workflow started
    code: str
    reason: str
    attempts: int = 1
    time: datetime | None = None


@dataclass(frozen=True)
class Progress:
    percent: float = 0.0
    pages_parsed: int = 0
    pages_total: int = 0
    chunks_total: int = 0
    chunks_embedded: int = 0
    chunks_indexed: int = 0
    chunks_graphed: int = 0
    eta_seconds: float | None = None


@dataclass(frozen=True)
class Document:
    id: str
    tenant_id: str
    knowledge_base_id: str
    file_name: str
    content_type: str
    size_bytes: int
    content_sha256: str
    blob_key: str
    status: DocumentStatus
    create_time: datetime
    update_time: datetime
    ingest_run_id: str = ""
    failure: Failure | None = None
    warnings: tuple[Failure, ...] = ()
    progress: Progress = field(default_factory=Progress)
    title: str = ""
    page_count: int = 0
    chunk_count: int = 0
    language: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    ready_time: datetime | None = None
