"""What the stages send to retrieval and to the workflow: every field of a chunk, a document and a graph
fact reaches retrieval's message, and a peer's failure becomes a permanent or a retryable one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf.message import Message

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ServiceError,
    Unavailable,
)
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion.domain.chunking import ChunkDraft
from knowsphere_ingestion.domain.graph import ExtractedEntity, ExtractedRelation
from knowsphere_ingestion.domain.records import Document
from knowsphere_ingestion.parsing.errors import ParseErrorCode
from knowsphere_ingestion.stages.errors import FailureCode, from_service, permanent, retryable
from knowsphere_ingestion.stages.retrieval_messages import (
    chunk_message,
    document_message,
    entity_message,
    relation_message,
)
from knowsphere_ingestion.workflows import PERMANENT, failure_details

UPLOADED = datetime(2025, 3, 1, 12, 30, tzinfo=UTC)
DOCUMENT = Document(
    id="doc-1",
    tenant_id="t",
    knowledge_base_id="kb-1",
    file_name="guide.pdf",
    content_type="application/pdf",
    size_bytes=2048,
    content_sha256="ab" * 32,
    blob_key="t/t/kb/kb-1/doc/doc-1/file",
    status=DocumentStatus.INDEXING,
    create_time=UPLOADED,
    update_time=UPLOADED,
    ingest_run_id="run-7",
    title="Guide",
    page_count=12,
    language="en",
    metadata={"team": "docs"},
)
CHUNK = ChunkDraft(
    id="c" * 32,
    text="Install the tool.",
    parent_id="p" * 32,
    parent_text="Install the tool. Then run it.",
    position=3,
    heading_path=("Guide", "Install"),
    page=2,
    token_count=4,
    metadata={"content_kind": "text"},
)


def unset_fields(message: Message) -> list[str]:
    """Fields of ``message`` left at their default: nothing was given for them."""
    return [
        field.name
        for field in message.DESCRIPTOR.fields
        if not (message.HasField(field.name) if field.has_presence else getattr(message, field.name))
    ]


def test_a_chunk_message_carries_every_field_of_the_chunk_and_its_document() -> None:
    message = chunk_message(DOCUMENT, "run-7", CHUNK, [("m-a", [0.5, 0.25]), ("m-b", [1.0])])
    assert unset_fields(message) == []
    assert (message.id, message.text, message.parent_id, message.parent_text) == (
        CHUNK.id,
        CHUNK.text,
        CHUNK.parent_id,
        CHUNK.parent_text,
    )
    assert (message.position, list(message.heading_path), message.page, message.token_count) == (
        3,
        ["Guide", "Install"],
        2,
        4,
    )
    assert (message.document_id, message.knowledge_base_id, message.file_name, message.ingest_run_id) == (
        "doc-1",
        "kb-1",
        "guide.pdf",
        "run-7",
    )
    assert dict(message.metadata) == {"content_kind": "text", "doc.team": "docs"}
    assert [(e.model_id, e.dimension, list(e.values)) for e in message.embeddings] == [
        ("m-a", 2, [0.5, 0.25]),
        ("m-b", 1, [1.0]),
    ]


@pytest.mark.parametrize("status", list(DocumentStatus))
def test_a_document_message_carries_every_field_and_the_status_retrieval_mirrors(
    status: DocumentStatus,
) -> None:
    message = document_message(DOCUMENT, status)
    assert unset_fields(message) == []
    assert rpb.DocumentStatus.Name(message.status) == "DOCUMENT_STATUS_" + status.name
    assert message.document_id == "doc-1" and message.create_time.ToDatetime(tzinfo=UTC) == UPLOADED
    assert (message.title, message.page_count, message.size_bytes, dict(message.metadata)) == (
        "Guide",
        12,
        2048,
        {"team": "docs"},
    )


def test_graph_facts_carry_every_field() -> None:
    entity = entity_message(
        ExtractedEntity("Acme Corp", "organization", "A robot maker.", ("Acme",), ("c1", "c2"))
    )
    relation = relation_message(
        ExtractedRelation("Acme Corp", "Berlin", "based_in", "Based in Berlin.", 0.75, ("c1",))
    )
    assert unset_fields(entity) == [] and unset_fields(relation) == []
    assert (list(entity.aliases), list(entity.source_chunk_ids)) == (["Acme"], ["c1", "c2"])
    assert (relation.source_name, relation.target_name, relation.type, relation.weight) == (
        "Acme Corp",
        "Berlin",
        "based_in",
        0.75,
    )


@pytest.mark.parametrize(
    ("error", "is_permanent"),
    [
        (InvalidArgument("texts: too long"), True),
        (NotFound("model m-a not found"), True),
        (FailedPrecondition("the graph is not enabled"), True),
        (Unavailable("connection refused"), False),
        (DeadlineExceeded("deadline exceeded"), False),
    ],
)
def test_a_peer_failure_is_permanent_only_when_a_retry_cannot_fix_it(
    error: ServiceError, is_permanent: bool
) -> None:
    failure = from_service(error, "embedding with m-a", FailureCode.EMBEDDING_FAILED)
    assert failure.non_retryable is is_permanent
    assert failure.type == (PERMANENT if is_permanent else "embedding_failed")
    code, reason, _ = failure_details(failure)
    assert code == "embedding_failed"
    assert reason == f"embedding with m-a: {error.message}"


def test_stage_failures_carry_their_code_whichever_set_it_comes_from() -> None:
    assert failure_details(permanent(ParseErrorCode.ENCRYPTED, "locked.pdf is encrypted"))[:2] == (
        "encrypted",
        "locked.pdf is encrypted",
    )
    missing = retryable(FailureCode.ARTIFACT_MISSING, "the chunks of this run are missing")
    assert (missing.type, missing.non_retryable) == ("artifact_missing", False)
    assert failure_details(missing)[0] == "artifact_missing"
