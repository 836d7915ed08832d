"""Ingestion records to and from the store's columns: the JSON of failures, progress and migrations,
vocabulary values as strings, and rows back into typed records.

Only the fields stored in another form are written here; every other field is its same-named column
(``row_from`` / ``record_from_row`` of ``knowsphere_sqlstore``), so a field added to a record and its
table needs no edit in this module.

What goes in may use plain strings of the vocabulary (``"ready"``) or its members; what comes out is
always typed (``DocumentStatus.READY``, ``IngestionStage.PARSE``, ``MigrationState.RUNNING``). A value
outside the vocabulary is refused on the way in with a ``ValueError`` naming the accepted values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage, MigrationState
from knowsphere_ingestion.adapters.store_tables import documents, knowledge_bases
from knowsphere_ingestion.domain.records import (
    ChunkingSettings,
    Document,
    Failure,
    KnowledgeBase,
    Migration,
    Progress,
)
from knowsphere_sqlstore import AnyRow, record_from_row, row_from

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
# A JSON object holds a record's fields by name (``_fields``); reading one back, a key missing from an
# older row takes the field's default.


def _fields(record: Any) -> dict[str, Any]:
    """A flat record's fields by name (``dataclasses.asdict`` without its deep copies: values are
    scalars, written once per status change of every document)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def failure_to_json(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {
        **_fields(failure),
        # "" says "before the workflow started", as rows written before the stage was typed do.
        "stage": "" if failure.stage is None else stage_value(failure.stage),
        "time": (failure.time or now()).isoformat(),
    }


def failure_from_json(data: dict[str, Any] | None) -> Failure | None:
    if not data:
        return None
    stage = data.get("stage") or ""
    return record_from_row(
        Failure,
        data,
        # A stage this build does not know (a newer writer's) reads as "no stage" rather than making
        # the whole document unreadable; the code and reason still say what went wrong.
        stage=IngestionStage(stage) if stage in _KNOWN_STAGES else None,
        time=_optional_time(data.get("time")),
    )


def progress_to_json(progress: Progress) -> dict[str, Any]:
    return _fields(progress)


def progress_from_json(data: dict[str, Any] | None) -> Progress:
    return record_from_row(Progress, data or {})


def migration_to_json(migration: Migration | None) -> dict[str, Any] | None:
    if migration is None:
        return None
    return {
        **_fields(migration),
        "state": MigrationState.parse(migration.state).value,
        "start_time": migration.start_time.isoformat() if migration.start_time else None,
        "end_time": migration.end_time.isoformat() if migration.end_time else None,
    }


def migration_from_json(data: dict[str, Any] | None) -> Migration | None:
    if not data:
        return None
    return record_from_row(
        Migration,
        data,
        state=MigrationState.parse(data["state"]),
        start_time=_optional_time(data.get("start_time")),
        end_time=_optional_time(data.get("end_time")),
    )


def _chunking_to_json(chunking: ChunkingSettings) -> dict[str, Any]:
    return {**_fields(chunking), "strategy": chunking.strategy.value}


def _chunking_from_json(data: dict[str, Any] | None) -> ChunkingSettings:
    # The strategy word becomes its member in ChunkingSettings itself, older rows' words included.
    return record_from_row(ChunkingSettings, data or {})


def _warnings_to_json(warnings: Sequence[Failure]) -> list[dict[str, Any] | None]:
    return [failure_to_json(warning) for warning in warnings]


# --- whole records -------------------------------------------------------------------------------
# The fields stored in another form than the record's, each with its encoder; every other field is
# its same-named column as it is.
_KB_ENCODED: dict[str, Callable[[Any], Any]] = {
    "chunking": _chunking_to_json,
    "migration": migration_to_json,
}
_DOCUMENT_ENCODED: dict[str, Callable[[Any], Any]] = {
    "status": status_value,
    "failure": failure_to_json,
    "warnings": _warnings_to_json,
    "progress": progress_to_json,
}


def _encode(values: dict[str, Any], encoders: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    return {name: encoders[name](value) if name in encoders else value for name, value in values.items()}


def kb_columns(values: dict[str, Any]) -> dict[str, Any]:
    """Knowledge-base fields as column values: chunking and migration become JSON."""
    return _encode(values, _KB_ENCODED)


def document_columns(values: dict[str, Any]) -> dict[str, Any]:
    """Document fields as column values: the status as its string, failures, warnings and progress as
    JSON."""
    return _encode(values, _DOCUMENT_ENCODED)


def _encoded_fields(record: object, encoders: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    return {name: encode(getattr(record, name)) for name, encode in encoders.items()}


def new_kb_row(kb: KnowledgeBase) -> dict[str, Any]:
    return row_from(knowledge_bases, kb, **_encoded_fields(kb, _KB_ENCODED))


def new_document_row(document: Document) -> dict[str, Any]:
    """The row of a document just uploaded, with no stage time yet."""
    return row_from(
        documents,
        document,
        **_encoded_fields(document, _DOCUMENT_ENCODED),
        stage_seconds={},
        deleting=False,
        rank=document.create_time.timestamp(),
    )


def kb_from_row(row: AnyRow, counts: tuple[int, int, int] = NO_COUNTS) -> KnowledgeBase:
    return record_from_row(
        KnowledgeBase,
        row,
        chunking=_chunking_from_json(row.chunking),
        migration=migration_from_json(row.migration),
        document_count=counts[0],
        chunk_count=counts[1],
        size_bytes=counts[2],
    )


def document_from_row(row: AnyRow) -> Document:
    return record_from_row(
        Document,
        row,
        status=DocumentStatus.parse(row.status),
        failure=failure_from_json(row.failure),
        warnings=tuple(f for f in (failure_from_json(w) for w in row.warnings or []) if f is not None),
        progress=progress_from_json(row.progress),
    )
