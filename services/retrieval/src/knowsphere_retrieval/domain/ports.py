"""The ports of retrieval's domain: the store interfaces and model calls it depends on, and their shapes.

Nothing in the domain imports ``adapters/`` or ``api/``: the domain depends on these interfaces, and
each backend module in ``adapters/`` implements one of them. Every index is multi-tenant: each stored
item carries ``tenant_id`` and ``knowledge_base_id``, and every read and delete filters by the tenant
(and the knowledge bases) it is given, so a query carrying tenant A never returns tenant B's data even
with B's knowledge-base id.

One conformance suite per interface lives in ``tests/contract/`` and runs against every
implementation that can run here (embedded always; servers when their URL variable is set).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from knowsphere.modelhub.v1.modelhub_enums import ModelType

# --- shared shapes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Where a read may look: one tenant, some of its knowledge bases, optionally some documents."""

    tenant_id: str
    knowledge_base_ids: tuple[str, ...]
    document_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    score: float


# --- vectors ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VectorPoint:
    chunk_id: str
    tenant_id: str
    knowledge_base_id: str
    document_id: str
    vector: Sequence[float]


class VectorIndex(Protocol):
    """Cosine-similarity vectors, one collection per (embedding model, dimension).

    ``upsert`` is idempotent by chunk id; a collection's dimension is fixed at creation and a
    vector of another length is rejected with ``ValueError`` naming both lengths.

    Chunk ids are a tenant's own: the same id in two tenants is two points. A collection that does
    not exist reads as empty (search ``[]``, count 0, deletes do nothing); ``upsert`` into one
    raises ``KeyError`` — call ``ensure_collection`` first. A scope with no knowledge bases finds
    nothing.
    """

    async def ensure_collection(self, collection: str, dimension: int) -> None: ...

    async def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None: ...

    async def search(
        self, collection: str, vector: Sequence[float], scope: Scope, limit: int
    ) -> list[Hit]: ...

    async def delete_chunks(self, collection: str, tenant_id: str, chunk_ids: Sequence[str]) -> None: ...

    async def delete_document(
        self, collection: str, tenant_id: str, knowledge_base_id: str, document_id: str
    ) -> None: ...

    async def delete_knowledge_base(
        self, collection: str, tenant_id: str, knowledge_base_id: str
    ) -> None: ...

    async def count(self, collection: str, tenant_id: str, knowledge_base_id: str) -> int: ...

    async def collections(self) -> list[str]: ...

    async def drop_collection(self, collection: str) -> None: ...

    async def close(self) -> None: ...


# --- lexical (BM25) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LexicalDoc:
    chunk_id: str
    tenant_id: str
    knowledge_base_id: str
    document_id: str
    text: str
    title: str = ""  # file name / heading path, indexed with a lower weight


class LexicalIndex(Protocol):
    """BM25 over chunk text with Chinese word segmentation, English stemming, and exact identifiers.

    Part numbers, error codes and names such as 上海交通大学 are findable whole as well as by their
    segments. ``upsert`` is idempotent by chunk id (replace).
    """

    async def upsert(self, docs: Sequence[LexicalDoc]) -> None: ...

    async def search(self, query: str, scope: Scope, limit: int) -> list[Hit]: ...

    async def delete_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> None: ...

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> None: ...

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> None: ...

    async def count(self, tenant_id: str, knowledge_base_id: str) -> int: ...

    async def close(self) -> None: ...


# --- graph --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphEntity:
    name: str
    type: str = ""
    description: str = ""
    source_chunk_ids: tuple[str, ...] = ()
    knowledge_base_id: str = ""  # set on what a read returns; ignored by upsert


@dataclass(frozen=True)
class GraphRelation:
    source: str
    target: str
    type: str
    description: str = ""
    source_chunk_ids: tuple[str, ...] = ()
    knowledge_base_id: str = ""  # set on what a read returns; ignored by upsert


