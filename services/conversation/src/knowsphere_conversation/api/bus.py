"""NATS face of the conversation service: takes chat requests from the queue group."""

from __future__ import annotations

import structlog
from faststream.nats import NatsBroker
from opentelemetry import trace

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent
from knowsphere_conversation.domain.turns import Search, TurnRunner
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)


def register_chat_handlers(broker: NatsBroker, *, search: Search, queue_group: str) -> None:
    """Subscribe to chat requests; each request is taken by one instance of the queue group."""

    async def publish(event: ChatTurnEvent) -> None:
        await broker.publish(event.model_dump(mode="json"), subject=ChatTurnEvent.subject_for(event.turn_id))

    runner = TurnRunner(search=search, publish=publish)

    @broker.subscriber(
        ChatRequested.subject,
        queue=queue_group,
        title="conversation:chat-request",
        description="Runs one chat turn and publishes its events on ks.chat.events.v1.<turn_id>.",
    )
    async def on_chat_request(request: ChatRequested) -> None:
        trace.get_current_span().set_attribute(attributes.TURN_ID, request.turn_id)
        final = await runner.run(request)
        log.info("turn finished", turn_id=request.turn_id, kind=final.kind, error_code=final.error_code)

    # Document the events this service publishes in the AsyncAPI description.
    broker.publisher(
        ChatTurnEvent.subject + ".{turn_id}",
        schema=ChatTurnEvent,
        title="conversation:turn-events",
        description="Events of one turn; ends with exactly one completed or error event.",
    )
