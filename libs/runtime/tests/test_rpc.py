"""gRPC server and channel factories against a real server on loopback.

The tests bind real KnowSphere contracts and check what a caller notices: identity arrives,
calls without identity are refused, pending methods say which capability they wait for,
idempotent calls survive a transient UNAVAILABLE while other calls are not repeated, deadlines
apply, traces link client and server, health and reflection answer, and a stop lets in-flight
calls finish.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity, require_identity
from knowsphere_runtime.identity_token import TokenAuthority, authority
from knowsphere_runtime.rpc import GrpcServer, RetryPolicy, bind_service, check_health, open_channel
from knowsphere_runtime.rpc.channel import is_idempotent
from knowsphere_runtime.rpc.reflect import list_methods

CALLER = Identity("acme", "alice")


def _unary_methods(idempotent: bool) -> list[tuple[ServiceDescriptor, MethodDescriptor]]:
    return [
        (contract.descriptor, method)
        for contract in CONTRACTS.values()
        for method in contract.descriptor.methods
        if not method.client_streaming and not method.server_streaming and is_idempotent(method) == idempotent
    ]


IDEMPOTENT_SERVICE, IDEMPOTENT = _unary_methods(True)[0]
OTHER_SERVICE, NOT_IDEMPOTENT = _unary_methods(False)[0]


class ScriptedServicer:
    """Implements one method; fails the first ``failures`` calls with UNAVAILABLE."""

    def __init__(self, method: MethodDescriptor, *, failures: int = 0, delay: float = 0.0) -> None:
        self.calls = 0
        self.identities: list[Identity] = []
        self._failures = failures
        self._delay = delay
        self._response = GetMessageClass(method.output_type)

        async def behavior(request: object, context: grpc.aio.ServicerContext) -> object:
            self.calls += 1
            self.identities.append(require_identity())
            if self._delay:
                await asyncio.sleep(self._delay)
            if self.calls <= self._failures:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "transient")
            return self._response()

        setattr(self, method.name, behavior)


@pytest.fixture
async def serve():
    servers: list[GrpcServer] = []

    async def start(service: ServiceDescriptor, servicer: object | None, **kwargs: object) -> str:
        server = GrpcServer(
            name="test",
            bind="127.0.0.1:0",
            bindings=[bind_service(service, servicer, pending="the test capability")],
            grace=kwargs.pop("grace", 1.0),  # type: ignore[arg-type]
        )
        await server.start()
        servers.append(server)
        return f"127.0.0.1:{server.port}"

    yield start
    for server in servers:
        await server.stop(0)


async def _call(target: str, service: ServiceDescriptor, method: MethodDescriptor, **channel_kwargs: object):
    async with open_channel(target, services=[service], **channel_kwargs) as channel:  # type: ignore[arg-type]
        call = channel.unary_unary(
            f"/{service.full_name}/{method.name}",
            request_serializer=GetMessageClass(method.input_type).SerializeToString,
            response_deserializer=GetMessageClass(method.output_type).FromString,
        )
        return await call(GetMessageClass(method.input_type)())


async def test_identity_travels_from_caller_to_handler(serve):
    servicer = ScriptedServicer(IDEMPOTENT)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    with bound_identity(CALLER):
        await _call(target, IDEMPOTENT_SERVICE, IDEMPOTENT)
    assert servicer.identities == [CALLER]


async def test_call_without_identity_is_refused_naming_the_metadata(serve):
    servicer = ScriptedServicer(IDEMPOTENT)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _call(target, IDEMPOTENT_SERVICE, IDEMPOTENT)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "ks-identity" in (raised.value.details() or "")
    assert servicer.calls == 0


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        pytest.param((("ks-tenant-id", "acme"), ("ks-user-id", "alice")), "unsigned identity", id="unsigned"),
        pytest.param((("ks-identity", "not.a.token"),), "not a signed token", id="garbage"),
        pytest.param(
            (("ks-identity", TokenAuthority.ephemeral("intruder").issue(CALLER)),),
            "'intruder', which this service does not trust",
            id="untrusted-signer",
        ),
        pytest.param(
            (("ks-identity", TokenAuthority.ephemeral(authority().issuer).issue(CALLER)),),
            "does not verify",
            id="forged-with-a-trusted-name",
        ),
        pytest.param((("ks-identity", authority().issue(CALLER, ttl=-120)),), "has expired", id="expired"),
        pytest.param(
            (("ks-identity", authority().issue(CALLER)), ("ks-identity", authority().issue(CALLER))),
            "more than once",
            id="doubled",
        ),
    ],
)
async def test_a_call_whose_identity_does_not_verify_is_refused(serve, metadata, reason):
    servicer = ScriptedServicer(IDEMPOTENT)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    method = IDEMPOTENT
    async with open_channel(target, services=[IDEMPOTENT_SERVICE]) as channel:
        call = channel.unary_unary(
            f"/{IDEMPOTENT_SERVICE.full_name}/{method.name}",
            request_serializer=GetMessageClass(method.input_type).SerializeToString,
            response_deserializer=GetMessageClass(method.output_type).FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(GetMessageClass(method.input_type)(), metadata=metadata)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason in (raised.value.details() or "")
    assert servicer.calls == 0


async def test_pending_method_answers_unimplemented_naming_the_capability(serve):
    target = await serve(IDEMPOTENT_SERVICE, None)
    with bound_identity(CALLER), pytest.raises(grpc.aio.AioRpcError) as raised:
        await _call(target, IDEMPOTENT_SERVICE, IDEMPOTENT)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    details = raised.value.details() or ""
    assert f"{IDEMPOTENT_SERVICE.full_name}/{IDEMPOTENT.name}" in details
    assert "the test capability" in details


async def test_idempotent_call_is_retried_through_transient_unavailability(serve):
    servicer = ScriptedServicer(IDEMPOTENT, failures=2)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    with bound_identity(CALLER):
        await _call(target, IDEMPOTENT_SERVICE, IDEMPOTENT, retry=RetryPolicy(initial_backoff_seconds=0.01))
    assert servicer.calls == 3


async def test_non_idempotent_call_is_never_repeated(serve):
    servicer = ScriptedServicer(NOT_IDEMPOTENT, failures=2)
    target = await serve(OTHER_SERVICE, servicer)
    with bound_identity(CALLER), pytest.raises(grpc.aio.AioRpcError) as raised:
        await _call(target, OTHER_SERVICE, NOT_IDEMPOTENT, retry=RetryPolicy(initial_backoff_seconds=0.01))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert servicer.calls == 1


async def test_default_deadline_applies_to_calls_without_one(serve):
    servicer = ScriptedServicer(IDEMPOTENT, delay=1.0)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    with bound_identity(CALLER), pytest.raises(grpc.aio.AioRpcError) as raised:
        await _call(target, IDEMPOTENT_SERVICE, IDEMPOTENT, unary_timeout=0.2)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_client_and_server_spans_share_one_trace(serve, spans):
    from opentelemetry import trace

    servicer = ScriptedServicer(IDEMPOTENT)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as root, bound_identity(CALLER):
        await _call(target, IDEMPOTENT_SERVICE, IDEMPOTENT)
    finished = {s.name: s for s in spans.get_finished_spans()}
    name = f"/{IDEMPOTENT_SERVICE.full_name}/{IDEMPOTENT.name}"
    rpc_spans = [s for s in spans.get_finished_spans() if s.name.lstrip("/") == name.lstrip("/")]
    kinds = {s.kind.name: s for s in rpc_spans}
    assert set(kinds) == {"CLIENT", "SERVER"}, finished.keys()
    client, server = kinds["CLIENT"], kinds["SERVER"]
    assert client.context.trace_id == server.context.trace_id == root.get_span_context().trace_id
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert server.attributes["ks.tenant.id"] == "acme"


async def test_health_and_reflection(serve):
    target = await serve(IDEMPOTENT_SERVICE, None)
    async with open_channel(target) as channel:
        assert await check_health(channel) == "SERVING"
        assert await check_health(channel, IDEMPOTENT_SERVICE.full_name) == "SERVING"
        assert await check_health(channel, "no.such.Service") == "NOT_FOUND"
    listing = await asyncio.to_thread(list_methods, target)
    assert f"{IDEMPOTENT.name} (unary)" in listing[IDEMPOTENT_SERVICE.full_name]
    assert "grpc.health.v1.Health" in listing


async def test_stop_reports_not_serving_and_finishes_in_flight_calls():
    servicer = ScriptedServicer(IDEMPOTENT, delay=0.5)
    server = GrpcServer(
        name="test",
        bind="127.0.0.1:0",
        bindings=[bind_service(IDEMPOTENT_SERVICE, servicer, pending="x")],
        grace=5.0,
    )
    await server.start()
    target = f"127.0.0.1:{server.port}"
    with bound_identity(CALLER):
        in_flight = asyncio.create_task(_call(target, IDEMPOTENT_SERVICE, IDEMPOTENT))
        await asyncio.sleep(0.2)
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0.05)
        status = await server.health.Check(health_pb2.HealthCheckRequest(service=""), None)
        assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
        response = await in_flight
    await stopping
    assert response is not None
    assert servicer.calls == 1


async def test_servicer_methods_must_be_async():
    class SyncServicer:
        def __getattr__(self, name: str) -> object:
            return lambda request, context: None

    with pytest.raises(TypeError, match="must be async"):
        bind_service(IDEMPOTENT_SERVICE, SyncServicer(), pending="x")


async def test_a_call_the_caller_gives_up_on_is_cancelled_on_the_server(serve):
    """A caller that stops waiting (a cancelled task, a closed request) cancels the call on the wire,
    so the server stops the work instead of finishing it for nobody."""
    cancelled = asyncio.Event()
    started = asyncio.Event()
    response = GetMessageClass(IDEMPOTENT.output_type)

    class Slow:
        pass

    async def behavior(request: object, context: grpc.aio.ServicerContext) -> object:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return response()

    servicer = Slow()
    setattr(servicer, IDEMPOTENT.name, behavior)
    target = await serve(IDEMPOTENT_SERVICE, servicer)
    with bound_identity(CALLER):
        async with open_channel(target, services=[IDEMPOTENT_SERVICE]) as channel:
            call = channel.unary_unary(
                f"/{IDEMPOTENT_SERVICE.full_name}/{IDEMPOTENT.name}",
                request_serializer=GetMessageClass(IDEMPOTENT.input_type).SerializeToString,
                response_deserializer=response.FromString,
            )

            async def ask() -> object:
                return await call(GetMessageClass(IDEMPOTENT.input_type)())

            task = asyncio.create_task(ask())
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(cancelled.wait(), 5)
