"""Interceptors that carry caller identity (and language) across gRPC: the server verifies the signed
identity token of every call, the client attaches one signed by this process."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import trace

from knowsphere_runtime.identity import (
    LANGUAGE_KEY,
    Identity,
    IdentityError,
    current_identity,
    current_language,
    set_identity,
)
from knowsphere_runtime.identity_token import TOKEN_KEY, authority, identity_from_token_pairs
from knowsphere_telemetry import attributes

# Infrastructure services answer without a caller identity.
IDENTITY_EXEMPT_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)


def _service_of(method: str) -> str:
    # "/pkg.Service/Method" -> "pkg.Service"
    return method.lstrip("/").split("/", 1)[0]


def _wrap_handler(
    handler: grpc.RpcMethodHandler, identity: Identity | None, rejection: str | None
) -> grpc.RpcMethodHandler:
    def enter(context: Any) -> Awaitable[None] | None:
        if rejection is not None:
            return context.abort(grpc.StatusCode.UNAUTHENTICATED, rejection)  # type: ignore[no-any-return]
        set_identity(identity)
        if identity is not None:
            span = trace.get_current_span()
            span.set_attribute(attributes.TENANT_ID, identity.tenant_id)
            span.set_attribute(attributes.USER_ID, identity.user_id)
        return None

    def unary_response(behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapped(request: Any, context: Any) -> Any:
            aborted = enter(context)
            if aborted is not None:
                await aborted
            return await behavior(request, context)

        return wrapped

    def stream_response(behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapped(request: Any, context: Any) -> AsyncIterator[Any]:
            aborted = enter(context)
            if aborted is not None:
                await aborted
            result = behavior(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:
                await result

        return wrapped

    common = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary_response(handler.unary_unary), **common)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream_response(handler.unary_stream), **common)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary_response(handler.stream_unary), **common)
    if handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(stream_response(handler.stream_stream), **common)
    return handler


class IdentityServerInterceptor(grpc.aio.ServerInterceptor):
    """Binds the caller identity proven by the call's signed token; rejects calls without one.

    Health and reflection are exempt. A call to any other service with no token, an unsigned
    identity, or a token that is forged, from an untrusted issuer or expired fails with
    UNAUTHENTICATED and a message saying which.
    """

    def __init__(self, *, required: bool = True) -> None:
        self._required = required

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method  # type: ignore[attr-defined]
        if _service_of(method) in IDENTITY_EXEMPT_SERVICES:
            return handler
        rejection: str | None = None
        identity: Identity | None = None
        try:
            identity = identity_from_token_pairs(handler_call_details.invocation_metadata or ())  # type: ignore[attr-defined]
        except IdentityError as error:
            rejection = f"{method}: {error}"
        if identity is None and rejection is None and self._required:
            rejection = f"{method}: caller identity is required (a signed {TOKEN_KEY} token in the metadata)"
        return _wrap_handler(handler, identity, rejection)


def _with_identity(details: grpc.aio.ClientCallDetails, timeout: float) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    identity = current_identity()
    if identity is not None and TOKEN_KEY not in metadata:
        metadata.add(TOKEN_KEY, authority().issue(identity))
    language = current_language()
    if language and LANGUAGE_KEY not in metadata:
        metadata.add(LANGUAGE_KEY, language)
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout if details.timeout is not None else timeout,
        metadata,
        details.credentials,
        details.wait_for_ready,
    )


async def _settled(call: Any) -> None:
    """Waits for ``call`` to end; its failure stays on the call for the caller to read."""
    try:
        await call
    except grpc.aio.AioRpcError:
        pass
    except asyncio.CancelledError:
        call.cancel()
        raise


class _ClientBase:
    def __init__(self, unary_timeout: float, stream_timeout: float) -> None:
        self._unary_timeout = unary_timeout
        self._stream_timeout = stream_timeout


class IdentityUnaryUnary(_ClientBase, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        call = await continuation(_with_identity(client_call_details, self._unary_timeout), request)
        # Waiting here, the innermost interceptor, ties the call to the caller's task: a caller that is
        # cancelled cancels the call on the wire. Through the tracing interceptor alone the
        # cancellation stops at its wrapper and the server finishes the work for nobody.
        await _settled(call)
        return call


class IdentityUnaryStream(_ClientBase, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(_with_identity(client_call_details, self._stream_timeout), request)


class IdentityStreamUnary(_ClientBase, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        call = await continuation(_with_identity(client_call_details, self._stream_timeout), request_iterator)
        await _settled(call)  # as for unary calls: a cancelled caller cancels the call
        return call


class IdentityStreamStream(_ClientBase, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        return await continuation(_with_identity(client_call_details, self._stream_timeout), request_iterator)


def identity_client_interceptors(
    unary_timeout: float, stream_timeout: float
) -> list[grpc.aio.ClientInterceptor]:
    """Client interceptors attaching identity and a default deadline to every call."""
    return [
        IdentityUnaryUnary(unary_timeout, stream_timeout),
        IdentityUnaryStream(unary_timeout, stream_timeout),
        IdentityStreamUnary(unary_timeout, stream_timeout),
        IdentityStreamStream(unary_timeout, stream_timeout),
    ]
