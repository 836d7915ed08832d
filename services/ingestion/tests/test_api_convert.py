"""Records as the protos callers read: what crosses as is and what the conversion decides."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_contracts.vocabulary import ChunkingStrategy, DocumentStatus, IngestionStage, MigrationState
from knowsphere_ingestion.api.convert import document_pb, knowledge_base_pb, progress_pb
from knowsphere_ingestion.domain.records import (
    ChunkingSettings,
    Document,
    Failure,
    KnowledgeBase,
    Migration,
    Progress,
)

NOW = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
FAILURE = Failure(IngestionStage.EMBED, "model_unavailable", "modelhub timed out", attempts=3, time=NOW)


def document(status: DocumentStatus, **fields: object) -> Document:
    values: dict[str, object] = {
        "id": "doc-1",
        "tenant_id": "t",
        "knowledge_base_id": "kb-1",
        "file_name": "a.pdf",
        "content_type": "application/pdf",
        "size_bytes": 1234,
        "content_sha256": "ab" * 32,
        "blob_key": "t/kb-1/doc-1/file",
        "status": status,
        "create_time": NOW,
        "update_time": NOW,
        "progress": Progress(percent=41.6, pages_parsed=2, pages_total=4, chunks_total=10, eta_seconds=12.5),
        "failure": FAILURE,
        "warnings": (Failure(IngestionStage.GRAPH, "graph_skipped", "no LLM"),),
        "metadata": {"source": "crm"},
    }
    values.update(fields)
    return Document(**values)  # type: ignore[arg-type]


def test_a_document_in_progress_shows_its_rounded_percent_and_eta_but_no_old_failure() -> None:
    message = document_pb(document(DocumentStatus.EMBEDDING))
    assert message.status == pb.DOCUMENT_STATUS_EMBEDDING
    assert message.progress.status == pb.DOCUMENT_STATUS_EMBEDDING
    assert message.progress.percent == 42
    assert message.progress.eta.ToMilliseconds() == 12_500
    assert message.progress.pages_parsed == 2 and message.progress.chunks_total == 10
    assert message.progress.document_id == "doc-1" and message.progress.knowledge_base_id == "kb-1"
    assert not message.HasField("failure") and not message.progress.HasField("failure")
    assert not message.HasField("ready_time")
    assert message.metadata == {"source": "crm"}
    assert [(w.stage, w.code) for w in message.warnings] == [(pb.INGESTION_STAGE_GRAPH, "graph_skipped")]
    assert message.create_time.ToDatetime(tzinfo=UTC) == NOW


def test_a_failed_document_shows_its_failure_and_no_eta() -> None:
    message = document_pb(document(DocumentStatus.FAILED))
    assert message.failure.stage == pb.INGESTION_STAGE_EMBED
    assert (message.failure.code, message.failure.reason, message.failure.attempts) == (
        "model_unavailable",
        "modelhub timed out",
        3,
    )
    assert message.progress.failure == message.failure
    assert not message.progress.HasField("eta")


def test_a_ready_document_has_no_eta_and_its_ready_time() -> None:
    message = progress_pb(document(DocumentStatus.READY, ready_time=NOW))
    assert message.status == pb.DOCUMENT_STATUS_READY and not message.HasField("eta")
    assert document_pb(document(DocumentStatus.READY, ready_time=NOW)).HasField("ready_time")


def test_a_failure_before_any_stage_has_no_stage() -> None:
    failed = document(DocumentStatus.FAILED, failure=Failure(None, "unsupported", "not a PDF"))
    assert document_pb(failed).failure.stage == pb.INGESTION_STAGE_UNSPECIFIED


def test_a_knowledge_base_carries_its_chunking_and_migration() -> None:
    kb = KnowledgeBase(
        id="kb-1",
        tenant_id="t",
        name="Manuals",
        description="",
        embedding_model_id="m-1",
        embedding_dimension=768,
        chunking=ChunkingSettings(
            ChunkingStrategy.PARENT_CHILD, parent_size_tokens=1024, child_size_tokens=256
        ),
        graph_enabled=True,
        language_hint="de",
        create_time=NOW,
        update_time=NOW,
        migration=Migration("m-1", "m-2", MigrationState.RUNNING, to_dimension=1024, documents_total=7),
        document_count=7,
        chunk_count=70,
        size_bytes=7000,
    )
    message = knowledge_base_pb(kb)
    assert message.chunking.strategy == pb.CHUNKING_STRATEGY_PARENT_CHILD
    assert (message.chunking.parent_size_tokens, message.chunking.child_size_tokens) == (1024, 256)
    assert message.migration.state == pb.MIGRATION_STATE_RUNNING
    assert (message.migration.from_model_id, message.migration.to_model_id) == ("m-1", "m-2")
    assert not message.migration.HasField("end_time")
    assert (message.document_count, message.chunk_count, message.size_bytes) == (7, 70, 7000)
    assert message.graph_enabled and message.language_hint == "de"

    plain = knowledge_base_pb(replace(kb, chunking=ChunkingSettings(), migration=None))
    assert plain.chunking.strategy == pb.CHUNKING_STRATEGY_HEADING
    assert not plain.HasField("migration")
