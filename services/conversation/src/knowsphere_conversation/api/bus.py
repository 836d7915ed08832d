"""The conversation service on the NATS bus: it takes chat requests and publishes each turn's events.

Chat requests are taken by one instance of the queue group :data:`CHAT_QUEUE_GROUP`, so instances share
the work; the handler runs the turn with the :class:`~knowsphere_conversation.domain.turns.TurnRunner`
found in FastStream's context under :data:`TURN_RUNNER`, which publishes the turn's events through
:attr:`ConversationBus.turn_events` on ``ks.chat.events.v1.<turn_id>``. ``make asyncapi`` documents
these from :func:`build_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import structlog
from faststream import Context
from faststream.nats import NatsRouter
from faststream.nats.publisher.usecase import LogicPublisher
from opentelemetry import trace

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)

CHAT_QUEUE_GROUP = "conversation"
"""Every conversation instance reads chat requests in this queue group: each request goes to one."""
TURN_RUNNER = "turn_runner"
"""Context name of the service's ``TurnRunner``."""

Runner = Annotated[TurnRunner, Context(TURN_RUNNER)]


@dataclass(frozen=True)
class ConversationBus:
    router: NatsRouter
    turn_events: LogicPublisher
    """Publishes the events of a turn, each on its turn's subject."""

    async def publish_turn_event(self, event: ChatTurnEvent) -> None:
        await self.turn_events.publish(
            event.model_dump(mode="json"), subject=ChatTurnEvent.subject_for(event.turn_id)
        )


def build_bus() -> ConversationBus:
    router = NatsRouter()
    turn_events = router.publisher(
        ChatTurnEvent.subject + ".{turn_id}",
        schema=ChatTurnEvent,
        title="conversation:turn-events",
        description="Events of one turn; ends with exactly one completed or error event.",
    )

    @router.subscriber(
        ChatRequested.subject,
        queue=CHAT_QUEUE_GROUP,
        title="conversation:chat-request",
        description="Runs one chat turn and publishes its events on ks.chat.events.v1.<turn_id>.",
    )
    async def on_chat_request(request: ChatRequested, runner: Runner) -> None:
        span = trace.get_current_span()
        span.set_attribute(attributes.TURN_ID, request.turn_id)
        span.set_attribute(attributes.KNOWLEDGE_BASE_IDS, request.knowledge_base_ids)
        if request.session_id:
            span.set_attribute(attributes.SESSION_ID, request.session_id)
        final = await runner.run(request)
        if final.error_code:
            span.set_attribute(attributes.ERROR_CODE, final.error_code)
        log.info("turn finished", turn_id=request.turn_id, kind=final.kind, error_code=final.error_code)

    return ConversationBus(router, turn_events)


__all__ = ["CHAT_QUEUE_GROUP", "TURN_RUNNER", "ConversationBus", "build_bus"]
