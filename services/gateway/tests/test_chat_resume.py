"""Resuming a turn's event stream after a dropped connection (``GET /api/v1/chat/turns/{id}/events``),
reading what a real NATS server's ``KS_CHAT_EVENTS`` stream keeps.

What a client notices: with the last sequence it saw (``Last-Event-ID`` or ``after``) it gets every
later event once, the stored ones first and then the live ones, up to the one final event; another
user's turn, or a turn that never was, is a 404.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext

from knowsphere_contracts.events import CHAT_EVENTS_STREAM, ChatTurnEvent, TurnEventKind
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.identity_token import token_headers
from knowsphere_runtime.streams import CHAT_EVENTS, read_subject

OWNER = Identity("t1", "u1")  # the gateway tests' default caller


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[JetStreamContext]:
    client = await nats.connect(nats_url)
    stream = client.jetstream()
    await stream.add_stream(dataclasses.replace(CHAT_EVENTS.config, subjects=list(CHAT_EVENTS.subjects)))
    yield stream
    await client.close()


async def store(js: JetStreamContext, turn_id: str, kinds: list[TurnEventKind], who: Identity) -> None:
    """Stores the events of ``who``'s turn as conversation publishes them (its tenant's subject)."""
    for sequence, kind in enumerate(kinds):
        event = ChatTurnEvent(turn_id=turn_id, sequence=sequence, kind=kind, text=f"e{sequence}")
        await js.publish(
            ChatTurnEvent.subject_for(who.tenant_id, turn_id),
            event.model_dump_json().encode(),
            headers=token_headers(who),
        )


def sequences(text: str) -> list[tuple[str, str]]:
    found = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        found.append((fields["event"], fields.get("id", "")))
    return found


async def app_with(gateway: Any, js: JetStreamContext, events: Fanout[ChatTurnEvent], **context: Any) -> Any:
    return await gateway(
        chat_events=events,
        stored_turn_events=lambda tenant_id, turn_id: read_subject(
            js, CHAT_EVENTS_STREAM, ChatTurnEvent.subject_for(tenant_id, turn_id)
        ),
        **context,
    )


async def test_a_finished_turn_resumes_after_the_last_event_seen(
    gateway: Any, client: Any, js: JetStreamContext
) -> None:
    kinds = [
        TurnEventKind.STARTED,
        TurnEventKind.TEXT_DELTA,
        TurnEventKind.TEXT_DELTA,
        TurnEventKind.COMPLETED,
    ]
    await store(js, "turn-done", kinds, OWNER)
    app = await app_with(gateway, js, Fanout())
    async with client(app) as http:
        by_header = await http.get("/api/v1/chat/turns/turn-done/events", headers={"last-event-id": "1"})
        by_query = await http.get("/api/v1/chat/turns/turn-done/events", params={"after": -1})
    assert by_header.status_code == 200, by_header.text
    assert sequences(by_header.text) == [("text_delta", "2"), ("completed", "3")]
    assert [s for _, s in sequences(by_query.text)] == ["0", "1", "2", "3"]


async def test_a_running_turn_resumes_with_stored_then_live_events_each_once(
    gateway: Any, client: Any, js: JetStreamContext
) -> None:
    await store(js, "turn-live", [TurnEventKind.STARTED, TurnEventKind.TEXT_DELTA], OWNER)
    events: Fanout[ChatTurnEvent] = Fanout()
    app = await app_with(gateway, js, events)

    async def later() -> None:
        while events.watchers == 0:  # noqa: ASYNC110 - the watch has no event to wait on
            await asyncio.sleep(0.01)
        # The live feed repeats an event already stored, then carries the rest of the turn.
        for sequence, kind in [
            (1, TurnEventKind.TEXT_DELTA),
            (2, TurnEventKind.TEXT_DELTA),
            (3, TurnEventKind.COMPLETED),
        ]:
            events.publish(ChatTurnEvent(turn_id="turn-live", sequence=sequence, kind=kind))

    async with client(app) as http:
        feeding = asyncio.create_task(later())
        response = await http.get("/api/v1/chat/turns/turn-live/events", params={"after": 0})
        await feeding
    assert sequences(response.text) == [("text_delta", "1"), ("text_delta", "2"), ("completed", "3")]


async def test_another_users_turn_and_an_unknown_turn_are_not_found(
    gateway: Any, client: Any, js: JetStreamContext
) -> None:
    finished = [TurnEventKind.STARTED, TurnEventKind.COMPLETED]
    await store(js, "turn-theirs", finished, Identity("t2", "u9"))
    await store(js, "turn-colleague", finished, Identity("t1", "u2"))
    app = await app_with(gateway, js, Fanout())
    async with client(app) as http:
        theirs = await http.get("/api/v1/chat/turns/turn-theirs/events")
        colleague = await http.get("/api/v1/chat/turns/turn-colleague/events")
        unknown = await http.get("/api/v1/chat/turns/no-such-turn/events")
    for response in (theirs, colleague, unknown):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    assert "turn-theirs" in theirs.json()["error"]["message"]