@dataclass(frozen=True)
class Neighbourhood:
    entities: list[GraphEntity]
    relations: list[GraphRelation]


class GraphStore(Protocol):
    """Entities and relations per knowledge base, each remembering the chunks that support it.

    Queries come only from parameterised templates; no user-supplied Cypher ever runs. Writes are
    idempotent (MERGE).
    """

    async def upsert(
        self,
        tenant_id: str,
        knowledge_base_id: str,
        document_id: str,
        entities: Sequence[GraphEntity],
        relations: Sequence[GraphRelation],
    ) -> None: ...

    async def find_entities(self, scope: Scope, name: str, limit: int) -> list[GraphEntity]: ...

    async def neighbourhood(self, scope: Scope, entity_name: str, hops: int, limit: int) -> Neighbourhood: ...

    async def delete_chunks(self, tenant_id: str, knowledge_base_id: str, chunk_ids: Sequence[str]) -> None:
        """Forget these chunks as support; drop entities and relations no chunk supports any more."""
        ...

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> None: ...

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> None: ...

    async def close(self) -> None: ...


# --- chunk store --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredChunk:
    chunk_id: str
    tenant_id: str
    knowledge_base_id: str
    document_id: str
    file_name: str
    text: str
    parent_id: str
    position: int
    heading_path: tuple[str, ...] = ()
    page: int = 0
    metadata: dict[str, str] = field(default_factory=dict)
    ingest_run_id: str = ""
    token_count: int = 0


@dataclass(frozen=True)
class GrepPlan:
    """A validated grep request (:func:`knowsphere_retrieval.domain.grep.plan_grep`): compiled pattern
    and effective limits."""

    pattern: str
    ignore_case: bool
    context_chars: int
    max_matches: int
    time_budget_seconds: float
    page_size: int
    # Every match contains this substring (case-sensitively); "" when none could be proven.
    required_literal: str
    regex: Any = field(repr=False, compare=False)


@dataclass(frozen=True)
class GrepMatch:
    """One regex match in a chunk; ``start``/``end`` are offsets in the chunk text, in code points."""

    chunk_id: str
    document_id: str
    start: int
    end: int
    match: str
    before: str
    after: str
    knowledge_base_id: str = ""
    file_name: str = ""
    position: int = 0
    page: int = 0
    heading_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class GrepResult:
    """Matches in reading order (knowledge base, document, position) and why the scan stopped."""

    matches: list[GrepMatch]
    truncated: bool = False  # more matches exist than the plan's max_matches
    timed_out: bool = False  # the time limit stopped the scan; matches are partial
    scanned_chunk_count: int = 0


@dataclass(frozen=True)
class DocumentMetadata:
    """Document-level metadata pushed by ingestion (PutDocumentInfo); replaced whole on each push."""

    tenant_id: str
    knowledge_base_id: str
    document_id: str
    file_name: str = ""
    title: str = ""
    content_type: str = ""
    size_bytes: int = 0
    page_count: int = 0
    language: str = ""
    status: int = 0  # knowsphere.retrieval.v1.DocumentStatus value
    create_time: datetime | None = None  # timezone-aware
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DocumentInfo:
    """What the chunk store knows of a document: the pushed metadata (if any) and what is stored.

    ``knowledge_base_id`` and ``file_name`` come from the metadata, else from the chunks.
    """

    document_id: str
    knowledge_base_id: str
    file_name: str
    metadata: DocumentMetadata | None
    chunk_count: int
    parent_count: int
    last_index_time: datetime | None  # when a chunk of the document was last written or changed


@dataclass(frozen=True)
class KnowledgeBaseCounts:
    document_count: int  # documents with at least one chunk
    chunk_count: int
    parent_count: int


@dataclass(frozen=True)
class KnowledgeBaseConfig:
    """Index settings of one knowledge base: which embedding model its queries use, and more."""

    tenant_id: str
    knowledge_base_id: str
    embedding_model_id: str
    embedding_dimension: int
    language_hint: str = ""
    graph_enabled: bool = False
    stored_models: tuple[tuple[str, int], ...] = ()  # (model id, dimension) with vectors stored
    update_time: datetime | None = None


