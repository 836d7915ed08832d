"""The conversation service on the NATS bus: it takes chat requests and publishes each turn's events.

Chat requests wait in the JetStream work queue ``KS_CHAT_REQUESTS``; every replica pulls from the one
durable consumer :data:`CHAT_CONSUMER`, so replicas share the work, and each runs up to
``max_concurrent_turns`` turns at once (back-pressure is the queue, not memory). A turn is acknowledged
only once it has ended; while it runs the replica tells JetStream it is still working on it, so a turn
whose replica dies is delivered again after ``ack_wait`` seconds and resumes from its checkpoint. A turn
of a session that is busy with another turn goes back to the queue for a moment.

The handler runs the turn with the :class:`~knowsphere_conversation.domain.turns.TurnRunner` found in
FastStream's context under :data:`TURN_RUNNER`, which publishes the turn's events on
``ks.chat.events.v1.<tenant>.<turn_id>`` (the tenant of the turn's identity) into ``KS_CHAT_EVENTS``
(kept for a reconnecting client; deduplicated by turn and sequence) and its completion into
``KS_CONVERSATION_TURNS`` (deduplicated by turn id).
``make asyncapi`` documents these from :func:`build_bus`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import structlog
from faststream import AckPolicy, Context
from faststream.nats import ConsumerConfig, NatsRouter, PullSub
from faststream.nats.annotations import NatsMessage
from faststream.nats.publisher.usecase import LogicPublisher
from opentelemetry import trace

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnCancelRequested, TurnCompleted
from knowsphere_conversation.domain.turns import EventsUnpublishable, Outcome, TurnResult, TurnRunner
from knowsphere_runtime.identity import current_identity, require_identity
from knowsphere_runtime.nats_auth import pull_inbox_prefix
from knowsphere_runtime.streams import CHAT_EVENTS, CHAT_REQUESTS, MSG_ID_HEADER, TURN_COMPLETED
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)

CHAT_CONSUMER = "conversation"
"""The durable consumer of the chat work queue that every replica pulls from."""
TURN_RUNNER = "turn_runner"
"""Context name of the service's ``TurnRunner``."""
BUSY_SESSION_RETRY_SECONDS = 0.5
"""How soon a turn of a busy session is delivered again."""
PUBLISH_ATTEMPTS = 3
"""Times a turn event is sent before the turn pauses (it is delivered again once the bus is back)."""
PUBLISH_RETRY_SECONDS = 0.2
BUS_RETRY_SECONDS = 1.0
"""How soon a turn paused by a bus outage is delivered again once the bus has its nack."""

Runner = Annotated[TurnRunner, Context(TURN_RUNNER)]


@dataclass(frozen=True)
class ConversationBus:
    router: NatsRouter
    turn_events: LogicPublisher
    """Publishes the events of a turn, each on its turn's subject."""
    completions: LogicPublisher
    cancels: LogicPublisher
    """Asks every replica to stop a turn."""

    async def publish_turn_event(self, event: ChatTurnEvent) -> None:
        # Stored once per (turn, sequence): a publish whose acknowledgement was lost is sent again and
        # JetStream keeps the first copy, so a reader never sees a sequence twice or a gap.
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            try:
                await self.turn_events.publish(
                    event.model_dump(mode="json"),
                    subject=ChatTurnEvent.subject_for(require_identity().tenant_id, event.turn_id),
                    headers={MSG_ID_HEADER: f"{event.turn_id}:{event.sequence}"},
                )
                return
            except Exception as error:
                if attempt == PUBLISH_ATTEMPTS:
                    raise EventsUnpublishable(
                        f"event {event.sequence} of turn {event.turn_id} not acknowledged by the bus "
                        f"after {PUBLISH_ATTEMPTS} attempts"
                    ) from error
                log.warning(
                    "turn event not acknowledged; sending it again", turn_id=event.turn_id, attempt=attempt
                )
                await asyncio.sleep(PUBLISH_RETRY_SECONDS * attempt)

    async def publish_completed(self, event: TurnCompleted) -> None:
        # The turn id as the message id: JetStream drops a second announcement of the same turn.
        await self.completions.publish(event.model_dump(mode="json"), headers={MSG_ID_HEADER: event.turn_id})

    async def request_cancel(self, turn_id: str) -> None:
        await self.cancels.publish(TurnCancelRequested(turn_id=turn_id).model_dump(mode="json"))


