"""What every client shares: the stub of its contract and calls whose failures are decoded once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import structlog

from knowsphere_clients.errors import Unavailable, decode
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import open_channel
from knowsphere_runtime.settings import ServiceSettings

log = structlog.get_logger(__name__)

# Waits between attempts while a peer is unavailable: doubling from the first to the longest.
OUTAGE_FIRST_WAIT_SECONDS = 0.5
OUTAGE_LONGEST_WAIT_SECONDS = 10.0


class ServiceClient:
    """A typed client of one internal service over a channel from ``knowsphere_runtime.rpc.open_channel``.

    The channel carries the caller's identity, language, trace context and default deadlines; the
    client adds typed methods and decoded errors. It does not own the channel.

    ``outage_wait`` is how long a call waits out a peer that is UNAVAILABLE (down, restarting, not yet
    reachable) before failing: 0 (the default) fails at once, as a user-facing request should; work
    that can wait (ingestion's stages, whose calls are idempotent) gives minutes, retried with backoff.
    A server-streaming call is tried again only while it has yielded nothing.
    """

    service: str = ""

    def __init__(self, channel: grpc.aio.Channel, *, outage_wait: float = 0.0) -> None:
        self._stub = CONTRACTS[self.service].stub(channel)
        self._outage_wait = outage_wait

    async def _waited_out(self, error: Exception, method: str, started: float, attempt: int) -> bool:
        """Sleeps before the next attempt when ``error`` is an outage still within ``outage_wait``."""
        if not isinstance(error, Unavailable):
            return False
        elapsed = time.monotonic() - started
        pause = min(OUTAGE_FIRST_WAIT_SECONDS * 2**attempt, OUTAGE_LONGEST_WAIT_SECONDS)
        if elapsed + pause > self._outage_wait:
            return False
        log.warning(
            "peer unavailable; waiting to try again",
            peer=self.service,
            method=method,
            waited_seconds=round(elapsed, 1),
            outage_wait_seconds=self._outage_wait,
        )
        await asyncio.sleep(pause)
        return True

    async def _call(self, method: str, request: Any, *, timeout: float | None = None) -> Any:
        """A unary call (or a client-streaming one, with an async iterable of requests)."""
        started, attempt = time.monotonic(), 0
        while True:
            try:
                return await getattr(self._stub, method)(request, timeout=timeout)
            except grpc.aio.AioRpcError as error:
                decoded = decode(error, service=self.service, method=method)
                # A client-streaming request iterator cannot be replayed.
                replayable = not hasattr(request, "__aiter__")
                if not (replayable and await self._waited_out(decoded, method, started, attempt)):
                    raise decoded from error
            attempt += 1

    async def _stream(self, method: str, request: Any, *, timeout: float | None = None) -> AsyncIterator[Any]:
        """The responses of a server-streaming call; the call is cancelled when the caller stops."""
        started, attempt = time.monotonic(), 0
        while True:
            call = getattr(self._stub, method)(request, timeout=timeout)
            yielded = False
            try:
                async for response in call:
                    yielded = True
                    yield response
                return
            except grpc.aio.AioRpcError as error:
                decoded = decode(error, service=self.service, method=method)
                if yielded or not await self._waited_out(decoded, method, started, attempt):
                    raise decoded from error
            finally:
                call.cancel()
            attempt += 1


def service_channel(service: str, address: str, settings: ServiceSettings) -> grpc.aio.Channel:
    """A channel to ``service`` at ``address`` with the caller's deadlines, retrying the contract's
    idempotent methods (see ``knowsphere_runtime.rpc.open_channel``)."""
    return open_channel(
        address,
        services=[CONTRACTS[service].descriptor],
        unary_timeout=settings.rpc_timeout_seconds,
        stream_timeout=settings.rpc_stream_timeout_seconds,
    )
