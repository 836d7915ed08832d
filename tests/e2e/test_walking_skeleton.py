"""The walking skeleton: one request crosses gateway → NATS → conversation → gRPC → retrieval and back.

These tests run against the whole stack started by the same launcher as `make up`.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import grpc
import httpx
import pytest
from google.protobuf.message_factory import GetMessageClass

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_runtime.rpc.reflect import list_methods

from .otlp_receiver import ReceivedSpan

pytestmark = pytest.mark.e2e

SEVEN = {"gateway", "conversation", "retrieval", "ingestion", "memory", "toolrunner", "modelhub"}


def _sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((fields.get("event", ""), json.loads(fields.get("data", "{}"))))
    return events


def test_healthz_lists_the_seven_services_as_serving(stack):
    response = httpx.get(f"{stack.gateway_url}/healthz", timeout=10)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["status"] == "ok"
    assert set(report["services"]) == SEVEN
    assert set(report["services"].values()) == {"SERVING"}
    assert report["dependencies"]["nats"] == "CONNECTED"


def test_a_generic_reflection_client_lists_every_service_method(stack):
    for name, contract in CONTRACTS.items():
        listing = list_methods(stack.grpc_addr(name))
        methods = {m.split(" ")[0] for m in listing[contract.full_name]}
        assert methods == {m.name for m in contract.descriptor.methods}, name
        assert "grpc.health.v1.Health" in listing
    assert "grpc.health.v1.Health" in list_methods(stack.grpc_addr("gateway"))


def test_a_pending_rpc_names_its_capability_over_the_real_service(stack):
    contract = CONTRACTS["conversation"]
    method = contract.descriptor.methods_by_name["Chat"]

    async def call() -> grpc.aio.AioRpcError:
        async with open_channel(stack.grpc_addr("conversation"), services=[contract.descriptor]) as channel:
            stub = contract.stub(channel)
            with bound_identity(Identity("acme", "alice")):
                try:
                    async for _ in stub.Chat(GetMessageClass(method.input_type)()):
                        pass
                except grpc.aio.AioRpcError as error:
                    return error
        raise AssertionError("Chat answered; it is not built yet")

    error = asyncio.run(call())
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "ConversationService/Chat" in (error.details() or "")
    assert "streaming Chat RPC" in (error.details() or "")


def test_chat_request_is_validated_with_the_field_named(stack):
    response = httpx.post(f"{stack.gateway_url}/api/v1/chat/turns", json={"message": ""}, timeout=10)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "message"


def test_one_trace_crosses_every_hop_with_correct_links(stack, otlp):
    trace_id = secrets.token_hex(16)
    caller_span = secrets.token_hex(8)
    response = httpx.post(
        f"{stack.gateway_url}/api/v1/chat/turns",
        json={"message": "What does the handbook say about leave?", "knowledge_base_ids": ["kb-1"]},
        headers={"traceparent": f"00-{trace_id}-{caller_span}-01"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(response.text)
    kinds = [kind for kind, _ in events]
    assert kinds == ["started", "intent", "text_delta", "completed"], events
    final = events[-1][1]
    # With no chat model configured the conversation asked retrieval over gRPC itself (which found
    # nothing in an unknown knowledge base) and says so, instead of inventing an answer.
    assert final["answer_kind"] == "fixed"
    assert final["text"] == "The selected knowledge bases have no passage that matches this question."

    search = "/knowsphere.retrieval.v1.RetrievalService/Search"

    # Every span the assertions below look at, each exported by its own service's batch processor:
    # wait until all of them have arrived, not just the first few.
    expected = {
        ("gateway", "SERVER", "/api/v1/chat/turns"),
        ("gateway", "PRODUCER", "ks.chat.request.v1 publish"),
        ("conversation", "CONSUMER", "ks.chat.request.v1 process"),
        ("conversation", "CLIENT", search),
        ("conversation", "PRODUCER", "ks.chat.events.v1"),
        ("retrieval", "SERVER", search),
    }

    def complete(spans: list[ReceivedSpan]) -> bool:
        return all(
            any(s.service == service and s.kind == kind and part in s.name for s in spans)
            for service, kind, part in expected
        )

    spans = otlp.wait_for(trace_id, complete, timeout=60)
    by_id = {s.span_id: s for s in spans}

    def one(service: str, kind: str, name_part: str) -> ReceivedSpan:
        found = [s for s in spans if s.service == service and s.kind == kind and name_part in s.name]
        assert len(found) == 1, (service, kind, name_part, [(s.service, s.kind, s.name) for s in spans])
        return found[0]

    def ancestors(span: ReceivedSpan) -> list[ReceivedSpan]:
        chain = []
        while span.parent_span_id in by_id:
            span = by_id[span.parent_span_id]
            chain.append(span)
        return chain

    http_server = one("gateway", "SERVER", "/api/v1/chat/turns")
    assert http_server.parent_span_id == caller_span
    publish = one("gateway", "PRODUCER", "ks.chat.request.v1 publish")
    assert http_server in ancestors(publish)
    consume = one("conversation", "CONSUMER", "ks.chat.request.v1 process")
    assert by_id[consume.parent_span_id].service == "gateway"
    assert http_server in ancestors(consume)
    grpc_client = one("conversation", "CLIENT", search)
    assert consume in ancestors(grpc_client)
    grpc_server = one("retrieval", "SERVER", search)
    assert grpc_server.parent_span_id == grpc_client.span_id
    assert grpc_server.attributes.get("ks.tenant.id") == "local"
    back = [
        s
        for s in spans
        if s.service == "conversation" and s.kind == "PRODUCER" and "ks.chat.events.v1" in s.name
    ]
    assert back and all(consume in ancestors(s) for s in back)
