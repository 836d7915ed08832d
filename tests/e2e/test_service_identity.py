"""Service identity over the real stack: every gRPC method of every service refuses a caller whose
identity is not a valid signed token, and a forged turn request on the bus is never answered."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import nats
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message_factory import GetMessageClass

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.identity_token import TokenAuthority, authority, token_headers

pytestmark = pytest.mark.e2e

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


def test_every_method_of_every_service_refuses_a_caller_without_a_valid_token(stack):
    async def walk() -> dict[str, grpc.StatusCode]:
        answered: dict[str, grpc.StatusCode] = {}
        for name, contract in CONTRACTS.items():
            async with grpc.aio.insecure_channel(stack.grpc_addr(name)) as channel:
                for method in contract.descriptor.methods:
                    for kind, metadata in FORGED.items():
                        answered[f"{name}/{method.name} ({kind})"] = await _one(method, channel, metadata)
        return answered

    answered = asyncio.run(walk())
    assert len(answered) >= 5 * 6 * 10  # six services, many methods each, five kinds of caller
    wrong = {call: code.name for call, code in answered.items() if code != grpc.StatusCode.UNAUTHENTICATED}
    assert not wrong, wrong


def test_a_valid_token_gets_past_the_check(stack):
    # The same walk with the test process's trusted key: a method answers with its own verdict.
    async def call() -> grpc.StatusCode:
        contract = CONTRACTS["memory"]
        method = contract.descriptor.methods_by_name["ListMemoryItems"]
        async with grpc.aio.insecure_channel(stack.grpc_addr("memory")) as channel:
            metadata = tuple(token_headers(Identity(f"t{uuid.uuid4().hex[:8]}", "alice")).items())
            return await _one(method, channel, metadata)

    assert asyncio.run(call()) == grpc.StatusCode.OK


def test_a_turn_request_with_a_forged_identity_on_the_bus_is_never_answered(stack):
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
    assert signed, "the signed turn was not answered: the check is not what refused the forged one"
    assert forged == []
