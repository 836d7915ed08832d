"""The conversation service on the NATS bus: it takes chat requests and publishes each turn's events.

Chat requests are taken by one instance of the queue group :data:`CHAT_QUEUE_GROUP`, so instances share
the work, and each instance runs up to ``max_concurrent_turns`` of them at once; the handler runs the
turn with the :class:`~knowsphere_conversation.domain.turns.TurnRunner` found in FastStream's context
under :data:`TURN_RUNNER`, which publishes the turn's events through :attr:`ConversationBus.turn_events`
on ``ks.chat.events.v1.<turn_id>`` and its completion on the JetStream stream
:data:`~knowsphere_contracts.events.TURN_COMPLETED_STREAM` (deduplicated by turn id). ``make asyncapi``
documents these from :func:`build_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import structlog
from faststream import Context
from faststream.nats import JStream, NatsRouter
from faststream.nats.publisher.usecase import LogicPublisher
from opentelemetry import trace

from knowsphere_contracts.events import TURN_COMPLETED_STREAM, ChatRequested, ChatTurnEvent, TurnCompleted
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)

CHAT_QUEUE_GROUP = "conversation"
"""Every conversation instance reads chat requests in this queue group: each request goes to one."""
TURN_RUNNER = "turn_runner"
"""Context name of the service's ``TurnRunner``."""
TURN_COMPLETED = JStream(TURN_COMPLETED_STREAM, subjects=[TurnCompleted.subject], declare=True)
"""The stream completions are kept in (memory reads it with a durable consumer)."""

Runner = Annotated[TurnRunner, Context(TURN_RUNNER)]


@dataclass(frozen=True)
class ConversationBus:
    router: NatsRouter
    turn_events: LogicPublisher
    """Publishes the events of a turn, each on its turn's subject."""
    completions: LogicPublisher

    async def publish_turn_event(self, event: ChatTurnEvent) -> None:
        await self.turn_events.publish(
            event.model_dump(mode="json"), subject=ChatTurnEvent.subject_for(event.turn_id)
        )

    async def publish_completed(self, event: TurnCompleted) -> None:
        # The turn id as the message id: JetStream drops a second announcement of the same turn.
        await self.completions.publish(event.model_dump(mode="json"), headers={"Nats-Msg-Id": event.turn_id})


def build_bus(max_concurrent_turns: int = 1) -> ConversationBus:
    router = NatsRouter()
    turn_events = router.publisher(
        ChatTurnEvent.subject + ".{turn_id}",
        schema=ChatTurnEvent,
        title="conversation:turn-events",
        description="Events of one turn; ends with exactly one completed or error event.",
    )
    completions = router.publisher(
        TurnCompleted.subject,
        stream=TURN_COMPLETED,
        schema=TurnCompleted,
        title="conversation:turn-completed",
        description="A turn finished, with the documents its answer cited; once per turn (Nats-Msg-Id).",
    )

    @router.subscriber(
        ChatRequested.subject,
        queue=CHAT_QUEUE_GROUP,
        max_workers=max_concurrent_turns,
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

    return ConversationBus(router, turn_events, completions)


__all__ = ["CHAT_QUEUE_GROUP", "TURN_RUNNER", "ConversationBus", "build_bus"]