@contextlib.asynccontextmanager
async def working_on(message: NatsMessage, every: float) -> AsyncIterator[None]:
    """Tells JetStream every ``every`` seconds that the turn is still being worked on."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(Exception):
                await message.in_progress()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def build_bus(
    max_concurrent_turns: int = 1, ack_wait_seconds: float = 30.0, max_session_wait_seconds: float = 300.0
) -> ConversationBus:
    router = NatsRouter()
    inboxes = pull_inbox_prefix()  # this identity's own reply inboxes
    turn_events = router.publisher(
        ChatTurnEvent.subject + ".{tenant}.{turn_id}",
        stream=CHAT_EVENTS,
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
        stream=CHAT_REQUESTS,
        durable=CHAT_CONSUMER,
        pull_sub=PullSub(batch_size=1, timeout=5.0),
        inbox_prefix=inboxes,
        max_workers=max_concurrent_turns,
        config=ConsumerConfig(ack_wait=ack_wait_seconds, max_ack_pending=-1),
        ack_policy=AckPolicy.MANUAL,
        title="conversation:chat-request",
        description="Runs one chat turn and publishes its events on ks.chat.events.v1.<tenant>.<turn_id>.",
    )
    async def on_chat_request(request: ChatRequested, message: NatsMessage, runner: Runner) -> None:
        span = trace.get_current_span()
        span.set_attribute(attributes.TURN_ID, request.turn_id)
        span.set_attribute(attributes.KNOWLEDGE_BASE_IDS, request.knowledge_base_ids)
        if request.session_id:
            span.set_attribute(attributes.SESSION_ID, request.session_id)
        delivered = message.raw_message.metadata.num_delivered
        try:
            async with working_on(message, ack_wait_seconds / 3):
                result = await runner.run(request, redelivered=delivered > 1)
        except EventsUnpublishable as error:
            # Not acknowledged: JetStream delivers the turn again once the bus is back (at once if
            # this nack reaches it, else after ack_wait), and it resumes where its events stopped.
            log.warning(
                "turn paused: the bus is not taking its events", turn_id=request.turn_id, error=str(error)
            )
            with contextlib.suppress(Exception):
                await message.nack(delay=BUS_RETRY_SECONDS)
            return
        if result.outcome is Outcome.BUSY:
            waited = delivered * BUSY_SESSION_RETRY_SECONDS
            if waited < max_session_wait_seconds:
                await message.nack(delay=BUSY_SESSION_RETRY_SECONDS)
                return
            result = TurnResult(Outcome.ANSWERED, await runner.refuse_busy(request, waited))
        await message.ack()
        final = result.final
        if final is not None and final.error_code:
            span.set_attribute(attributes.ERROR_CODE, final.error_code)
        log.info(
            "turn finished",
            turn_id=request.turn_id,
            delivery=delivered,
            error_code=final and final.error_code,
        )

    cancels = router.publisher(
        TurnCancelRequested.subject,
        schema=TurnCancelRequested,
        title="conversation:turn-cancel",
        description="Stop a running turn (every replica hears it; the one running it stops it).",
    )

    @router.subscriber(
        TurnCancelRequested.subject,
        title="conversation:turn-cancel",
        description="Stops the turn when this replica runs it for the same asker.",
    )
    async def on_cancel(request: TurnCancelRequested, runner: Runner) -> None:
        asker = current_identity()
        if asker is not None and runner.cancel(request.turn_id, asker):
            log.info("turn cancel requested", turn_id=request.turn_id)

    return ConversationBus(router, turn_events, completions, cancels)


__all__ = ["CHAT_CONSUMER", "TURN_RUNNER", "ConversationBus", "build_bus"]
