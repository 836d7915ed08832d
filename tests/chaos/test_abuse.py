"""Abuse of the running stack, each as an attacker inside the network or a hostile tenant would try it:

- every gRPC method of every service called without a valid signed identity token (none, unsigned
  ``ks-tenant-id`` headers, garbage, a key nobody trusts, expired): UNAUTHENTICATED;
- a turn request with a forged identity put on the bus: never answered;
- a tenant's model aimed at internal addresses (the test's own listener on loopback by address, by
  IPv4-mapped IPv6 address and by a name that resolves to it; cloud metadata), at creation and by a
  PATCH: refused, and the listener receives nothing.

Each prints one JSON line for the suite's summary; a method that answered, a forged turn answered or a
request that reached the listener counts as leaked.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import nats
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message_factory import GetMessageClass

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.identity_token import TokenAuthority, authority, token_headers
from knowsphere_stack import Stack, StackConfig

from .conftest import ScenarioReport

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import ScriptedProvider

pytestmark = pytest.mark.chaos

PROXY_SECRET = "chaos-abuse-proxy-secret-" + "0123456789abcdef" * 2

VICTIM = Identity("victim-tenant", "alice")

FORGED = {
    "none": (),
    "unsigned": (("ks-tenant-id", VICTIM.tenant_id), ("ks-user-id", VICTIM.user_id)),
    "garbage": (("ks-identity", "eyJhbGciOiJub25lIn0.eyJ0ZW4iOiJ2aWN0aW0ifQ."),),
    "untrusted-signer": (("ks-identity", TokenAuthority.ephemeral("gateway").issue(VICTIM)),),
    "expired": (("ks-identity", authority().issue(VICTIM, ttl=-120)),),
}


async def _one(method: MethodDescriptor, channel: grpc.aio.Channel, metadata: tuple) -> grpc.StatusCode:
    path = f"/{method.containing_service.full_name}/{method.name}"
    request = GetMessageClass(method.input_type)()
    codec = {
        "request_serializer": GetMessageClass(method.input_type).SerializeToString,
        "response_deserializer": GetMessageClass(method.output_type).FromString,
    }

    async def requests() -> AsyncIterator[object]:
        yield request

    try:
        if method.client_streaming and method.server_streaming:
            async for _ in channel.stream_stream(path, **codec)(requests(), metadata=metadata, timeout=10):
                break
        elif method.client_streaming:
            await channel.stream_unary(path, **codec)(requests(), metadata=metadata, timeout=10)
        elif method.server_streaming:
            async for _ in channel.unary_stream(path, **codec)(request, metadata=metadata, timeout=10):
                break
        else:
            await channel.unary_unary(path, **codec)(request, metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def listener() -> Iterator[ScriptedProvider]:
    """A server on loopback that stands for anything internal (an admin port, a database's HTTP API)."""
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, identity_keys_dir: Path, listener: ScriptedProvider
) -> Iterator[Stack]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("chaos-abuse"),
        temporal_headless=True,
        identity_keys_dir=identity_keys_dir,
        extra_env={
            "OTEL_TRACES_EXPORTER": "none",
            "KS_GATEWAY_PROXY_SECRET": PROXY_SECRET,
            # As in production: nothing internal allow-listed; the listener's port is an allowed one,
            # so only the address check stands between a tenant and the listener.
            "KS_MODELHUB_EGRESS__ALLOW_NETWORKS": "[]",
            "KS_MODELHUB_EGRESS__ALLOWED_PORTS": f"[80, 443, {listener.port}]",
        },
    )
    with Stack(config) as running:
        yield running


def test_every_method_of_every_service_refuses_a_caller_without_a_valid_token(
    stack: Stack, scenario_report: ScenarioReport
) -> None:
    async def walk() -> dict[str, grpc.StatusCode]:
        answered: dict[str, grpc.StatusCode] = {}
        for name, contract in CONTRACTS.items():
            async with grpc.aio.insecure_channel(stack.grpc_addr(name)) as channel:
                for method in contract.descriptor.methods:
                    for kind, metadata in FORGED.items():
                        answered[f"{name}/{method.name} ({kind})"] = await _one(method, channel, metadata)
        return answered

    answered = asyncio.run(walk())
    wrong = {call: code.name for call, code in answered.items() if code != grpc.StatusCode.UNAUTHENTICATED}
    scenario_report(
        {"scenario": "calls without a valid identity token", "calls": len(answered), "leaked": len(wrong)}
    )
    assert len(answered) >= 5 * 6 * 10  # six services, many methods each, five kinds of caller
    assert not wrong, wrong


