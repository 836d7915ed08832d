"""Temporal client with OpenTelemetry propagation.

Workflows started through this client carry the caller's trace context in Temporal headers,
so every workflow and activity span is a descendant of the span that started it. Identity is
part of each workflow's typed input (it must survive replays), not of ambient context.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor


async def connect_temporal(address: str, *, namespace: str = "default") -> Client:
    return await Client.connect(address, namespace=namespace, interceptors=[TracingInterceptor()])


class TemporalConnection:
    """A lifecycle component holding the Temporal client; start-up waits for the server.

    The server may come up after this service (on Kubernetes nothing orders pods), so ``start``
    retries for ``connect_timeout`` seconds and then fails with the address it tried.
    """

    name = "temporal"

    def __init__(self, address: str, namespace: str, connect_timeout: float = 60.0) -> None:
        self.address = address
        self.namespace = namespace
        self.connect_timeout = connect_timeout
        self.client: Client | None = None

    async def start(self) -> object:
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        delay = 0.2
        while True:
            try:
                self.client = await connect_temporal(self.address, namespace=self.namespace)
                return self.client
            except Exception as error:  # the SDK raises RuntimeError for connection failures
                if loop.time() + delay > deadline:
                    raise ConnectionError(
                        f"cannot reach Temporal at {self.address} (namespace {self.namespace!r}) "
                        f"within {self.connect_timeout:.0f} s: {error}"
                    ) from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def stop(self, grace: float | None = None) -> None:
        self.client = None
