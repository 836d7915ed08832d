"""Chat turns through the gateway (``POST /api/v1/chat/turns``) on FastStream's in-memory NATS broker,
with a stand-in for the conversation service that answers each request with scripted events.

What a caller notices: the turn's events stream back in order and the stream ends at the final event;
a turn nobody answers ends with a ``turn_timeout`` error event; two turns at once each see only their
own events; the caller's identity travels with the request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from faststream.nats import NatsBroker, TestNatsBroker

from knowsphere_contracts.events import (
    MAX_IMAGE_REF_TOTAL_CHARS,
    MAX_SESSION_ID_CHARS,
    ChatRequested,
    ChatTurnEvent,
    TurnEventKind,
)
from knowsphere_gateway.api.bus import GatewayBus, build_bus
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.streams import CHAT_REQUESTS

Script = Callable[[ChatRequested], list[ChatTurnEvent]]


def answer_with(*kinds: TurnEventKind) -> Script:
    """Events of the given kinds for the request's turn, numbered from 0; the text says whose turn."""

    def script(request: ChatRequested) -> list[ChatTurnEvent]:
        return [
            ChatTurnEvent(turn_id=request.turn_id, sequence=n, kind=kind, text=request.message)
            for n, kind in enumerate(kinds)
        ]

    return script


@asynccontextmanager
async def bus_with_conversation(
    script: Script | None,
) -> AsyncIterator[tuple[GatewayBus, Fanout[ChatTurnEvent], list[str]]]:
    """The gateway's bus on a test broker, with a conversation stand-in running ``script`` (None: nobody
    answers); yields the bus, its fan-out and the tenants the stand-in saw."""
    broker: NatsBroker = build_broker("nats://unused:4222", client_name="test")
    events: Fanout[ChatTurnEvent] = Fanout()
    bus = build_bus(events)
    broker.include_router(bus.router)
    tenants: list[str] = []
    if script is not None:

        @broker.subscriber(ChatRequested.subject, stream=CHAT_REQUESTS)
        async def conversation(request: ChatRequested) -> None:
            tenants.append(require_identity().tenant_id)
            for event in script(request):
                await broker.publish(
                    event.model_dump(mode="json"),
                    subject=ChatTurnEvent.subject_for(require_identity().tenant_id, event.turn_id),
                )

    async with TestNatsBroker(broker):
        yield bus, events, tenants


