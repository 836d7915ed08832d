"""A service's contract served on loopback for tests: a real gRPC server and a channel to it.

Tests of a caller (a client, a service calling a peer) run the peer as a scripted servicer behind the
real contract, so what crosses the wire — identity, deadlines, status details — is what production
sends. ``async with serving("retrieval", FakeRetrieval()) as channel: …``
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import grpc

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.rpc.channel import open_channel
from knowsphere_runtime.rpc.server import GrpcServer, ServiceBinding, bind_service


@asynccontextmanager
async def serving(
    service: str,
    servicer: object | Sequence[object] | None = None,
    *,
    binding: ServiceBinding | None = None,
    options: Sequence[tuple[str, object]] = (),
) -> AsyncIterator[grpc.aio.Channel]:
    """Serves ``service``'s contract by ``servicer`` (or a ready ``binding``) on a free loopback port
    and yields a channel to it, as :func:`open_channel` builds for real callers."""
    contract = CONTRACTS[service]
    server = GrpcServer(
        name=f"{service}-test",
        bind="127.0.0.1:0",
        bindings=[binding or bind_service(contract.descriptor, servicer, pending="")],
        grace=0.5,
        options=options,
    )
    await server.start()
    channel = open_channel(f"127.0.0.1:{server.port}", services=[contract.descriptor])
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(0)
