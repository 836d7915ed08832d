"""What every client shares: the stub of its contract and calls whose failures are decoded once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from knowsphere_clients.errors import decode
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc import open_channel
from knowsphere_runtime.settings import ServiceSettings


class ServiceClient:
    """A typed client of one internal service over a channel from ``knowsphere_runtime.rpc.open_channel``.

    The channel carries the caller's identity, language, trace context and default deadlines; the
    client adds nothing but typed methods and decoded errors. It does not own the channel.
    """

    service: str = ""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = CONTRACTS[self.service].stub(channel)

    async def _call(self, method: str, request: Any, *, timeout: float | None = None) -> Any:
        """A unary call (or a client-streaming one, with an async iterable of requests)."""
        try:
            return await getattr(self._stub, method)(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise decode(error, service=self.service, method=method) from error

    async def _stream(self, method: str, request: Any, *, timeout: float | None = None) -> AsyncIterator[Any]:
        """The responses of a server-streaming call; the call is cancelled when the caller stops."""
        call = getattr(self._stub, method)(request, timeout=timeout)
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as error:
            raise decode(error, service=self.service, method=method) from error
        finally:
            call.cancel()


def service_channel(service: str, address: str, settings: ServiceSettings) -> grpc.aio.Channel:
    """A channel to ``service`` at ``address`` with the caller's deadlines, retrying the contract's
    idempotent methods (see ``knowsphere_runtime.rpc.open_channel``)."""
    return open_channel(
        address,
        services=[CONTRACTS[service].descriptor],
        unary_timeout=settings.rpc_timeout_seconds,
        stream_timeout=settings.rpc_stream_timeout_seconds,
    )
