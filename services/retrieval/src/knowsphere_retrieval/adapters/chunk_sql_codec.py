"""Chunk-store records to and from their rows: what may be stored, and the columns stored encoded.

Every field is its same-named column (``row_from`` / ``record_from_row``) except the ones written here:
heading paths, metadata and stored models as JSON text with sorted keys (an unchanged value stays the
same text, so an upsert can tell it did not change), ``graph_enabled`` as an integer, and the chunk's
index time, which is the store's clock rather than the chunk's.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from knowsphere_retrieval.adapters.chunk_sql_tables import chunk_table, document_table, kb_config_table
from knowsphere_retrieval.domain.grep import GrepCandidate
from knowsphere_retrieval.domain.ports import DocumentMetadata, KnowledgeBaseConfig, StoredChunk
from knowsphere_sqlstore import AnyRow, record_from_row, row_from


def to_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# --- what may be stored --------------------------------------------------------------------------


def check_text(field_name: str, owner: str, value: str) -> None:
    # PostgreSQL text cannot hold NUL; refusing it everywhere keeps both backends alike.
    if "\x00" in value:
        raise ValueError(f"{field_name} of {owner} contains a NUL character, which cannot be stored")


def check_chunk(chunk: StoredChunk) -> None:
    """ValueError naming the chunk and field for a missing id, tenant, knowledge base or document, a
    negative position, or a NUL character in text."""
    owner = f"chunk {chunk.chunk_id!r}"
    for name in ("chunk_id", "tenant_id", "knowledge_base_id", "document_id"):
        if not getattr(chunk, name):
            raise ValueError(f"{name} of {owner} must not be empty")
    if chunk.position < 0:
        raise ValueError(f"position of {owner} must not be negative (got {chunk.position})")
    for name in ("text", "file_name", "parent_id", "ingest_run_id"):
        check_text(name, owner, getattr(chunk, name))
    for heading in chunk.heading_path:
        check_text("heading_path", owner, heading)
    for key, value in chunk.metadata.items():
        check_text("metadata", owner, key + value)


def check_document_info(info: DocumentMetadata) -> None:
    """ValueError naming the field for a missing key, or a NUL character in text."""
    for name in ("tenant_id", "knowledge_base_id", "document_id"):
        if not getattr(info, name):
            raise ValueError(f"{name} of the document info must not be empty")
    owner = f"document {info.document_id!r}"
    for name in ("file_name", "title", "content_type", "language"):
        check_text(name, owner, getattr(info, name))
    for key, value in info.metadata.items():
        check_text("metadata", owner, key + value)


# --- records ↔ rows ------------------------------------------------------------------------------


def chunk_row(chunk: StoredChunk, now: datetime) -> dict[str, Any]:
    return row_from(
        chunk_table,
        chunk,
        heading_path=to_json(list(chunk.heading_path)),
        metadata_json=to_json(chunk.metadata),
        index_time=now,
    )


def chunk_from_row(row: AnyRow) -> StoredChunk:
    return record_from_row(
        StoredChunk,
        row,
        heading_path=tuple(json.loads(row.heading_path)),
        metadata=dict(json.loads(row.metadata_json)),
    )


def document_row(info: DocumentMetadata) -> dict[str, Any]:
    return row_from(document_table, info, metadata_json=to_json(info.metadata))


def document_from_row(row: AnyRow) -> DocumentMetadata:
    return record_from_row(DocumentMetadata, row, metadata=dict(json.loads(row.metadata_json)))


def kb_config_row(config: KnowledgeBaseConfig, now: datetime) -> dict[str, Any]:
    return row_from(
        kb_config_table,
        config,
        graph_enabled=int(config.graph_enabled),
        stored_models_json=to_json(dict(config.stored_models)),
        update_time=now,
    )


def kb_config_from_row(row: AnyRow) -> KnowledgeBaseConfig:
    return record_from_row(
        KnowledgeBaseConfig,
        row,
        graph_enabled=bool(row.graph_enabled),
        stored_models=tuple(sorted(json.loads(row.stored_models_json).items())),
    )


def candidate_from_row(row: AnyRow) -> GrepCandidate:
    return record_from_row(GrepCandidate, row, heading_path=_heading_path(row.heading_path))


@functools.lru_cache(maxsize=1024)
def _heading_path(encoded: str) -> tuple[str, ...]:
    # Chunks of a section share one heading path: a grep over thousands decodes each once.
    return tuple(json.loads(encoded))


@dataclass(frozen=True)
class DocumentChunks:
    """What the chunks table says about one document (an aggregate row of the same names); the
    defaults are a document without chunks."""

    document_id: str
    knowledge_base_id: str = ""
    file_name: str = ""
    chunk_count: int = 0
    parent_count: int = 0
    last_index_time: datetime | None = None  # when a chunk of the document was last written or changed


def document_chunks_from_row(row: AnyRow) -> DocumentChunks:
    return record_from_row(DocumentChunks, row, last_index_time=_utc(row.last_index_time))


def _utc(value: Any) -> datetime | None:
    """An aggregate's datetime as aware UTC (SQLite hands back naive ISO text for max())."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
