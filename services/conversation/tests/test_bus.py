"""The conversation service on the bus (``api/bus.py``) with retrieval reached through the real client:
FastStream's in-memory NATS broker carries the chat request in and the turn's events out; a fake
retrieval service answers on a real gRPC server.

What a user notices: a request becomes a turn whose events arrive on the turn's own subject and end
with exactly one final event, whether retrieval answers, cannot serve (its own error code) or refuses
the request (the generic code); retrieval is asked as the requesting user; a request that carries no
user is refused with an error naming the missing identity.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from faststream.nats import TestNatsBroker
from faststream.nats.annotations import NatsMessage

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import RetrievalClient
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_conversation.adapters.retrieval import RetrievalSearch
from knowsphere_conversation.api.bus import TURN_RUNNER, build_bus
from knowsphere_conversation.domain.turns import IDENTITY_REQUIRED, TURN_FAILED, TurnRunner
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, bound_identity, require_identity
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid
from knowsphere_runtime.rpc.testing import serving

TOP_K = 3
CALLER = Identity("acme", "alice")
# Knowledge base ids on which the fake retrieval fails with a code the turn names.
FAILING = {
    "unbuilt": grpc.StatusCode.UNIMPLEMENTED,
    "down": grpc.StatusCode.UNAVAILABLE,
    "slow": grpc.StatusCode.DEADLINE_EXCEEDED,
}


class FakeRetrieval:
    def __init__(self) -> None:
        self.requests: list[tuple[str, rpb.SearchRequest]] = []

    async def Search(self, request: rpb.SearchRequest, context: Any) -> Any:
        async def work() -> rpb.SearchResponse:
            self.requests.append((require_identity().tenant_id, request))
            for kb, code in FAILING.items():
                if kb in request.knowledge_base_ids:
                    raise RequestError(code, f"{kb}: cannot serve")
            if "bad" in request.knowledge_base_ids:
                raise invalid("knowledge_base_ids", "kb id 'bad' is malformed")
            return rpb.SearchResponse(
                results=[rpb.SearchResult(chunk_id=f"c{i}") for i in range(request.top_k)]
            )

        return await answer(context, work)


@pytest.fixture
async def retrieval() -> AsyncIterator[tuple[FakeRetrieval, RetrievalClient]]:
    fake = FakeRetrieval()
    async with serving("retrieval", fake) as channel:
        yield fake, RetrievalClient(channel)


async def turn(
    client: RetrievalClient, *knowledge_base_ids: str, caller: Identity | None = CALLER
) -> list[ChatTurnEvent]:
    """Publishes one chat request as ``caller`` (None: without identity headers); the events published on
    its turn's subject."""
    broker = build_broker("nats://unused:4222", client_name="test")
    bus = build_bus()
    broker.include_router(bus.router)
    broker.context.set_global(TURN_RUNNER, TurnRunner(RetrievalSearch(client, TOP_K), bus.publish_turn_event))
    seen: list[tuple[str, ChatTurnEvent]] = []

    @broker.subscriber(ChatTurnEvent.subject + ".>")
    async def reader(event: ChatTurnEvent, message: NatsMessage) -> None:
        seen.append((message.raw_message.subject, event))

    async with TestNatsBroker(broker):
        with bound_identity(caller):
            await broker.publish(
                ChatRequested(
                    turn_id="turn-1", message="leave?", knowledge_base_ids=list(knowledge_base_ids)
                ),
                subject=ChatRequested.subject,
            )
    assert {subject for subject, _ in seen} == {ChatTurnEvent.subject_for("turn-1")}
    events = [event for _, event in seen]
    assert [e.sequence for e in events] == list(range(len(events)))
    assert [e.is_final for e in events] == [False] * (len(events) - 1) + [True]
    return events


async def test_a_request_becomes_a_turn_whose_events_arrive_on_its_subject(retrieval: Any) -> None:
    fake, client = retrieval
    events = await turn(client, "kb-1")
    assert [e.kind for e in events] == [TurnEventKind.STARTED, TurnEventKind.ERROR]
    assert f"{TOP_K} passage(s)" in (events[-1].error_message or "")
    [(tenant, request)] = fake.requests
    assert tenant == "acme" and request.top_k == TOP_K and list(request.knowledge_base_ids) == ["kb-1"]


async def test_a_turn_without_knowledge_bases_ends_without_asking_retrieval(retrieval: Any) -> None:
    fake, client = retrieval
    events = await turn(client)
    assert events[-1].error_code == "answer_generation_unavailable"
    assert fake.requests == []


@pytest.mark.parametrize(
    ("kb", "code"),
    [
        ("unbuilt", "retrieval_unimplemented"),
        ("down", "retrieval_unavailable"),
        ("slow", "retrieval_timeout"),
    ],
)
async def test_a_retrieval_that_cannot_serve_names_itself(retrieval: Any, kb: str, code: str) -> None:
    _, client = retrieval
    events = await turn(client, kb)
    assert events[-1].error_code == code
    assert events[-1].error_message == f"retrieval: {kb}: cannot serve"


async def test_a_refused_request_still_ends_the_turn(retrieval: Any) -> None:
    _, client = retrieval
    events = await turn(client, "bad")
    assert events[-1].error_code == TURN_FAILED


async def test_a_request_without_identity_ends_with_one_error_naming_it(retrieval: Any) -> None:
    fake, client = retrieval
    [final] = await turn(client, "kb-1", caller=None)
    assert final.error_code == IDENTITY_REQUIRED
    assert final.error_message == "no caller identity: ks-tenant-id and ks-user-id are required"
    assert fake.requests == []
