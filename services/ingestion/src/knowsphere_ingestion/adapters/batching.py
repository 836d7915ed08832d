"""Batching of many documents' calls into few: embeddings per model, writes to retrieval.

The workers run many documents at once; each asks for its own embeddings and writes its own chunks.
Calls cost per call as much as per item (a model batch, a retrieval commit), so requests that arrive
together share calls through a :class:`Coalescer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from knowsphere_clients import ModelHubClient
from knowsphere_runtime.identity import Identity, bound_identity, current_identity

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Pending(Generic[T, R]):
    items: list[T]
    future: asyncio.Future[list[R]]
    identity: Identity | None


@dataclass
class _Queue(Generic[T, R]):
    pending: list[_Pending[T, R]] = field(default_factory=list)
    in_flight: int = 0


class Coalescer(Generic[T, R]):
    """Merges concurrent requests of many documents into few calls: batches fill while a call runs.

    Requests share a queue per (tenant, ``key``). At most ``max_in_flight`` calls per queue run at a
    time; requests arriving meanwhile leave together, up to ``batch_size`` items per call, as soon as
    one returns. A lone request on an idle queue therefore goes at once, and a busy backend gets full
    batches however the documents trickle in. ``max_wait`` adds a short pause before a call that would
    leave less than half full, to let stragglers join. ``call(key, items)`` returns one result per item.
    """

    def __init__(
        self,
        call: Callable[[str, list[T]], Awaitable[list[R]]],
        *,
        batch_size: int,
        max_wait: float = 0.0,
        max_in_flight: int = 1,
    ) -> None:
        self._call = call
        self._batch_size = batch_size
        self._max_wait = max_wait
        self._max_in_flight = max_in_flight
        self._queues: dict[tuple[str, str], _Queue[T, R]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def submit(self, key: str, items: Sequence[T]) -> list[R]:
        if not items:
            return []
        identity = current_identity()
        queue_key = (identity.tenant_id if identity else "", key)
        queue = self._queues.setdefault(queue_key, _Queue())
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        queue.pending.append(_Pending(list(items), future, identity))
        self._pump(queue_key, queue)
        return await future

    def _take(self, queue: _Queue[T, R], batch: list[_Pending[T, R]]) -> int:
        """Moves waiting requests into ``batch`` while they fit in one call; returns its size."""
        size = sum(len(p.items) for p in batch)
        while queue.pending and (not batch or size + len(queue.pending[0].items) <= self._batch_size):
            request = queue.pending.pop(0)
            batch.append(request)
            size += len(request.items)
        return size

    def _pump(self, queue_key: tuple[str, str], queue: _Queue[T, R]) -> None:
        while queue.pending and queue.in_flight < self._max_in_flight:
            batch: list[_Pending[T, R]] = []
            size = self._take(queue, batch)
            queue.in_flight += 1
            task = asyncio.create_task(self._send(queue_key, queue, batch, wait=size * 2 < self._batch_size))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(
        self, queue_key: tuple[str, str], queue: _Queue[T, R], batch: list[_Pending[T, R]], *, wait: bool
    ) -> None:
        try:
            if wait and self._max_wait > 0:
                await asyncio.sleep(self._max_wait)
                self._take(queue, batch)  # stragglers that arrived during the pause ride along
            items = [item for request in batch for item in request.items]
            try:
                with bound_identity(batch[0].identity):
                    results: list[R] = []
                    for start in range(0, len(items), self._batch_size):
                        results.extend(
                            await self._call(queue_key[1], items[start : start + self._batch_size])
                        )
            except Exception as error:
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)
                return
            offset = 0
            for request in batch:
                part = results[offset : offset + len(request.items)]
                offset += len(request.items)
                if not request.future.done():
                    request.future.set_result(part)
        finally:
            queue.in_flight -= 1
            self._pump(queue_key, queue)


class EmbedBatcher:
    """Embeds texts of many documents together (per model and tenant) through one :class:`Coalescer`."""

    def __init__(
        self, modelhub: ModelHubClient, *, batch_size: int, max_wait: float, max_in_flight: int = 1
    ) -> None:
        self._calls: Coalescer[str, list[float]] = Coalescer(
            modelhub.embed, batch_size=batch_size, max_wait=max_wait, max_in_flight=max_in_flight
        )

    async def embed(self, model_id: str, texts: Sequence[str]) -> list[list[float]]:
        return await self._calls.submit(model_id, texts)


class WriteBatcher(Generic[T]):
    """Writes items of many documents to retrieval together (per tenant), e.g. their chunks or their
    metadata.

    Each write costs retrieval a commit, whatever its size, so documents finishing at the same time
    share calls. A caller's items are written when its await returns.
    """

    def __init__(
        self, write: Callable[[list[T]], Awaitable[object]], *, batch_size: int, max_in_flight: int = 1
    ) -> None:
        async def call(_: str, items: list[T]) -> list[None]:
            await write(items)
            return [None] * len(items)

        self._calls: Coalescer[T, None] = Coalescer(call, batch_size=batch_size, max_in_flight=max_in_flight)

    async def write(self, items: Sequence[T]) -> None:
        await self._calls.submit("", items)