def test_a_valid_token_gets_past_the_check(stack: Stack) -> None:
    # The same walk with the test process's trusted key: a method answers with its own verdict.
    async def call() -> grpc.StatusCode:
        contract = CONTRACTS["memory"]
        method = contract.descriptor.methods_by_name["ListMemoryItems"]
        async with grpc.aio.insecure_channel(stack.grpc_addr("memory")) as channel:
            metadata = tuple(token_headers(Identity(f"t{uuid.uuid4().hex[:8]}", "alice")).items())
            return await _one(method, channel, metadata)

    assert asyncio.run(call()) == grpc.StatusCode.OK


def test_a_turn_request_with_a_forged_identity_on_the_bus_is_never_answered(
    stack: Stack, scenario_report: ScenarioReport
) -> None:
    async def scenario() -> tuple[list[bytes], list[bytes]]:
        client = await nats.connect(stack.nats_url, **stack.nats_auth().connect_options())
        forged_turn, signed_turn = f"turn-{uuid.uuid4().hex}", f"turn-{uuid.uuid4().hex}"
        events: dict[str, list[bytes]] = {forged_turn: [], signed_turn: []}

        async def collect(msg: nats.aio.msg.Msg) -> None:
            events[msg.subject.rsplit(".", 1)[-1]].append(msg.data)

        subscription = await client.subscribe(ChatTurnEvent.subject + ".>", cb=collect)
        js = client.jetstream()
        for turn, headers in (
            (forged_turn, dict(FORGED["unsigned"])),
            (signed_turn, token_headers(Identity(f"t{uuid.uuid4().hex[:8]}", "alice"))),
        ):
            request = ChatRequested(turn_id=turn, session_id=f"s-{turn}", message="hello")
            await js.publish(
                ChatRequested.subject,
                request.model_dump_json().encode(),
                headers={**headers, "Nats-Msg-Id": turn},
            )
        for _ in range(300):
            if any(ChatTurnEvent.model_validate_json(data).is_final for data in events[signed_turn]):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        await subscription.unsubscribe()
        await client.close()
        return events[forged_turn], events[signed_turn]

    forged, signed = asyncio.run(scenario())
    scenario_report({"scenario": "forged identity on the bus", "leaked": len(forged)})
    assert signed, "the signed turn was not answered: the check is not what refused the forged one"
    assert forged == []


def _tenant_client(stack: Stack) -> httpx.Client:
    headers = {
        "x-ks-proxy-secret": PROXY_SECRET,
        "x-ks-tenant-id": f"abuse-{uuid.uuid4().hex[:8]}",
        "x-ks-user-id": "mallory",
        "x-ks-role": "admin",
    }
    return httpx.Client(base_url=stack.gateway_url, headers=headers, timeout=60.0)


def _model(base_url: str) -> dict[str, Any]:
    return {
        "display_name": "internal",
        "provider_id": "custom",
        "model_name": "probe",
        "types": ["embedding"],
        "base_url": base_url,
        "parameters": {"embedding_dimension": 8},
    }


def test_a_tenants_model_cannot_reach_internal_addresses(
    stack: Stack, listener: ScriptedProvider, scenario_report: ScenarioReport
) -> None:
    listener.reset()
    port = listener.port
    with _tenant_client(stack) as http:
        refused_at_creation = {
            url: http.post("/api/v1/models", json=_model(url))
            for url in (
                f"http://127.0.0.1:{port}/v1",
                f"http://[::ffff:127.0.0.1]:{port}/v1",
                "http://169.254.169.254/latest/meta-data",
                "http://metadata.google.internal/v1",
            )
        }
        # A name is resolved at each call, not when the model is saved: this one resolves to loopback.
        by_name = http.post("/api/v1/models", json=_model(f"http://localhost:{port}/v1"))
        assert by_name.status_code == 201, by_name.text
        model_id = by_name.json()["id"]
        token = http.post("/api/v1/tokens", json={"name": "abuse", "role": "member"}).json()["token"]
        embedded = httpx.post(
            f"{stack.gateway_url}/v1/embeddings",
            json={"model": model_id, "input": "hello"},
            headers={"authorization": f"Bearer {token}"},
            timeout=60.0,
        )
        # Moving a saved model onto an internal address is refused too.
        moved = http.patch(
            f"/api/v1/models/{model_id}", json={"base_url": "http://169.254.169.254/v1", "api_key": ""}
        )
    reached = len(listener.requests)
    statuses = {url: response.status_code for url, response in refused_at_creation.items()}
    scenario_report(
        {
            "scenario": "model base URLs at internal addresses",
            "refused_at_creation": statuses,
            "call_by_name": embedded.status_code,
            "moved": moved.status_code,
            "leaked": reached,
        }
    )
    assert reached == 0, listener.requests
    for url, response in refused_at_creation.items():
        assert response.status_code == 400, (url, response.text)
        assert response.json()["error"]["field"] == "base_url", response.text
        assert url not in response.text  # the value is not echoed
    assert embedded.status_code >= 500, embedded.text
    assert "localhost" not in embedded.text and str(port) not in embedded.text
    assert moved.status_code == 400 and moved.json()["error"]["field"] == "base_url", moved.text
