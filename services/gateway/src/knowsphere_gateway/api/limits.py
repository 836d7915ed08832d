"""Limits of the public API: how big and how slow a request body may be, and how many requests one
caller may make, per second and at once.

- **Body size** (:class:`BodyLimits`, ASGI middleware, before routing): an upload (a path of
  ``uploads.UPLOAD_PATHS``) may be ``max_upload_bytes`` in all, any other body ``max_body_bytes``. A
  ``Content-Length`` over the limit is refused with 413 before a byte of the body is read; a body
  without one (chunked) is counted as it arrives and cut off with 413 at the limit, so nothing past it
  is read, let alone spooled.
- **Body time**: a body that stalls for ``body_idle_timeout_seconds``, or that has taken longer than
  that and arrives slower than ``body_min_bytes_per_second`` on average (a slow-loris upload), is
  refused with 408. Only the wait for the body counts, not the time the route spends on it.
- **Per caller** (:func:`caller_limits_dependency`, a dependency of every guarded route, after the
  role check): a token bucket of ``caller_rate_limit_burst`` requests refilled at
  ``caller_rate_limit_per_second``, and at most ``caller_max_concurrent_requests`` requests in flight
  (an open event stream counts until it ends). Over either → 429 with ``Retry-After``. A caller is
  their API token, or, without one (proxy, local mode), their tenant and user.
- **Per application**: a request with an application's token also takes one from the application's
  own bucket (its ``rate_limit_per_second`` and ``rate_limit_burst``), shared by all its tokens and
  keyed by tenant and application id; an empty one → 429 with ``Retry-After`` naming the application.
  A route that serves an application whatever the token (its A2A agent, ``api/a2a.py``) takes from the
  same bucket (:class:`ApplicationLimits`, one per app).

The per-caller counts live in this process: with several gateway replicas each applies the limits on
its own, so a caller spread over N replicas gets up to N times the rate. A shared count (NATS KV)
would put a bus round trip and a compare-and-set retry loop in front of every request for a limit
whose purpose — keeping one caller from starving the others on a replica — is met per replica.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Annotated

from fastapi import Depends
from starlette.datastructures import Headers
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import HttpError, record_refusal
from knowsphere_gateway.domain.applications import ApplicationRecord
from knowsphere_gateway.domain.limits import (
    DEFAULT_LIMITS,
    ConcurrencyLimiter,
    KeyedRateLimiter,
    Limits,
    RateLimiter,
    Refusal,
)


class BodyRefused(HttpError):
    """A body over its size limit (413) or too slow (408); nothing more of it is read."""


def too_large(limit: int, upload: bool) -> BodyRefused:
    if upload:
        return BodyRefused(
            413,
            "payload_too_large",
            f"file: the upload is over the limit of {limit} bytes for one request (all files and parts; "
            "KS_GATEWAY_MAX_UPLOAD_BYTES); send fewer files per request",
            "file",
        )
    return BodyRefused(
        413,
        "payload_too_large",
        f"body: over the limit of {limit} bytes (KS_GATEWAY_MAX_BODY_BYTES)",
        "body",
    )


def too_slow(message: str) -> BodyRefused:
    return BodyRefused(408, "request_timeout", f"body: {message}", "body", headers={"connection": "close"})


class _Body:
    """The wrapped ``receive`` of one request: counts and times the body, refuses it at a limit."""

    def __init__(
        self, receive: Receive, max_bytes: int, upload: bool, limits: Limits, clock: Callable[[], float]
    ) -> None:
        self._receive = receive
        self._max_bytes = max_bytes
        self._upload = upload
        self._limits = limits
        self._clock = clock
        self._started = clock()
        self._received = 0
        self._complete = False
        self.refusal: BodyRefused | None = None

    async def __call__(self) -> Message:
        if self.refusal is not None:
            raise self.refusal
        if self._complete:
            return await self._receive()  # after the body: waiting for a disconnect is no body read
        idle = self._limits.body_idle_timeout_seconds
        try:
            async with asyncio.timeout(idle):
                message = await self._receive()
        except TimeoutError:
            stalled = too_slow(f"nothing arrived for {idle:g} s (KS_GATEWAY_BODY_IDLE_TIMEOUT_SECONDS)")
            raise self._refuse(stalled) from None
        if message["type"] != "http.request":
            self._complete = True
            return message
        self._received += len(message.get("body", b""))
        if self._received > self._max_bytes:
            raise self._refuse(too_large(self._max_bytes, self._upload))
        if not message.get("more_body", False):
            self._complete = True
            return message
        elapsed = self._clock() - self._started
        minimum = self._limits.body_min_bytes_per_second
        if elapsed > idle and self._received < minimum * elapsed:
            raise self._refuse(
                too_slow(
                    f"arriving slower than {minimum} bytes per second (KS_GATEWAY_BODY_MIN_BYTES_PER_SECOND)"
                )
            )
        return message

    def _refuse(self, refusal: BodyRefused) -> BodyRefused:
        self.refusal = refusal
        record_refusal(refusal.body["code"])
        return refusal


class BodyLimits:
    """ASGI middleware applying the body size and time limits; ``upload_paths`` are the route templates
    of uploads (their bodies get ``max_upload_bytes``)."""

    def __init__(
        self,
        app: ASGIApp,
        limits: Limits,
        upload_paths: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.limits = limits
        self.clock = clock
        self._uploads = [compile_path(path)[0] for path in upload_paths]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = any(pattern.match(scope["path"]) for pattern in self._uploads)
        max_bytes = self.limits.max_upload_bytes if upload else self.limits.max_body_bytes
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            record_refusal("payload_too_large")
            await too_large(max_bytes, upload).response()(scope, receive, send)
            return
        body = _Body(receive, max_bytes, upload, self.limits, self.clock)
        started = replaced = False

        async def respond(message: Message) -> None:
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start" and not started:
                started = True
                if body.refusal is not None:
                    # Whatever the route made of the refused body (a parse error, say), the refusal
                    # is the answer.
                    replaced = True
                    await body.refusal.response()(scope, receive, send)
                    return
            await send(message)

        try:
            await self.app(scope, body, respond)
        except Exception:
            if body.refusal is None or started:
                raise
            await body.refusal.response()(scope, receive, send)


def caller_key(who: Caller) -> str:
    """Whose limits a request counts against: the API token, or the tenant and user without one."""
    if who.token_id:
        return f"token:{who.token_id}"
    return f"user:{who.identity.tenant_id}/{who.identity.user_id}"


def _over(refusal: Refusal, limits: Limits) -> HttpError:
    if refusal.limit == "rate":
        message = (
            f"rate limit: more than {limits.caller_rate_limit_per_second:g} requests per second "
            f"(bursts of {limits.caller_rate_limit_burst}) from this caller "
            "(KS_GATEWAY_CALLER_RATE_LIMIT_PER_SECOND, KS_GATEWAY_CALLER_RATE_LIMIT_BURST)"
        )
        code = "rate_limited"
    else:
        message = (
            f"concurrency limit: {limits.caller_max_concurrent_requests} requests of this caller are "
            "already in flight (KS_GATEWAY_CALLER_MAX_CONCURRENT_REQUESTS)"
        )
        code = "too_many_concurrent_requests"
    retry = refusal.retry_after_header
    return HttpError(429, code, f"{message}; retry after {retry} s", headers={"retry-after": retry})


def application_key(application: ApplicationRecord) -> str:
    """The bucket an application's requests count against (its tokens share it)."""
    return f"application:{application.tenant_id}/{application.id}"


