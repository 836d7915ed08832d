"""Ingestion records to and from the store's columns: the JSON of failures, progress and migrations,
vocabulary values as strings, and rows back into typed records.

What goes in may use plain strings of the vocabulary (``"ready"``) or its members; what comes out is
always typed (``DocumentStatus.READY``, ``IngestionStage.PARSE``, ``MigrationState.RUNNING``). A value
outside the vocabulary is refused on the way in with a ``ValueError`` naming the accepted values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage, MigrationState
from knowsphere_ingestion.domain.records import (
    ChunkingSettings,
    Document,
    Failure,
    KnowledgeBase,
    Migration,
    Progress,
)

NO_COUNTS = (0, 0, 0)  # documents, chunks, bytes of a knowledge base that was not counted
_KNOWN_STAGES = frozenset(stage.value for stage in IngestionStage)


def now() -> datetime:
    return datetime.now(UTC)


# --- vocabulary values ---------------------------------------------------------------------------


def status_value(status: DocumentStatus | str) -> str:
    """The stored form of a status; ValueError for a word outside the vocabulary."""
    return DocumentStatus.parse(status).value


def status_values(statuses: Sequence[DocumentStatus | str]) -> list[str]:
    return [status_value(status) for status in statuses]


def stage_value(stage: IngestionStage | str) -> str:
    return IngestionStage.parse(stage).value


def _optional_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


# --- JSON columns --------------------------------------------------------------------------------


def failure_to_json(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {
        # "" says "before the workflow started", as rows written before the stage was typed do.
        "stage": "" if failure.stage is None else stage_value(failure.stage),
        "code": failure.code,
        "reason": failure.reason,
        "attempts": failure.attempts,
        "time": (failure.time or now()).isoformat(),
    }


def failure_from_json(data: dict[str, Any] | None) -> Failure | None:
    if not data:
        return None
    stage = data.get("stage") or ""
    return Failure(
        # A stage this build does not know (a newer writer's) reads as "no stage" rather than making
        # the whole document unreadable; the code and reason still say what went wrong.
        stage=IngestionStage(stage) if stage in _KNOWN_STAGES else None,
        code=data.get("code", ""),
        reason=data.get("reason", ""),
        attempts=int(data.get("attempts", 1)),
        time=_optional_time(data.get("time")),
    )


def progress_to_json(progress: Progress) -> dict[str, Any]:
    return {
        "percent": progress.percent,
        "pages_parsed": progress.pages_parsed,
        "pages_total": progress.pages_total,
        "chunks_total": progress.chunks_total,
        "chunks_embedded": progress.chunks_embedded,
        "chunks_indexed": progress.chunks_indexed,
        "chunks_graphed": progress.chunks_graphed,
        "eta_seconds": progress.eta_seconds,
    }


def progress_from_json(data: dict[str, Any] | None) -> Progress:
    data = data or {}
    return Progress(
        percent=float(data.get("percent", 0.0)),
        pages_parsed=int(data.get("pages_parsed", 0)),
        pages_total=int(data.get("pages_total", 0)),
        chunks_total=int(data.get("chunks_total", 0)),
        chunks_embedded=int(data.get("chunks_embedded", 0)),
        chunks_indexed=int(data.get("chunks_indexed", 0)),
        chunks_graphed=int(data.get("chunks_graphed", 0)),
        eta_seconds=data.get("eta_seconds"),
    )


def migration_to_json(migration: Migration | None) -> dict[str, Any] | None:
    if migration is None:
        return None
    return {
        "from_model_id": migration.from_model_id,
        "to_model_id": migration.to_model_id,
        "to_dimension": migration.to_dimension,
        "state": MigrationState.parse(migration.state).value,
        "documents_done": migration.documents_done,
        "documents_total": migration.documents_total,
        "failure_reason": migration.failure_reason,
        "start_time": migration.start_time.isoformat() if migration.start_time else None,
        "end_time": migration.end_time.isoformat() if migration.end_time else None,
    }


def migration_from_json(data: dict[str, Any] | None) -> Migration | None:
    if not data:
        return None
    return Migration(
        from_model_id=data["from_model_id"],
        to_model_id=data["to_model_id"],
        to_dimension=int(data.get("to_dimension", 0)),
        state=MigrationState.parse(data["state"]),
        documents_done=int(data.get("documents_done", 0)),
        documents_total=int(data.get("documents_total", 0)),
        failure_reason=data.get("failure_reason", ""),
        start_time=_optional_time(data.get("start_time")),
        end_time=_optional_time(data.get("end_time")),
    )


# --- whole records -------------------------------------------------------------------------------


def kb_columns(values: dict[str, Any]) -> dict[str, Any]:
    """Knowledge-base fields as column values: chunking and migration become JSON."""
    out = dict(values)
    if isinstance(out.get("chunking"), ChunkingSettings):
        out["chunking"] = out["chunking"].as_dict()
    if "migration" in out:
        out["migration"] = migration_to_json(out["migration"])
    return out


def document_columns(values: dict[str, Any]) -> dict[str, Any]:
    """Document fields as column values: the status as its string, failures, warnings and progress as
    JSON."""
    out = dict(values)
    if "status" in out:
        out["status"] = status_value(out["status"])
    if "failure" in out:
        out["failure"] = failure_to_json(out["failure"])
    if "warnings" in out:
        out["warnings"] = [failure_to_json(w) for w in out["warnings"]]
    if "progress" in out:
        out["progress"] = progress_to_json(out["progress"])
    return out


def new_kb_row(kb: KnowledgeBase) -> dict[str, Any]:
    return {
        "id": kb.id,
        "tenant_id": kb.tenant_id,
        "name": kb.name,
        "description": kb.description,
        "embedding_model_id": kb.embedding_model_id,
        "embedding_dimension": kb.embedding_dimension,
        "chunking": kb.chunking.as_dict(),
        "graph_enabled": kb.graph_enabled,
        "language_hint": kb.language_hint,
        "migration": None,
        "create_time": kb.create_time,
        "update_time": kb.update_time,
    }


def new_document_row(document: Document) -> dict[str, Any]:
    """The row of a document just uploaded: nothing parsed, no failure, no stage time yet."""
    return {
        "id": document.id,
        "tenant_id": document.tenant_id,
        "knowledge_base_id": document.knowledge_base_id,
        "file_name": document.file_name,
        "content_type": document.content_type,
        "size_bytes": document.size_bytes,
        "content_sha256": document.content_sha256,
        "blob_key": document.blob_key,
        "status": status_value(document.status),
        "ingest_run_id": document.ingest_run_id,
        "failure": None,
        "warnings": [],
        "progress": progress_to_json(document.progress),
        "title": "",
        "page_count": 0,
        "chunk_count": 0,
        "language": "",
        "metadata": document.metadata,
        "create_time": document.create_time,
        "update_time": document.update_time,
        "ready_time": None,
        "stage_seconds": {},
        "deleting": False,
        "rank": document.create_time.timestamp(),
    }


def kb_from_row(row: Any, counts: tuple[int, int, int] = NO_COUNTS) -> KnowledgeBase:
    return KnowledgeBase(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        description=row.description,
        embedding_model_id=row.embedding_model_id,
        embedding_dimension=row.embedding_dimension,
        chunking=ChunkingSettings.from_dict(row.chunking or {}),
        graph_enabled=bool(row.graph_enabled),
        language_hint=row.language_hint,
        migration=migration_from_json(row.migration),
        create_time=row.create_time,
        update_time=row.update_time,
        document_count=counts[0],
        chunk_count=counts[1],
        size_bytes=counts[2],
    )


def document_from_row(row: Any) -> Document:
    return Document(
        id=row.id,
        tenant_id=row.tenant_id,
        knowledge_base_id=row.knowledge_base_id,
        file_name=row.file_name,
        content_type=row.content_type,
        size_bytes=row.size_bytes,
        content_sha256=row.content_sha256,
        blob_key=row.blob_key,
        status=DocumentStatus.parse(row.status),
        ingest_run_id=row.ingest_run_id,
        failure=failure_from_json(row.failure),
        warnings=tuple(f for f in (failure_from_json(w) for w in row.warnings or []) if f is not None),
        progress=progress_from_json(row.progress),
        title=row.title,
        page_count=row.page_count,
        chunk_count=row.chunk_count,
        language=row.language,
        metadata=dict(row.metadata or {}),
        create_time=row.create_time,
        update_time=row.update_time,
        ready_time=row.ready_time,
    )
