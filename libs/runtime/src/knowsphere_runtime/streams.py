"""The JetStream streams of the platform, declared the same way by every service that touches them.

A stream is declared (created, or updated to this configuration) by the services that publish to or
consume from it when their broker starts; the configuration lives here once. Which events go where is
in :mod:`knowsphere_contracts.events` (the stream names and subjects).

On a NATS cluster each stream is kept by ``KS_NATS_STREAM_REPLICAS`` servers (:class:`StreamSettings`,
read once when this module is imported, as the stream declarations are module constants): with 3, a
stream loses nothing and keeps serving when one server of the cluster goes down. A single server takes
only 1, the default.
"""

from __future__ import annotations

from faststream.nats import DeliverPolicy, JStream, RetentionPolicy
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from knowsphere_contracts.events import (
    CHAT_EVENTS_STREAM,
    CHAT_REQUESTS_STREAM,
    DOCUMENTS_DELETED_STREAM,
    TURN_COMPLETED_STREAM,
    ChatRequested,
    ChatTurnEvent,
    DocumentsDeleted,
    TurnCompleted,
)
from knowsphere_runtime.settings import load_settings

MAX_STREAM_REPLICAS = 5
"""JetStream keeps a stream on at most five servers."""


class StreamSettings(BaseSettings):
    """``KS_NATS_STREAM_REPLICAS``: how many servers of the NATS cluster keep each stream, the same in
    every process that declares one (a declaration with another count would change the stream)."""

    model_config = SettingsConfigDict(env_prefix="KS_NATS_", extra="ignore", frozen=True)

    stream_replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_STREAM_REPLICAS,
        description="servers keeping each JetStream stream and KV bucket; 3 on a 3-server cluster, "
        "1 on a single server (which refuses more)",
    )


def stream_replicas() -> int:
    """``KS_NATS_STREAM_REPLICAS`` of this process (a bad value stops it, naming the variable)."""
    return load_settings(StreamSettings).stream_replicas


STREAM_REPLICAS = stream_replicas()
"""Servers keeping each stream declared here (and the KV buckets the services create)."""

DUPLICATE_WINDOW_SECONDS = 120.0
"""A message published again with the same ``Nats-Msg-Id`` within this window is stored once."""
CHAT_EVENTS_MAX_AGE_SECONDS = 3600.0
"""How long a turn's events stay readable for a client that reconnects."""

CHAT_REQUESTS = JStream(
    CHAT_REQUESTS_STREAM,
    subjects=[ChatRequested.subject],
    retention=RetentionPolicy.WORK_QUEUE,
    duplicate_window=DUPLICATE_WINDOW_SECONDS,
    num_replicas=STREAM_REPLICAS,
)
"""Turns waiting for, or being answered by, a conversation replica (removed once acknowledged)."""

CHAT_EVENTS = JStream(
    CHAT_EVENTS_STREAM,
    subjects=[ChatTurnEvent.subject + ".>"],
    max_age=CHAT_EVENTS_MAX_AGE_SECONDS,
    duplicate_window=DUPLICATE_WINDOW_SECONDS,
    num_replicas=STREAM_REPLICAS,
)
"""Every turn's events, one subject per turn, kept for :data:`CHAT_EVENTS_MAX_AGE_SECONDS`."""

TURN_COMPLETED = JStream(
    TURN_COMPLETED_STREAM,
    subjects=[TurnCompleted.subject],
    duplicate_window=DUPLICATE_WINDOW_SECONDS,
    num_replicas=STREAM_REPLICAS,
)
"""Finished turns with the documents they cited (memory's document affinity reads it)."""

DOCUMENTS_DELETED = JStream(
    DOCUMENTS_DELETED_STREAM,
    subjects=[DocumentsDeleted.subject],
    duplicate_window=DUPLICATE_WINDOW_SECONDS,
    num_replicas=STREAM_REPLICAS,
)
"""Deleted documents (memory forgets them in document affinity)."""

SESSION_LEASES_BUCKET = "ks_conversation_sessions"
"""KV bucket of conversation's session leases (one running turn per session across replicas); its
stream is ``KV_<bucket>``."""

MSG_ID_HEADER = "Nats-Msg-Id"
"""The header JetStream deduplicates by."""

__all__ = [
    "CHAT_EVENTS",
    "CHAT_EVENTS_MAX_AGE_SECONDS",
    "CHAT_REQUESTS",
    "DOCUMENTS_DELETED",
    "DUPLICATE_WINDOW_SECONDS",
    "MSG_ID_HEADER",
    "SESSION_LEASES_BUCKET",
    "STREAM_REPLICAS",
    "TURN_COMPLETED",
    "StreamSettings",
    "read_subject",
    "stream_replicas",
]


async def read_subject(
    js: JetStreamContext, stream: str, subject: str, *, timeout: float = 2.0
) -> list[tuple[bytes, dict[str, str]]]:
    """Every message stored on ``subject`` of ``stream`` right now, oldest first, as (data, headers);
    empty when there is none."""
    try:
        await js.get_last_msg(stream, subject)
    except NotFoundError:
        return []
    subscription = await js.subscribe(
        subject, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
    )
    found: list[tuple[bytes, dict[str, str]]] = []
    try:
        while True:
            message = await subscription.next_msg(timeout=timeout)
            found.append((message.data, dict(message.headers or {})))
            if message.metadata.num_pending == 0:
                return found
    finally:
        await subscription.unsubscribe()
