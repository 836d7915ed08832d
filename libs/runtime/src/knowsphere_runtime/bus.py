"""NATS through FastStream, with trace context and caller identity in message headers.

:func:`build_broker` is the only way services create a broker: it installs FastStream's
OpenTelemetry middleware (a producer span per publish, a consumer span per message, W3C trace
context in headers) and :class:`IdentityMiddleware` (the signed ``ks-identity`` token header).

A service declares what it subscribes to and publishes on a ``NatsRouter`` in its ``api/bus.py``
(typed pydantic payloads; dependencies through FastStream's context), included into its broker by
its wiring; ``make asyncapi`` documents the events from those same routers. :class:`Fanout` hands the
events of one such subscriber to the many request handlers of a process that stream them to clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import structlog
from faststream import BaseMiddleware
from faststream.nats import NatsBroker
from faststream.nats.opentelemetry import NatsTelemetryMiddleware

from knowsphere_runtime import dependencies
from knowsphere_runtime.identity import IdentityError, bound_identity, current_identity
from knowsphere_runtime.identity_token import TOKEN_KEY, authority, identity_from_token_pairs
from knowsphere_runtime.nats_auth import NatsAuthSettings
from knowsphere_runtime.settings import load_settings

log = structlog.get_logger(__name__)


class IdentityMiddleware(BaseMiddleware):  # type: ignore[type-arg]
    """Signs the current identity into published headers; binds a message's verified identity while it
    is handled.

    A message whose identity does not verify (unsigned ``ks-tenant-id`` headers, a forged, foreign or
    expired token) is refused: logged, and taken off a JetStream stream (``term``) so it is not
    redelivered forever; its handler never runs. A message with no identity at all is handled with
    none bound (a handler that needs one refuses it).
    """

    async def consume_scope(self, call_next: Any, msg: Any) -> Any:
        try:
            identity = identity_from_token_pairs(msg.headers or {})
        except IdentityError as error:
            subject = getattr(msg.raw_message, "subject", None)
            log.error("message refused: its identity does not verify", subject=subject, error=str(error))
            if str(getattr(msg.raw_message, "reply", "")).startswith("$JS.ACK."):  # stop its redelivery
                with contextlib.suppress(Exception):
                    await msg.reject()
            return None
        with bound_identity(identity):
            return await call_next(msg)

    async def publish_scope(self, call_next: Any, cmd: Any) -> Any:
        identity = current_identity()
        if identity is not None and TOKEN_KEY not in cmd.headers:
            cmd.headers[TOKEN_KEY] = authority().issue(identity, ttl=authority().message_token_ttl)
        return await call_next(cmd)


def nats_servers(url: str) -> list[str]:
    """The servers of a NATS URL setting: one URL, or a comma-separated list of the servers of one
    cluster (``nats://127.0.0.1:4322,nats://127.0.0.1:4332``), which the client tries in turn and
    fails over between."""
    servers = [server.strip() for server in url.split(",") if server.strip()]
    if not servers:
        raise ValueError(f"NATS URL {url!r} names no server")
    return servers


def build_broker(
    url: str,
    *,
    client_name: str,
    graceful_timeout: float = 20.0,
    auth: NatsAuthSettings | None = None,
    **options: Any,
) -> NatsBroker:
    """A FastStream NATS broker with tracing and identity propagation, connected to ``url`` (one server
    or a cluster's list: :func:`nats_servers`).

    ``graceful_timeout`` is how long, on shutdown, in-flight handlers may run to completion
    before the connection closes. A lost connection is retried forever (every second, not the client
    library's default of giving up after about two minutes), and the process reports the bus down
    (:mod:`knowsphere_runtime.dependencies`) until it is back. The connection authenticates with
    ``auth``, by default the process's ``KS_NATS_*`` settings (:mod:`knowsphere_runtime.nats_auth`;
    a bad one stops start-up naming the variable). Something the server refuses it (a permissions
    violation) is logged as an error: nats-py reports it only to this callback.
    """
    connection = f"nats:{client_name}:{uuid.uuid4().hex[:8]}"
    credentials = auth if auth is not None else load_settings(NatsAuthSettings)
    options["security"] = credentials.security(options.get("security"))
    inboxes = credentials.inbox_prefix()
    if inboxes is not None:
        options.setdefault("inbox_prefix", inboxes)

    async def refused(error: Exception) -> None:
        # The server refuses a publish or subscription this identity has no permission for with an
        # asynchronous -ERR; the operation itself fails silently (a request times out, a subscription
        # hears nothing), so this line is what makes a missing permission visible.
        reason = str(error).lower()
        if "permissions violation" in reason:
            log.error(
                "NATS Permissions Violation: this process's NATS identity may not use a subject; "
                "see knowsphere_runtime.nats_permissions",
                client=client_name,
                error=str(error),
            )
        elif "authorization violation" in reason:
            log.error("NATS refused this process's credentials (KS_NATS_*)", client=client_name)
        else:  # a lost connection, retried (FastStream and the dependency report say so already)
            log.debug("NATS connection error", client=client_name, error=repr(error))

    async def lost() -> None:
        await dependencies.report(connection, up=False)

    async def back() -> None:  # reconnected, or closed on purpose (nothing to wait for any more)
        await dependencies.report(connection, up=True)

    options.setdefault("max_reconnect_attempts", -1)
    options.setdefault("reconnect_time_wait", 1.0)
    options.setdefault("disconnected_cb", lost)
    options.setdefault("reconnected_cb", back)
    options.setdefault("closed_cb", back)
    options.setdefault("error_cb", refused)
    return NatsBroker(
        nats_servers(url),
        name=client_name,
        graceful_timeout=graceful_timeout,
        middlewares=[NatsTelemetryMiddleware(), IdentityMiddleware],
        # A plain standard-library logger, so FastStream's lines share the service's JSON format.
        logger=logging.getLogger("knowsphere.bus"),
        # "Received"/"Processed" per message at DEBUG: at INFO they were a log line per event, the
        # largest cost of a busy subscriber. Failures are still logged at ERROR.
        log_level=logging.DEBUG,
        **options,
    )


E = TypeVar("E")


class Fanout(Generic[E]):
    """Events of one typed subscriber, handed to every watcher in this process that wants them.

    A service subscribes to a subject once (a typed FastStream handler that calls :meth:`publish`);
    request handlers that stream events to a client — a progress watch, a chat turn — open a
    :meth:`watch` with a predicate instead of a subscription of their own. Each watcher has a bounded
    queue: when a slow watcher's queue is full its oldest event is dropped (and counted), so one stuck
    client never holds the others or the process's memory.
    """

    def __init__(self, max_queue: int = 10_000) -> None:
        self._watchers: dict[int, tuple[Callable[[E], bool], asyncio.Queue[E]]] = {}
        self._max_queue = max_queue
        self.dropped = 0

    def publish(self, event: E) -> None:
        """Hand ``event`` to every watcher whose predicate accepts it; never blocks."""
        for accept, queue in list(self._watchers.values()):
            if not accept(event):
                continue
            if queue.full():
                queue.get_nowait()
                self.dropped += 1
            queue.put_nowait(event)

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    @asynccontextmanager
    async def watch(self, accept: Callable[[E], bool]) -> AsyncIterator[AsyncIterator[E]]:
        """Events accepted by ``accept`` from entry on (nothing published after entering is missed)."""
        queue: asyncio.Queue[E] = asyncio.Queue(self._max_queue)
        key = id(queue)
        self._watchers[key] = (accept, queue)

        async def events() -> AsyncIterator[E]:
            while True:
                yield await queue.get()

        try:
            yield events()
        finally:
            self._watchers.pop(key, None)
