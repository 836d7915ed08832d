"""The SQL tables of the chunk store, all keyed by tenant first so that every statement filters by it.

- ``chunks`` (tenant, chunk id) → knowledge base, document, file name, text, parent id, position,
  heading path (JSON), page, metadata (JSON), ingest run id, token count, index time;
- ``parents`` (tenant, parent id) → text, stored once however many chunks share it, removed with the
  last chunk that refers to it;
- ``knowledge_base_configs`` (tenant, knowledge base) → the index settings ingestion pushes;
- ``documents`` (tenant, document id) → the metadata ingestion pushes (PutDocumentInfo). Counts are
  computed from ``chunks`` on read, so they cannot drift.

Columns that hold JSON are text with sorted keys (``chunk_sql_codec`` writes them), so an unchanged
value compares equal and an upsert can leave the row alone.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text

from knowsphere_retrieval.domain.grep import GrepCandidate
from knowsphere_sqlstore import UtcDateTime

metadata = MetaData()

chunk_table = Table(
    "chunks",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("chunk_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), nullable=False),
    Column("document_id", String(), nullable=False),
    Column("file_name", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("parent_id", String(), nullable=False),
    Column("position", Integer, nullable=False),
    Column("heading_path", Text, nullable=False),  # JSON list
    Column("page", Integer, nullable=False),
    Column("metadata_json", Text, nullable=False),  # JSON object, sorted keys
    Column("ingest_run_id", String(), nullable=False),
    Column("token_count", Integer, nullable=False),
    Column("index_time", UtcDateTime, nullable=False),
    # Grep and knowledge-base deletes walk this in reading order; neighbours and document reads use
    # the second.
    Index("ix_chunks_reading", "tenant_id", "knowledge_base_id", "document_id", "position", "chunk_id"),
    Index("ix_chunks_document", "tenant_id", "document_id", "position"),
    Index("ix_chunks_parent", "tenant_id", "parent_id"),
)

parent_table = Table(
    "parents",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("parent_id", String(), primary_key=True),
    Column("text", Text, nullable=False),
)

kb_config_table = Table(
    "knowledge_base_configs",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), primary_key=True),
    Column("embedding_model_id", String(), nullable=False),
    Column("embedding_dimension", Integer, nullable=False),
    Column("language_hint", String(), nullable=False),
    Column("graph_enabled", Integer, nullable=False),
    Column("stored_models_json", Text, nullable=False),  # JSON object: model id -> dimension
    Column("update_time", UtcDateTime, nullable=False),
)

document_table = Table(
    "documents",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("document_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), nullable=False),
    Column("file_name", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("content_type", String(), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("page_count", Integer, nullable=False),
    Column("language", String(), nullable=False),
    Column("status", Integer, nullable=False),
    Column("create_time", UtcDateTime, nullable=True),
    Column("metadata_json", Text, nullable=False),
    Index("ix_documents_knowledge_base", "tenant_id", "knowledge_base_id"),
)

# Chunk columns an upsert may change (all but the key and the index time); when none differs the row
# is left alone and keeps its index time.
CHUNK_CONTENT = tuple(
    column.name for column in chunk_table.columns if not column.primary_key and column.name != "index_time"
)

# What a grep scan reads of each chunk: the columns of a GrepCandidate's fields, and no more.
GREP_COLUMNS = tuple(chunk_table.c[name] for name in GrepCandidate._fields)
