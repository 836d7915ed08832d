"""The conversation's durable state on NATS JetStream: the turn event log and the session leases.

- :class:`StreamEventLog` reads back what a turn has published (``KS_CHAT_EVENTS``, one subject per
  turn of a tenant) when the turn is delivered again.
- :class:`KvSessionLeases` keeps one turn per session running across replicas: a key per session in a
  KV bucket, created only if absent, renewed while the turn runs and deleted when it ends; a replica
  that dies leaves a lease that expires after ``ttl`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from knowsphere_contracts.events import CHAT_EVENTS_STREAM, ChatTurnEvent, TurnEventKind
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.streams import SESSION_LEASES_BUCKET, read_subject

log = structlog.get_logger(__name__)

LEASE_BUCKET = SESSION_LEASES_BUCKET
"""KV bucket of the session leases."""


class StreamEventLog:
    """``js`` gives the JetStream context of the service's connection (once it is connected)."""

    def __init__(self, js: Callable[[], JetStreamContext], *, timeout: float = 2.0) -> None:
        self._js = js
        self._timeout = timeout

    async def read(self, turn_id: str) -> Sequence[ChatTurnEvent]:
        """The events of the current tenant's turn ``turn_id``."""
        subject = ChatTurnEvent.subject_for(require_identity().tenant_id, turn_id)
        stored = await read_subject(self._js(), CHAT_EVENTS_STREAM, subject, timeout=self._timeout)
        return [ChatTurnEvent.model_validate_json(data) for data, _ in stored]


class TurnCanceller:
    """Cancels a turn of the current tenant wherever it runs: asks every replica (``request``) and
    waits up to ``wait`` seconds for the turn's ``cancelled`` event; True when it came."""

    def __init__(
        self,
        connection: Callable[[], NatsClient],
        request: Callable[[str], Awaitable[None]],
        *,
        wait: float,
    ) -> None:
        self._connection = connection
        self._request = request
        self._wait = wait

    async def __call__(self, turn_id: str) -> bool:
        ended: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        async def on_event(message: Msg) -> None:
            event = ChatTurnEvent.model_validate_json(message.data)
            if event.is_final and not ended.done():
                ended.set_result(event.kind is TurnEventKind.CANCELLED)

        subject = ChatTurnEvent.subject_for(require_identity().tenant_id, turn_id)
        subscription = await self._connection().subscribe(subject, cb=on_event)
        try:
            await self._request(turn_id)
            return await asyncio.wait_for(ended, self._wait)
        except TimeoutError:
            return False  # not running anywhere (finished, queued, or never was)
        finally:
            await subscription.unsubscribe()


class KvSessionLeases:
    """``bucket`` opens (creating it if needed) the KV bucket of the leases, once connected."""

    def __init__(self, bucket: Callable[[], Awaitable[KeyValue]], *, ttl: float) -> None:
        self._bucket = bucket
        self._kv: KeyValue | None = None
        self._renew_every = ttl / 3

    @staticmethod
    def _key(thread: str) -> str:
        # KV keys allow a restricted alphabet; the thread id (tenant/user/session) may not fit it.
        return hashlib.sha256(thread.encode()).hexdigest()

    @contextlib.asynccontextmanager
    async def hold(self, thread: str) -> AsyncIterator[bool]:
        key = self._key(thread)
        if self._kv is None:
            self._kv = await self._bucket()
        kv = self._kv
        try:
            revision = await kv.create(key, b"1")
        except KeyWrongLastSequenceError:
            yield False
            return
        lost = asyncio.Event()

        async def renew() -> None:
            nonlocal revision
            while True:
                await asyncio.sleep(self._renew_every)
                try:
                    revision = await kv.update(key, b"1", last=revision)
                except Exception:
                    log.warning("session lease lost", key=key)
                    lost.set()
                    return

        renewing = asyncio.create_task(renew())
        try:
            yield True
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            with contextlib.suppress(Exception):
                await kv.delete(key, last=revision)


__all__ = ["LEASE_BUCKET", "KvSessionLeases", "StreamEventLog"]
