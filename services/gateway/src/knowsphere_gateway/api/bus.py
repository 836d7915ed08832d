"""The gateway on the NATS bus: it publishes chat requests and reads every turn's events.

One typed subscriber takes the events of all turns of every tenant (``ks.chat.events.v1.>``; the
tenant is the subject's token after the version, and must be the tenant of the event's signed
identity) and hands them to the chat requests open in this process through the bus's
:class:`~knowsphere_runtime.bus.Fanout` (held by the subscriber itself: it runs for every token of
every answer, so it resolves no dependency); each request watches its own turn id there instead of
opening a subscription of its own. Every gateway instance reads every event (no queue group): the one
that holds the turn's request streams it.
``make asyncapi`` documents these from :func:`build_bus`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import structlog
from faststream.nats import NatsRouter
from faststream.nats.annotations import NatsMessage
from faststream.nats.publisher.usecase import LogicPublisher

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import on_own_tenant_subject
from knowsphere_runtime.streams import CHAT_REQUESTS, MSG_ID_HEADER

TURN_EVENTS = ChatTurnEvent.subject + ".>"

log = structlog.get_logger(__name__)

REQUEST_RETRY_SECONDS = 0.5
MAX_REQUEST_RETRY_SECONDS = 5.0
"""Backoff between sends of a chat request the bus has not acknowledged."""


@dataclass(frozen=True)
class GatewayBus:
    router: NatsRouter
    chat_requests: LogicPublisher
    """Puts a ``ChatRequested`` into the chat work queue, where one conversation replica takes it."""
    chat_events: Fanout[ChatTurnEvent] = field(default_factory=Fanout)
    """Every turn event this gateway reads, for the chat requests open in this process."""

    async def request_turn(self, request: ChatRequested, *, wait: float = 0.0) -> None:
        """Queues ``request``, sending it again for up to ``wait`` seconds while the bus does not
        acknowledge it (an outage); raises the last error after that. Stored once however often it is
        sent: the turn id is the message id."""
        deadline = time.monotonic() + wait
        pause = REQUEST_RETRY_SECONDS
        while True:
            try:
                await self.chat_requests.publish(
                    request.model_dump(mode="json"), headers={MSG_ID_HEADER: request.turn_id}
                )
                return
            except Exception as error:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning(
                    "chat request not acknowledged; sending it again",
                    turn_id=request.turn_id,
                    error=str(error),
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_REQUEST_RETRY_SECONDS)


def build_bus(chat_events: Fanout[ChatTurnEvent] | None = None) -> GatewayBus:
    """The gateway's publisher and subscriber; turn events go to ``chat_events`` (a new one if None)."""
    events: Fanout[ChatTurnEvent] = Fanout() if chat_events is None else chat_events
    router = NatsRouter()
    chat_requests = router.publisher(
        ChatRequested.subject,
        stream=CHAT_REQUESTS,
        schema=ChatRequested,
        title="gateway:chat-request",
        description="A user's question from POST /api/v1/chat/turns, queued until a conversation replica "
        "answers it.",
    )

    @router.subscriber(
        TURN_EVENTS,
        # Turn events are published through JetStream, whose publish waits for the stream's
        # acknowledgement on the reply subject: a reply from here would race it.
        no_reply=True,
        title="gateway:turn-events",
        description="Feeds the chat requests of this gateway, each streaming its own turn as SSE.",
    )
    async def on_turn_event(event: ChatTurnEvent, message: NatsMessage) -> None:
        subject = message.raw_message.subject
        if not on_own_tenant_subject(subject, ChatTurnEvent.subject):
            log.error(
                "turn event refused: its subject names another tenant than its identity", subject=subject
            )
            return
        events.publish(event)

    return GatewayBus(router, chat_requests, events)


__all__ = ["TURN_EVENTS", "GatewayBus", "build_bus"]
