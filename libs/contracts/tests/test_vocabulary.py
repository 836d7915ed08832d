"""The shared vocabulary: enums generated from the protos, the words around them, the conversions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.convert import message_from, record_from
from knowsphere_contracts.vocabulary import (
    IN_PROGRESS_STATUSES,
    STAGE_STATUS,
    TERMINAL_STATUSES,
    DocumentStatus,
    IngestionStage,
    entity_key,
    normalise_entity_name,
    pipeline_position,
)


def test_every_proto_status_is_a_member_with_its_number() -> None:
    names = [v.name for v in ipb.DocumentStatus.DESCRIPTOR.values if v.number]
    assert [f"DOCUMENT_STATUS_{s.name}" for s in DocumentStatus] == names
    for status in DocumentStatus:
        assert ipb.DocumentStatus.Name(status.to_proto()) == f"DOCUMENT_STATUS_{status.name}"
        assert DocumentStatus.from_number(status.number) is status
    assert DocumentStatus.from_number(0) is None
    assert DocumentStatus.from_number(999) is None  # a newer peer's value


def test_retrievals_mirror_of_the_status_enum_matches_ingestions() -> None:
    mirror = {(v.name, v.number) for v in rpb.DocumentStatus.DESCRIPTOR.values}
    assert mirror == {(v.name, v.number) for v in ipb.DocumentStatus.DESCRIPTOR.values}


def test_statuses_split_into_in_progress_and_terminal_in_pipeline_order() -> None:
    assert set(IN_PROGRESS_STATUSES) | TERMINAL_STATUSES == set(DocumentStatus)
    positions = [pipeline_position(s) for s in IN_PROGRESS_STATUSES]
    assert positions == sorted(positions)
    assert pipeline_position("ready") > pipeline_position("graph")
    assert pipeline_position(DocumentStatus.FAILED) == -1
    assert set(STAGE_STATUS) == set(IngestionStage)


def test_parse_names_the_accepted_values() -> None:
    with pytest.raises(ValueError, match="queued, parsing"):
        DocumentStatus.parse("headings")


def test_entity_names_merge_by_their_normalised_key() -> None:
    assert normalise_entity_name("  Shanghai\u3000Jiao Tong ") == normalise_entity_name("shanghai jiao  TONG")
    with pytest.raises(ValueError, match=r"entities\[0\]\.name must contain"):
        entity_key("entities[0].name", " \t ")
    with pytest.raises(ValueError, match="limit is 512"):
        entity_key("name", "x" * 513)


@dataclass(frozen=True)
class Progress:
    percent: float = 0.0
    chunks_total: int = 0
    eta: float | None = None


@dataclass(frozen=True)
class Doc:
    id: str
    status: DocumentStatus
    file_name: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    create_time: datetime | None = None
    ready_time: datetime | None = None
    progress: Progress = field(default_factory=Progress)


def test_a_record_crosses_to_a_message_and_back_field_by_name() -> None:
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    record = Doc("d1", DocumentStatus.GRAPH, "a.pdf", {"k": "v"}, created, None, Progress(42.6, 7, 1.5))
    message = message_from(ipb.Document, record, title="Title")
    assert message.status == ipb.DOCUMENT_STATUS_GRAPH
    assert message.progress.percent == 43  # an int32 field takes the rounded value
    assert message.progress.eta.ToNanoseconds() == 1_500_000_000
    assert message.title == "Title"
    assert not message.HasField("ready_time")
    back = record_from(Doc, message)
    assert back == Doc("d1", DocumentStatus.GRAPH, "a.pdf", {"k": "v"}, created, None, Progress(43, 7, 1.5))


def test_a_status_given_as_a_word_is_its_member_and_a_wrong_word_names_the_field() -> None:
    assert message_from(ipb.Document, None, status="ready").status == ipb.DOCUMENT_STATUS_READY
    with pytest.raises(
        ValueError, match=r"knowsphere\.ingestion\.v1\.Document\.status: 'done' is not one of"
    ):
        message_from(ipb.Document, None, status="done")


def test_an_override_naming_no_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field titel"):
        message_from(ipb.Document, None, titel="typo")