class ChunkStore(Protocol):
    """Full text of chunks and parent passages, with document metadata; the source of truth.

    Parents are stored once per (tenant, parent id). Every read and delete is tenant-scoped: another
    tenant's chunk, document or knowledge-base id behaves exactly like an unknown one. Deletes return
    the chunk ids they removed so the caller can remove them from the vector and lexical indexes.
    """

    async def put_chunks(self, chunks: Sequence[StoredChunk], parents: dict[str, str]) -> None:
        """Upsert by (tenant, chunk id), all or nothing; re-sending the same batch changes nothing."""
        ...

    async def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        """The known chunks among ``chunk_ids``, in request order, each once; unknown ids are skipped."""
        ...

    async def get_parents(self, tenant_id: str, parent_ids: Sequence[str]) -> dict[str, str]: ...

    async def neighbours(
        self, tenant_id: str, document_id: str, first_position: int, last_position: int
    ) -> list[StoredChunk]:
        """Chunks of the document with first_position <= position <= last_position, in reading order."""
        ...

    async def grep(self, scope: Scope, plan: GrepPlan) -> GrepResult:
        """Run a validated plan (:func:`knowsphere_retrieval.domain.grep.plan_grep`) over the scope."""
        ...

    async def document_chunk_ids(self, tenant_id: str, document_id: str) -> list[str]: ...

    async def prune_document(
        self, tenant_id: str, knowledge_base_id: str, document_id: str, keep_ingest_run_id: str
    ) -> list[str]:
        """Delete the document's chunks written by any other ingestion run; returns their ids."""
        ...

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> list[str]:
        """Delete the document's chunks, orphaned parents and document info; returns the chunk ids."""
        ...

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> list[str]: ...

    async def put_document_info(self, info: DocumentMetadata) -> None: ...

    async def put_document_infos(self, infos: Sequence[DocumentMetadata]) -> None:
        """Several documents' metadata in one transaction."""
        ...

    async def get_document_info(self, tenant_id: str, document_ids: Sequence[str]) -> list[DocumentInfo]:
        """Info of the documents that have metadata or chunks, in request order; others are skipped."""
        ...

    async def put_kb_config(self, config: KnowledgeBaseConfig) -> None: ...

    async def get_kb_configs(
        self, tenant_id: str, knowledge_base_ids: Sequence[str]
    ) -> list[KnowledgeBaseConfig]: ...

    async def delete_kb_config(self, tenant_id: str, knowledge_base_id: str) -> None: ...

    async def knowledge_base_counts(
        self, tenant_id: str, knowledge_base_ids: Sequence[str]
    ) -> dict[str, KnowledgeBaseCounts]: ...

    async def open(self) -> None:
        """Connect and create what is missing; called once at start-up, before any other call."""
        ...

    async def close(self) -> None: ...


# --- models ---------------------------------------------------------------------------------------


class QueryModels(Protocol):
    """The model calls a search makes; ``knowsphere_clients.ModelHubClient`` is the implementation.

    The tenant is the caller's bound identity. A call that fails raises
    ``knowsphere_clients.errors.ServiceError``; ``knowsphere_clients.modelhub.is_model_missing`` tells
    "no usable model of that type is configured" from a failure.
    """

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        """The query vector of ``query`` (cached per tenant by the client)."""
        ...

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], *, top_n: int = 0
    ) -> list[float]:
        """A relevance score per document, in the order given; the tenant's default model when empty."""
        ...

    async def has_default(self, model_type: ModelType) -> bool:
        """Whether the tenant has a default model of the type (cached per tenant by the client)."""
        ...

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        purpose: str,
        model_id: str = "",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """The whole text of one chat completion; the tenant's default chat model when none is named."""
        ...

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        """Languages an embedding model reads; () when unknown (cached per tenant by the client)."""
        ...
