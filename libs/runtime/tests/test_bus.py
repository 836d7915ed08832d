"""NATS through FastStream on a real nats-server: identity and trace context cross the bus."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid

import grpc
from faststream.nats import ConsumerConfig, JStream, PullSub
from grpc_health.v1 import health_pb2, health_pb2_grpc
from nats.js.api import RetentionPolicy
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, bound_identity, current_identity
from knowsphere_runtime.identity_token import TokenAuthority
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_stack import free_port, start_nats


class Ping(BaseModel):
    text: str


async def test_identity_and_trace_context_travel_in_headers(nats_url, spans):
    broker = build_broker(nats_url, client_name="test")
    received: asyncio.Queue[tuple[Ping, Identity | None, int]] = asyncio.Queue()

    @broker.subscriber("ks.test.ping.v1", queue="test")
    async def handle(message: Ping) -> None:
        await received.put(
            (message, current_identity(), trace.get_current_span().get_span_context().trace_id)
        )

    await broker.start()
    try:
        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("sender") as root, bound_identity(Identity("acme", "alice")):
            await broker.publish(Ping(text="hello"), subject="ks.test.ping.v1")
        message, identity, trace_id = await asyncio.wait_for(received.get(), timeout=5)
    finally:
        await broker.stop()

    assert message.text == "hello"
    assert identity == Identity("acme", "alice")
    assert trace_id == root.get_span_context().trace_id
    finished = spans.get_finished_spans()
    consumer = next(s for s in finished if s.kind == SpanKind.CONSUMER and s.name.endswith("process"))
    producer = next(s for s in finished if s.kind == SpanKind.PRODUCER and s.name.endswith("create"))
    assert consumer.context.trace_id == root.get_span_context().trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id


async def test_message_without_identity_is_handled_anonymously(nats_url):
    broker = build_broker(nats_url, client_name="test")
    received: asyncio.Queue[Identity | None] = asyncio.Queue()

    @broker.subscriber("ks.test.anonymous.v1")
    async def handle(message: Ping) -> None:
        await received.put(current_identity())

    await broker.start()
    try:
        await broker.publish(Ping(text="x"), subject="ks.test.anonymous.v1")
        assert await asyncio.wait_for(received.get(), timeout=5) is None
    finally:
        await broker.stop()


FORGED_HEADERS = {
    "unsigned": {"ks-tenant-id": "victim", "ks-user-id": "alice"},
    "garbage": {"ks-identity": "not.a.token"},
    "untrusted-signer": {
        "ks-identity": TokenAuthority.ephemeral("intruder").issue(Identity("victim", "alice"))
    },
}


async def test_a_message_with_a_forged_identity_never_reaches_its_handler(nats_url):
    broker = build_broker(nats_url, client_name="test")
    received: asyncio.Queue[Identity | None] = asyncio.Queue()

    @broker.subscriber("ks.test.forged.v1")
    async def handle(message: Ping) -> None:
        await received.put(current_identity())

    await broker.start()
    try:
        for headers in FORGED_HEADERS.values():
            await broker.publish(Ping(text="forged"), subject="ks.test.forged.v1", headers=headers)
        with bound_identity(Identity("acme", "alice")):
            await broker.publish(Ping(text="signed"), subject="ks.test.forged.v1")
        # Messages on one subject arrive in order: the signed one comes after the three refused.
        assert await asyncio.wait_for(received.get(), timeout=5) == Identity("acme", "alice")
        assert received.empty()
    finally:
        await broker.stop()


async def test_a_forged_jetstream_message_is_terminated_not_redelivered(nats_url):
    stream = f"KS_TEST_FORGED_{uuid.uuid4().hex[:8].upper()}"
    subject = f"ks.test.{stream.lower()}.v1"
    broker = build_broker(nats_url, client_name="test")
    handled: list[str] = []

    @broker.subscriber(
        subject,
        stream=JStream(stream, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE),
        durable="forged",
        pull_sub=PullSub(batch_size=10, timeout=0.2),
        config=ConsumerConfig(ack_wait=1.0),
    )
    async def handle(message: Ping) -> None:
        handled.append(message.text)

    await broker.start()
    try:
        await broker.publish(
            Ping(text="forged"), subject=subject, stream=stream, headers=FORGED_HEADERS["unsigned"]
        )
        with bound_identity(Identity("acme", "alice")):
            await broker.publish(Ping(text="signed"), subject=subject, stream=stream)
        for _ in range(50):
            info = await broker.config.connection_state.stream.stream_info(stream)
            if handled and info.state.messages == 0:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # past the ack wait: a forged message left pending would come back
        info = await broker.config.connection_state.stream.stream_info(stream)
        assert handled == ["signed"]
        assert info.state.messages == 0  # the forged message was taken off the work queue
    finally:
        with contextlib.suppress(Exception):
            await broker.config.connection_state.stream.delete_stream(stream)
        await broker.stop()


async def test_health_is_not_serving_while_the_bus_is_down_and_the_broker_reconnects(tmp_path):
    port, monitor = free_port(), free_port()
    nats_server = start_nats(tmp_path / "nats", port, monitor)
    broker = build_broker(f"nats://127.0.0.1:{port}", client_name="test")
    received: asyncio.Queue[str] = asyncio.Queue()

    @broker.subscriber("ks.test.outage.v1")
    async def handle(message: Ping) -> None:
        await received.put(message.text)

    server = GrpcServer(name="outage-test", bind="127.0.0.1:0", bindings=[], grace=0.1)
    await broker.start()
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    health = health_pb2_grpc.HealthStub(channel)

    async def status_becomes(wanted: int, within: float) -> bool:
        deadline = asyncio.get_running_loop().time() + within
        while asyncio.get_running_loop().time() < deadline:
            if (await health.Check(health_pb2.HealthCheckRequest())).status == wanted:
                return True
            await asyncio.sleep(0.1)
        return False

    try:
        assert await status_becomes(health_pb2.HealthCheckResponse.SERVING, 5)
        os.kill(nats_server.pid, signal.SIGKILL)  # the bus goes away under the service
        nats_server.stop()
        assert await status_becomes(health_pb2.HealthCheckResponse.NOT_SERVING, 10)
        await asyncio.sleep(3)  # longer than a few reconnect attempts: the client must not give up
        nats_server = start_nats(tmp_path / "nats", port, monitor)
        assert await status_becomes(health_pb2.HealthCheckResponse.SERVING, 15)
        await broker.publish(Ping(text="after the outage"), subject="ks.test.outage.v1")
        assert await asyncio.wait_for(received.get(), timeout=5) == "after the outage"
    finally:
        await channel.close()
        await server.stop(0)
        await broker.stop()
        nats_server.stop()


async def test_a_fanout_hands_each_watcher_only_the_events_it_wants() -> None:
    from knowsphere_runtime.bus import Fanout

    fanout: Fanout[tuple[str, int]] = Fanout(max_queue=2)
    async with (
        fanout.watch(lambda e: e[0] == "a") as a_events,
        fanout.watch(lambda e: e[0] == "b") as b_events,
    ):
        assert fanout.watchers == 2
        for event in (("a", 1), ("b", 1), ("a", 2), ("a", 3)):
            fanout.publish(event)
        # The slow watcher of "a" kept the newest two; its oldest was dropped and counted.
        assert [await anext(a_events), await anext(a_events)] == [("a", 2), ("a", 3)]
        assert await anext(b_events) == ("b", 1)
        assert fanout.dropped == 1
    assert fanout.watchers == 0
    fanout.publish(("a", 4))  # nobody watching: nothing kept
