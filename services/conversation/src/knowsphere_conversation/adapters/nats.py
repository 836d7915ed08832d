"""The conversation's durable state on NATS JetStream: the turn event log and the session leases.

- :class:`StreamEventLog` reads back what a turn has published (``KS_CHAT_EVENTS``, one subject per
  turn) when the turn is delivered again.
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
from nats.js import JetStreamContext
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from knowsphere_contracts.events import CHAT_EVENTS_STREAM, ChatTurnEvent
from knowsphere_runtime.streams import read_subject

log = structlog.get_logger(__name__)

LEASE_BUCKET = "ks_conversation_sessions"
"""KV bucket of the session leases."""


class StreamEventLog:
    """``js`` gives the JetStream context of the service's connection (once it is connected)."""

    def __init__(self, js: Callable[[], JetStreamContext], *, timeout: float = 2.0) -> None:
        self._js = js
        self._timeout = timeout

    async def read(self, turn_id: str) -> Sequence[ChatTurnEvent]:
        stored = await read_subject(
            self._js(), CHAT_EVENTS_STREAM, ChatTurnEvent.subject_for(turn_id), timeout=self._timeout
        )
        return [ChatTurnEvent.model_validate_json(data) for data, _ in stored]


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
