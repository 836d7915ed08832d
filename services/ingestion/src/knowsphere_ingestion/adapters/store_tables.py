"""The SQL tables of the ingestion store: knowledge bases and their documents.

Records that have no query of their own (a document's failure, warnings, progress and stage times, a
knowledge base's chunking and migration) live in JSON columns; ``store_codec`` reads and writes them.
Statuses are stored as their vocabulary string values (``"ready"``), so the rows read the same to any
tool that looks at them.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from knowsphere_sqlstore import UtcDateTime

metadata = MetaData()

knowledge_bases = Table(
    "ingestion_knowledge_bases",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("embedding_model_id", String(128), nullable=False),
    Column("embedding_dimension", Integer, nullable=False),
    Column("chunking", JSON, nullable=False),
    Column("graph_enabled", Boolean, nullable=False, default=False),
    Column("language_hint", String(16), nullable=False, default=""),
    Column("migration", JSON, nullable=True),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "name", name="uq_ingestion_kb_tenant_name"),
)

documents = Table(
    "ingestion_documents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("knowledge_base_id", String(64), nullable=False),
    Column("file_name", String(512), nullable=False),
    Column("content_type", String(256), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("blob_key", String(512), nullable=False),
    Column("status", String(16), nullable=False),
    Column("ingest_run_id", String(64), nullable=False, default=""),
    Column("failure", JSON, nullable=True),
    Column("warnings", JSON, nullable=False),
    Column("progress", JSON, nullable=False),
    Column("title", Text, nullable=False, default=""),
    Column("page_count", Integer, nullable=False, default=0),
    Column("chunk_count", Integer, nullable=False, default=0),
    Column("language", String(16), nullable=False, default=""),
    Column("metadata", JSON, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    Column("ready_time", UtcDateTime, nullable=True),
    Column("stage_seconds", JSON, nullable=False),
    Column("deleting", Boolean, nullable=False, default=False),
    # Newest first: the create time as a float, with the id breaking ties (see list_documents).
    Column("rank", Float, nullable=False, default=0.0),
    UniqueConstraint("tenant_id", "knowledge_base_id", "content_sha256", name="uq_ingestion_doc_content"),
    Index("ix_ingestion_doc_kb_created", "tenant_id", "knowledge_base_id", "create_time"),
)