def sse_events(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        found.append((fields["event"], fields.get("id", ""), json.loads(fields["data"])))
    return found


async def test_the_turns_events_stream_back_and_the_stream_ends_at_the_final_event(
    gateway: Any, client: Any
) -> None:
    script = answer_with(
        TurnEventKind.STARTED, TurnEventKind.TEXT_DELTA, TurnEventKind.COMPLETED, TurnEventKind.TEXT_DELTA
    )
    async with bus_with_conversation(script) as (bus, events, tenants):
        app = await gateway(bus=bus, chat_events=events)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": "How long is leave?"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    streamed = sse_events(response.text)
    assert [(kind, sequence) for kind, sequence, _ in streamed] == [
        ("started", "0"),
        ("text_delta", "1"),
        ("completed", "2"),  # nothing after the final event
    ]
    assert {data["text"] for _, _, data in streamed} == {"How long is leave?"}
    assert len({data["turn_id"] for _, _, data in streamed}) == 1
    assert tenants == ["t1"]  # the caller's identity travelled with the request
    assert events.watchers == 0  # the request stopped watching


async def test_a_turn_nobody_answers_ends_with_a_turn_timeout_error_event(gateway: Any, client: Any) -> None:
    async with bus_with_conversation(None) as (bus, events, _):
        app = await gateway(bus=bus, chat_events=events, chat_turn_timeout=0.2)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": "anyone?"})
    [(kind, sequence, data)] = sse_events(response.text)
    assert (kind, sequence) == ("error", "0")
    assert data["error_code"] == "turn_timeout" and "0 s" in data["error_message"]
    assert events.watchers == 0


async def test_a_silence_after_some_events_ends_with_a_timeout_numbered_after_them(
    gateway: Any, client: Any
) -> None:
    async with bus_with_conversation(answer_with(TurnEventKind.STARTED)) as (bus, events, _):
        app = await gateway(bus=bus, chat_events=events, chat_turn_timeout=0.2)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": "and then?"})
    assert [(kind, sequence) for kind, sequence, _ in sse_events(response.text)] == [
        ("started", "0"),
        ("error", "1"),
    ]


async def test_an_event_heard_twice_is_passed_on_once(gateway: Any, client: Any) -> None:
    """After a bus outage a late-acknowledged publish is heard again, and a turn delivered again says
    an event once more before its resumption catches up: the client sees each sequence once."""

    def stuttering(request: ChatRequested) -> list[ChatTurnEvent]:
        def event(sequence: int, kind: TurnEventKind, text: str) -> ChatTurnEvent:
            return ChatTurnEvent(turn_id=request.turn_id, sequence=sequence, kind=kind, text=text)

        return [
            event(0, TurnEventKind.STARTED, ""),
            event(1, TurnEventKind.TEXT_DELTA, "Part 1"),
            event(1, TurnEventKind.TEXT_DELTA, "Part 1"),
            event(2, TurnEventKind.TEXT_DELTA, "Part 2"),
            event(1, TurnEventKind.TEXT_DELTA, "Part 1"),
            event(2, TurnEventKind.TEXT_DELTA, "Part 2"),
            event(3, TurnEventKind.COMPLETED, "Part 1Part 2"),
        ]

    async with bus_with_conversation(stuttering) as (bus, events, _):
        app = await gateway(bus=bus, chat_events=events)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": "twice?"})
    streamed = sse_events(response.text)
    assert [(kind, sequence) for kind, sequence, _ in streamed] == [
        ("started", "0"),
        ("text_delta", "1"),
        ("text_delta", "2"),
        ("completed", "3"),
    ]
    assert "".join(data["text"] for kind, _, data in streamed if kind == "text_delta") == "Part 1Part 2"


async def test_a_request_the_bus_will_not_take_ends_with_one_bus_unavailable_event(
    gateway: Any, client: Any
) -> None:
    async with bus_with_conversation(answer_with(TurnEventKind.STARTED)) as (bus, events, tenants):
        sent = 0

        async def refusing(*args: Any, **kwargs: Any) -> None:
            nonlocal sent
            sent += 1
            raise TimeoutError("nats: timeout")

        bus.chat_requests.publish = refusing  # type: ignore[method-assign]
        app = await gateway(bus=bus, chat_events=events, chat_turn_timeout=1.2)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": "anyone?"})
    [(kind, sequence, data)] = sse_events(response.text)
    assert (kind, sequence) == ("error", "0")
    assert data["error_code"] == "bus_unavailable" and "1 s" in data["error_message"]
    assert sent >= 2  # sent again while the wait lasted
    assert tenants == [] and events.watchers == 0


async def test_two_turns_at_once_each_see_only_their_own_events(gateway: Any, client: Any) -> None:
    script = answer_with(TurnEventKind.STARTED, TurnEventKind.ERROR)
    async with bus_with_conversation(script) as (bus, events, _):
        app = await gateway(bus=bus, chat_events=events)
        async with client(app) as http:
            first, second = await asyncio.gather(
                http.post("/api/v1/chat/turns", json={"message": "first"}),
                http.post("/api/v1/chat/turns", json={"message": "second"}),
            )
    for response, message in ((first, "first"), (second, "second")):
        streamed = sse_events(response.text)
        assert [kind for kind, _, _ in streamed] == ["started", "error"]
        assert {data["text"] for _, _, data in streamed} == {message}


async def test_an_empty_message_is_refused_before_anything_is_published(gateway: Any, client: Any) -> None:
    async with bus_with_conversation(answer_with(TurnEventKind.STARTED)) as (bus, events, tenants):
        app = await gateway(bus=bus, chat_events=events)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": ""})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "message"
    assert tenants == []


async def test_a_misspelt_key_or_a_long_session_id_is_refused_before_anything_is_published(
    gateway: Any, client: Any
) -> None:
    async with bus_with_conversation(answer_with(TurnEventKind.STARTED)) as (bus, events, tenants):
        app = await gateway(bus=bus, chat_events=events)
        async with client(app) as http:
            misspelt = await http.post("/api/v1/chat/turns", json={"message": "hi", "sesion_id": "s-1"})
            too_long = await http.post(
                "/api/v1/chat/turns", json={"message": "hi", "session_id": "s" * (MAX_SESSION_ID_CHARS + 1)}
            )
    assert misspelt.status_code == too_long.status_code == 422
    assert misspelt.json()["detail"][0]["loc"] == ["body", "sesion_id"]
    assert too_long.json()["detail"][0]["loc"] == ["body", "session_id"]
    assert tenants == []


async def test_images_too_large_together_are_refused_naming_the_limit(gateway: Any, client: Any) -> None:
    # Each image is within its own limit; together they would not fit in one message on the bus.
    image = "data:image/png;base64," + "A" * (MAX_IMAGE_REF_TOTAL_CHARS // 2)
    async with bus_with_conversation(answer_with(TurnEventKind.STARTED)) as (bus, events, tenants):
        app = await gateway(bus=bus, chat_events=events)
        async with client(app) as http:
            response = await http.post("/api/v1/chat/turns", json={"message": "hi", "images": [image, image]})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "images"]
    assert f"at most {MAX_IMAGE_REF_TOTAL_CHARS} in all" in detail["msg"]
    assert tenants == []
