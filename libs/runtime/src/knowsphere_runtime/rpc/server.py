"""The gRPC server every service runs: health, reflection, tracing and identity built in.

A service hands :class:`GrpcServer` a list of :class:`ServiceBinding` built by :func:`bind_service`
from the generated service descriptor and a servicer object. Methods the servicer does not
implement answer UNIMPLEMENTED with a message naming the capability they belong to — never a
made-up answer. With the process's mutual-TLS settings (:mod:`knowsphere_runtime.rpc.tls`) the port
takes TLS connections with a client certificate only, and a plaintext port may serve health alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.instrumentation.grpc.filters import any_of, negate, service_name

from knowsphere_runtime import dependencies
from knowsphere_runtime.rpc.identity_interceptors import (
    IDENTITY_EXEMPT_SERVICES,
    IdentityServerInterceptor,
)
from knowsphere_runtime.rpc.tls import INSTALLED, TlsChoice, resolve_tls

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass(frozen=True)
class ServiceBinding:
    """One gRPC service ready to be added to a server."""

    full_name: str
    handler: grpc.GenericRpcHandler
    implemented: tuple[str, ...]
    pending: tuple[str, ...]


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _unimplemented_behavior(method: MethodDescriptor, message: str) -> Callable[..., Any]:
    if method.server_streaming:

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)
            yield  # pragma: no cover - abort raises

        return stream

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    return unary


def _implementation(servicers: Sequence[object], method: MethodDescriptor) -> Callable[..., Any] | None:
    """The servicers' one implementation of ``method``, by its proto name or its snake_case name."""
    found: list[tuple[object, Callable[..., Any]]] = []
    for servicer in servicers:
        for name in (method.name, _snake(method.name)):
            behavior = getattr(servicer, name, None)
            if behavior is not None and callable(behavior):
                if not (inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)):
                    raise TypeError(f"{type(servicer).__name__}.{name} must be async (grpc.aio)")
                found.append((servicer, behavior))
                break
    if len(found) > 1:
        owners = ", ".join(type(servicer).__name__ for servicer, _ in found)
        raise TypeError(f"{method.name} is implemented by more than one servicer: {owners}")
    return found[0][1] if found else None


def bind_service(
    descriptor: ServiceDescriptor,
    servicer: object | Sequence[object] | None,
    *,
    pending: str | Mapping[str, str],
) -> ServiceBinding:
    """Bind ``servicer`` to the service ``descriptor``: one object, or several that each implement
    some of its methods (a service split by concern); a method implemented twice is an error.

    ``pending`` says which capability an unimplemented method belongs to: one text for the whole
    service, or a mapping method name → text (methods missing from the mapping fall back to
    ``pending.get("*")``).
    """
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    implemented: list[str] = []
    waiting: list[str] = []
    servicers: Sequence[object] = (
        [] if servicer is None else list(servicer) if isinstance(servicer, (list, tuple)) else [servicer]
    )
    for method in descriptor.methods:
        request_cls = GetMessageClass(method.input_type)
        response_cls = GetMessageClass(method.output_type)
        behavior = _implementation(servicers, method)
        if behavior is None:
            capability = (
                pending if isinstance(pending, str) else pending.get(method.name, pending.get("*", ""))
            )
            message = f"{descriptor.full_name}/{method.name} is not implemented yet" + (
                f": it arrives with {capability}" if capability else ""
            )
            behavior = _unimplemented_behavior(method, message)
            waiting.append(method.name)
        else:
            implemented.append(method.name)
        factory = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = factory(
            behavior,
            request_deserializer=request_cls.FromString,
            response_serializer=response_cls.SerializeToString,
        )
    return ServiceBinding(
        full_name=descriptor.full_name,
        handler=grpc.method_handlers_generic_handler(descriptor.full_name, handlers),
        implemented=tuple(implemented),
        pending=tuple(waiting),
    )


