"""One chat turn (``TurnRunner``), with ``search`` and ``publish`` replaced by recorders.

What a user notices: every turn ends with exactly one final event, whatever fails; a turn without
knowledge bases does not ask retrieval (which would refuse it); a peer that cannot serve names itself
in the error code; a turn without the caller's identity is refused naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_conversation.domain.turns import (
    ANSWER_GENERATION_UNAVAILABLE,
    IDENTITY_REQUIRED,
    TURN_FAILED,
    CapabilityUnavailable,
    TurnRunner,
)
from knowsphere_runtime.identity import Identity, bound_identity


class Recorder:
    def __init__(self, results: Sequence[rpb.SearchResult] = (), failure: Exception | None = None) -> None:
        self.results = results
        self.failure = failure
        self.searches: list[tuple[str, list[str]]] = []
        self.events: list[ChatTurnEvent] = []

    async def search(self, query: str, knowledge_base_ids: Sequence[str]) -> Sequence[rpb.SearchResult]:
        self.searches.append((query, list(knowledge_base_ids)))
        if self.failure is not None:
            raise self.failure
        return self.results

    async def publish(self, event: ChatTurnEvent) -> None:
        self.events.append(event)


def request(*knowledge_base_ids: str) -> ChatRequested:
    return ChatRequested(
        turn_id="t-1", message="How long is leave?", knowledge_base_ids=list(knowledge_base_ids)
    )


CALLER = Identity("acme", "alice")


async def run(recorder: Recorder, turn: ChatRequested, caller: Identity | None = CALLER) -> ChatTurnEvent:
    """Runs ``turn`` as ``caller`` (as the bus binds the identity of the request's headers)."""
    with bound_identity(caller):
        return await TurnRunner(recorder.search, recorder.publish).run(turn)


def assert_one_final_event(events: list[ChatTurnEvent]) -> ChatTurnEvent:
    assert [e.sequence for e in events] == list(range(len(events)))
    assert [e.is_final for e in events] == [False] * (len(events) - 1) + [True]
    return events[-1]


async def test_a_turn_without_knowledge_bases_skips_retrieval_and_ends_with_one_final_event() -> None:
    recorder = Recorder()
    final = await run(recorder, request())
    assert recorder.searches == []
    assert [e.kind for e in recorder.events] == [TurnEventKind.STARTED, TurnEventKind.ERROR]
    assert assert_one_final_event(recorder.events) == final
    assert final.error_code == ANSWER_GENERATION_UNAVAILABLE
    assert "0 passage(s)" in (final.error_message or "")


async def test_the_passages_retrieval_found_are_counted() -> None:
    recorder = Recorder(results=[rpb.SearchResult(chunk_id="c1"), rpb.SearchResult(chunk_id="c2")])
    final = await run(recorder, request("kb-1", "kb-2"))
    assert recorder.searches == [("How long is leave?", ["kb-1", "kb-2"])]
    assert assert_one_final_event(recorder.events).error_code == ANSWER_GENERATION_UNAVAILABLE
    assert "2 passage(s)" in (final.error_message or "")


async def test_a_peer_that_cannot_serve_ends_the_turn_with_its_code() -> None:
    recorder = Recorder(
        failure=CapabilityUnavailable("retrieval_unavailable", "retrieval: connection refused")
    )
    await run(recorder, request("kb-1"))
    final = assert_one_final_event(recorder.events)
    assert (final.error_code, final.error_message) == (
        "retrieval_unavailable",
        "retrieval: connection refused",
    )


@pytest.mark.parametrize("failure", [RuntimeError("boom"), ValueError("bad"), KeyError("x")])
async def test_an_unexpected_failure_ends_the_turn_with_the_generic_code(failure: Exception) -> None:
    recorder = Recorder(failure=failure)
    await run(recorder, request("kb-1"))
    final = assert_one_final_event(recorder.events)
    assert final.kind == TurnEventKind.ERROR and final.error_code == TURN_FAILED
    assert "boom" not in (final.error_message or "")  # internals stay in the log


async def test_a_turn_without_the_callers_identity_ends_with_one_final_event_naming_it() -> None:
    recorder = Recorder()
    final = await run(recorder, request("kb-1"), caller=None)
    assert recorder.events == [final] and recorder.searches == []
    assert final.kind == TurnEventKind.ERROR and final.error_code == IDENTITY_REQUIRED
    assert "ks-tenant-id" in (final.error_message or "")
