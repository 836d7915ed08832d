"""Event models: subjects follow the naming rule and payloads enforce their limits."""

import re

import pytest
from pydantic import ValidationError

from knowsphere_contracts.events import (
    MAX_MESSAGE_CHARS,
    ChatRequested,
    ChatTurnEvent,
    DocumentsFinished,
    DocumentsProgress,
    Event,
    TurnEventKind,
    tenant_of_subject,
)

SUBJECT = re.compile(r"^ks\.[a-z]+(\.[a-z_]+)+\.v[0-9]+$")
EVENTS = Event.__subclasses__()


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.__name__)
def test_subjects_follow_ks_domain_event_version(event):
    assert SUBJECT.match(event.subject), event.subject


def test_subjects_are_unique():
    subjects = [e.subject for e in EVENTS]
    assert len(subjects) == len(set(subjects))


def test_chat_request_limits_are_enforced_with_the_field_named():
    with pytest.raises(ValidationError) as raised:
        ChatRequested(turn_id="t1", message="x" * (MAX_MESSAGE_CHARS + 1))
    assert raised.value.errors()[0]["loc"] == ("message",)
    with pytest.raises(ValidationError):
        ChatRequested(turn_id="t1", message="")
    with pytest.raises(ValidationError):
        ChatRequested(turn_id="t1", message="hi", unexpected="field")


def test_turn_events_round_trip_and_know_their_subject():
    event = ChatTurnEvent(
        turn_id="abc", sequence=3, kind=TurnEventKind.ERROR, error_code="x", error_message="y"
    )
    again = ChatTurnEvent.model_validate_json(event.model_dump_json())
    assert again == event
    assert again.is_final
    assert ChatTurnEvent.subject_for("acme", "abc") == "ks.chat.events.v1.acme.abc"


def test_per_tenant_subjects_never_share_a_token_between_distinct_tenants():
    tenants = ["acme.eu", "acme_eu", "acme:eu", "acme@eu", "acme%2Eeu", "acme*", "acme>", "a b", "ä"]
    subjects = [DocumentsProgress.subject_for(tenant) for tenant in tenants]
    assert len(set(subjects)) == len(tenants)
    for tenant, subject in zip(tenants, subjects, strict=True):
        token = subject.removeprefix(DocumentsProgress.subject + ".")
        assert "." not in token and "*" not in token and ">" not in token and " " not in token
        assert tenant_of_subject(subject, DocumentsProgress.subject) == tenant
    turn = ChatTurnEvent.subject_for("acme.eu", "t.1")
    assert turn == "ks.chat.events.v1.acme%2Eeu.t%2E1"
    assert tenant_of_subject(turn, ChatTurnEvent.subject) == "acme.eu"
    assert tenant_of_subject("ks.chat.events.v1", ChatTurnEvent.subject) is None
    assert DocumentsFinished.subject_for("acme") == "ks.ingestion.documents.finished.v1.acme"