class GrpcServer:
    """A grpc.aio server with health, reflection, OpenTelemetry and identity interceptors.

    ``stop`` marks every service NOT_SERVING first (so load balancers and the gateway stop sending
    work), then lets in-flight calls finish for up to ``grace`` seconds. While a dependency of the
    process is down (:mod:`knowsphere_runtime.dependencies`, e.g. the NATS connection) every service
    answers NOT_SERVING too.

    ``tls`` (by default the process's ``KS_TLS_*`` settings) makes the port mutual TLS; its
    ``health_port`` then adds a plaintext port on the same host that serves grpc.health.v1 alone
    (the same statuses) for probes that have no certificate.
    """

    def __init__(
        self,
        *,
        name: str,
        bind: str,
        bindings: Sequence[ServiceBinding],
        grace: float,
        require_identity: bool = True,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        options: Sequence[tuple[str, Any]] = (),
        tls: TlsChoice = INSTALLED,
    ) -> None:
        self.name = name
        self._bind = bind
        self._bindings = list(bindings)
        self._grace = grace
        # Health and reflection probes are frequent and carry no work: keep them out of traces.
        trace_filter = negate(any_of(*(service_name(s) for s in IDENTITY_EXEMPT_SERVICES)))
        self._server = grpc.aio.server(
            interceptors=[
                aio_server_interceptor(filter_=trace_filter),
                IdentityServerInterceptor(required=require_identity),
                *interceptors,
            ],
            options=list(options),
        )
        self.health = health_aio.HealthServicer()
        self.port: int | None = None
        self._tls = resolve_tls(tls)
        self._health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        self._stop_listening: Callable[[], None] | None = None

    async def _set_all(self, status: int) -> None:
        await self.health.set("", status)  # type: ignore[arg-type]
        for service in self.service_names:
            await self.health.set(service, status)  # type: ignore[arg-type]

    async def _dependencies_changed(self, down: frozenset[str]) -> None:
        await self._set_all(NOT_SERVING if down else SERVING)

    @property
    def service_names(self) -> list[str]:
        return [b.full_name for b in self._bindings]

    async def start(self) -> int:
        for binding in self._bindings:
            self._server.add_generic_rpc_handlers((binding.handler,))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            [
                *self.service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self._server,
        )
        if self._tls is None:
            port = self._server.add_insecure_port(self._bind)
        else:
            port = self._server.add_secure_port(self._bind, self._tls.server_credentials())
        if port == 0:
            raise OSError(f"{self.name}: cannot bind gRPC to {self._bind} (address in use or not allowed)")
        self.port = port
        await self._server.start()
        await self._set_all(NOT_SERVING if dependencies.down() else SERVING)
        if self._tls is not None and self._tls.health_port is not None:
            try:
                await self._start_health_port(self._tls.health_port)
            except BaseException:
                await self._server.stop(0)
                raise
        self._stop_listening = dependencies.listen(self._dependencies_changed)
        return port

    async def _start_health_port(self, port: int) -> None:
        """A plaintext server with the health service alone, sharing this server's statuses: nothing
        else is registered there, so any other method answers UNIMPLEMENTED."""
        host = self._bind.rpartition(":")[0]
        # Not shared with another process (gRPC's default): a busy port must fail, not split the probes.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        try:
            bound = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # grpc raises where older versions returned 0
            bound = 0
        if bound == 0:
            raise OSError(f"{self.name}: cannot bind the health port {host}:{port} (KS_TLS_HEALTH_PORT)")
        await server.start()
        self._health_server = server
        self.health_port = bound

    async def stop(self, grace: float | None = None) -> None:
        if self._stop_listening is not None:
            self._stop_listening()
        await self.health.enter_graceful_shutdown()
        await self._server.stop(self._grace if grace is None else grace)
        # Last: probes see NOT_SERVING on it while in-flight calls finish.
        if self._health_server is not None:
            await self._health_server.stop(0)

    async def wait(self) -> None:
        await self._server.wait_for_termination()