def _application_over(refusal: Refusal, application: ApplicationRecord) -> HttpError:
    retry = refusal.retry_after_header
    return HttpError(
        429,
        "rate_limited",
        f"rate limit: more than {application.rate_limit_per_second:g} requests per second (bursts of "
        f"{application.rate_limit_burst}) through application {application.name} (its "
        f"rate_limit_per_second, rate_limit_burst); retry after {retry} s",
        headers={"retry-after": retry},
    )


class ApplicationLimits:
    """The applications' own buckets, one per application, shared by every route that counts a request
    against an application."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = KeyedRateLimiter(clock)

    def take(self, application: ApplicationRecord) -> None:
        """Takes one request from ``application``'s bucket; 429 naming the application when it is empty."""
        over = self._rate.take(
            application_key(application), application.rate_limit_per_second, application.rate_limit_burst
        )
        if over is not None:
            raise _application_over(over, application)


def caller_limits_dependency(
    caller: Callable[..., Awaitable[Caller]],
    limits: Limits,
    clock: Callable[[], float] = time.monotonic,
    applications: ApplicationLimits | None = None,
) -> Callable[..., AsyncIterator[None]]:
    """A router-level dependency: 429 when the caller is over the rate or concurrency limit; holds the
    caller's slot until the response (an event stream included) is over. ``applications``: the
    applications' buckets, when other routes share them."""
    rate = RateLimiter(limits.caller_rate_limit_per_second, limits.caller_rate_limit_burst, clock)
    in_flight = ConcurrencyLimiter(limits.caller_max_concurrent_requests)
    application_rate = applications or ApplicationLimits(clock)

    async def limited(who: Annotated[Caller, Depends(caller)]) -> AsyncIterator[None]:
        if who.application is not None:
            application_rate.take(who.application)
        key = caller_key(who)
        refusal = rate.take(key) or in_flight.acquire(key)
        if refusal is not None:
            raise _over(refusal, limits)
        try:
            yield
        finally:
            in_flight.release(key)

    return limited


__all__ = [
    "DEFAULT_LIMITS",
    "ApplicationLimits",
    "BodyLimits",
    "BodyRefused",
    "Limits",
    "application_key",
    "caller_key",
    "caller_limits_dependency",
]
