"""The conversation service on a real NATS server (with JetStream): chat requests in, a turn's events
out on its own subject, the turn's completion kept once on the completions stream, and several turns
running at once in one replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from langgraph.checkpoint.memory import InMemorySaver

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_contracts.events import (
    TURN_COMPLETED_STREAM,
    ChatRequested,
    ChatTurnEvent,
    TurnCompleted,
    TurnEventKind,
)
from knowsphere_conversation.api.bus import TURN_RUNNER, build_bus
from knowsphere_conversation.domain.graph import TurnLimits, build_graph
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import bound_identity
from knowsphere_runtime.identity_token import stored_message_identity, token_headers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import CALLER, Memory, Models, Search, Tools, text


class Gate:
    """A model whose answers wait until ``width`` requests are in flight at once (or time out)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.in_flight = 0
        self.max_in_flight = 0
        self._all_in = asyncio.Event()

    async def answer(self, request: mpb.ChatStreamRequest) -> AsyncIterator[mpb.ChatStreamResponse]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.in_flight >= self.width:
            self._all_in.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_in.wait(), timeout=5)
        self.in_flight -= 1
        for event in text("ok"):
            yield event


@pytest.fixture
async def conversation(nats_url: str) -> AsyncIterator[tuple[Any, Gate]]:
    gate = Gate(width=3)
    models = Models(lambda r: [], intent="B")
    models.chat_stream = gate.answer  # type: ignore[method-assign]
    broker = build_broker(nats_url, client_name="conversation-test")
    bus = build_bus(max_concurrent_turns=3)
    broker.include_router(bus.router)
    graph = build_graph(InMemorySaver())
    runner = TurnRunner(
        lambda: graph,
        models=models,
        tools=Tools(),
        memory=Memory(),
        search=Search(),
        publish=bus.publish_turn_event,
        publish_completed=bus.publish_completed,
        limits=TurnLimits(),
    )
    broker.context.set_global(TURN_RUNNER, runner)
    async with broker:
        await broker.start()
        yield bus, gate


async def _ask(nats_url: str, turn_ids: list[str]) -> dict[str, list[ChatTurnEvent]]:
    client = await nats.connect(nats_url)
    events: dict[str, list[ChatTurnEvent]] = {t: [] for t in turn_ids}
    subjects: dict[str, set[str]] = {t: set() for t in turn_ids}
    finals = asyncio.Event()

    async def on_event(message: Any) -> None:
        event = ChatTurnEvent.model_validate_json(message.data)
        subjects[event.turn_id].add(message.subject)
        events[event.turn_id].append(event)
        if all(e and e[-1].is_final for e in events.values()):
            finals.set()

    await client.subscribe(ChatTurnEvent.subject + ".>", cb=on_event)
    headers = token_headers(CALLER)
    for turn_id in turn_ids:
        request = ChatRequested(turn_id=turn_id, session_id=f"s-{turn_id}", message="tell me something")
        await client.publish(ChatRequested.subject, request.model_dump_json().encode(), headers=headers)
    await asyncio.wait_for(finals.wait(), timeout=30)
    await client.close()
    # Every event went out on the subject of the caller's tenant and its turn, nowhere else.
    assert subjects == {t: {ChatTurnEvent.subject_for(CALLER.tenant_id, t)} for t in turn_ids}
    return events


async def test_turns_run_at_once_and_each_ends_with_one_final_event(nats_url: str, conversation: Any) -> None:
    _, gate = conversation
    events = await _ask(nats_url, [f"t-{uuid.uuid4().hex}" for _ in range(3)])
    assert gate.max_in_flight == 3  # all three model calls were in flight together
    for turn_events in events.values():
        assert [e.sequence for e in turn_events] == list(range(len(turn_events)))
        assert [e.kind for e in turn_events][-1] is TurnEventKind.COMPLETED
        assert sum(e.is_final for e in turn_events) == 1


async def test_a_completed_turn_is_kept_once_on_the_completions_stream(
    nats_url: str, conversation: Any
) -> None:
    bus, _ = conversation
    turn_id = f"t-{uuid.uuid4().hex}"
    await _ask(nats_url, [turn_id])
    # A second announcement of the same turn (a redelivered turn) is dropped by JetStream.
    with bound_identity(CALLER):
        await bus.publish_completed(TurnCompleted(turn_id=turn_id))
    client = await nats.connect(nats_url)
    js = client.jetstream()
    subscription = await js.pull_subscribe(TurnCompleted.subject, stream=TURN_COMPLETED_STREAM)
    messages: list[Any] = []
    while True:
        try:
            messages += await subscription.fetch(100, timeout=1)
        except nats.errors.TimeoutError:
            break
    ours = [m for m in messages if TurnCompleted.model_validate_json(m.data).turn_id == turn_id]
    assert len(ours) == 1
    assert ours[0].headers is not None and stored_message_identity(ours[0].headers) == CALLER
    await client.close()


async def test_a_message_waiting_too_long_for_its_sessions_turn_is_refused_and_the_first_answered(
    nats_url: str,
) -> None:
    release = asyncio.Event()

    async def slow(request: mpb.ChatStreamRequest) -> AsyncIterator[mpb.ChatStreamResponse]:
        await asyncio.wait_for(release.wait(), timeout=20)
        for event in text("done"):
            yield event

    models = Models(lambda r: [], intent="B")
    models.chat_stream = slow  # type: ignore[method-assign]
    broker = build_broker(nats_url, client_name="conversation-busy-test")
    bus = build_bus(max_concurrent_turns=2, max_session_wait_seconds=1.0)
    broker.include_router(bus.router)
    graph = build_graph(InMemorySaver())
    runner = TurnRunner(
        lambda: graph,
        models=models,
        tools=Tools(),
        memory=Memory(),
        search=Search(),
        publish=bus.publish_turn_event,
        publish_completed=bus.publish_completed,
        limits=TurnLimits(),
    )
    broker.context.set_global(TURN_RUNNER, runner)
    first, second = f"t-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}"
    async with broker:
        await broker.start()
        client = await nats.connect(nats_url)
        finals: dict[str, ChatTurnEvent] = {}

        async def on_event(message: Any) -> None:
            event = ChatTurnEvent.model_validate_json(message.data)
            if event.is_final:
                finals[event.turn_id] = event
                if event.turn_id == second:
                    release.set()  # the refused one ended: let the first finish

        await client.subscribe(ChatTurnEvent.subject + ".>", cb=on_event)
        session = f"s-{uuid.uuid4().hex}"
        for turn_id in (first, second):
            request = ChatRequested(turn_id=turn_id, session_id=session, message="tell me something")
            await client.publish(
                ChatRequested.subject, request.model_dump_json().encode(), headers=token_headers(CALLER)
            )
            await asyncio.sleep(0.2)
        for _ in range(200):
            if len(finals) == 2:
                break
            await asyncio.sleep(0.1)
        await client.close()
    assert finals[second].error_code == "session_busy"
    assert finals[first].kind is TurnEventKind.COMPLETED
