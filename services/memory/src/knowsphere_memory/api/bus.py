"""Memory on the NATS bus: document affinity from ``TurnCompleted`` events, and deleted documents
forgotten from ``DocumentsDeleted`` events (both JetStream durable consumers).

A JetStream durable pull consumer (:data:`~knowsphere_runtime.streams.TURN_COMPLETED`, subject
``ks.conversation.turn.completed.v1``) hands each event to the :class:`TurnRecorder` found in
FastStream's context under :data:`TURN_RECORDER`. The asker comes from the event's signed ``ks-identity``
header. A completed turn's cited documents get one hit each, keyed by ``turn_id`` in the
same transaction, so an event delivered twice or out of order is applied once. A message is
acknowledged once applied; a failure (the store away) leaves it to JetStream to deliver again, at most
``consumer_max_deliver`` times. ``make asyncapi`` documents this from :func:`build_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import structlog
from faststream import Context
from faststream.middlewares import AckPolicy
from faststream.nats import ConsumerConfig, NatsRouter, PullSub
from opentelemetry import trace

from knowsphere_contracts.events import DocumentsDeleted, TurnCompleted
from knowsphere_memory.api.affinity import record_turn
from knowsphere_memory.domain.ports import MemoryStore
from knowsphere_memory.domain.records import CitedDocumentRecord, Owner
from knowsphere_memory.settings import Settings
from knowsphere_runtime.identity import current_identity
from knowsphere_runtime.nats_auth import pull_inbox_prefix
from knowsphere_runtime.streams import DOCUMENTS_DELETED, TURN_COMPLETED
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)

TURN_RECORDER = "turn_recorder"
"""Context name of the service's ``TurnRecorder``."""
COMPLETED = "completed"
"""Only answered turns count: a cancelled or failed turn cited nothing the user read."""
PULL_BATCH_SIZE = 16
"""Events fetched per pull."""


@dataclass(frozen=True)
class TurnRecorder:
    store: MemoryStore
    settings: Settings

    async def apply(self, event: TurnCompleted) -> bool:
        """Counts the turn's cited documents for the asker; False when there was nothing to apply (not
        completed, no identity, or already recorded)."""
        span = trace.get_current_span()
        span.set_attribute(attributes.TURN_ID, event.turn_id)
        recorded = await self._apply(event)
        span.set_attribute(attributes.MEMORY_TURN_RECORDED, recorded)
        return recorded

    async def _apply(self, event: TurnCompleted) -> bool:
        identity = current_identity()
        if identity is None:
            # Nobody to attribute the citations to; delivering it again would not change that.
            log.error("turn-completed event without identity headers dropped", turn_id=event.turn_id)
            return False
        if event.outcome != COMPLETED:
            return False
        documents = [
            CitedDocumentRecord(d.document_id, d.knowledge_base_id, d.file_name)
            for d in event.cited_documents
        ]
        trace.get_current_span().set_attribute(attributes.MEMORY_CITED_DOCUMENTS, len(documents))
        return await record_turn(
            self.store,
            self.settings,
            Owner(identity.tenant_id, identity.user_id),
            event.turn_id,
            documents,
            event.occurred_at,
        )


Recorder = Annotated[TurnRecorder, Context(TURN_RECORDER)]

_DEFAULTS = Settings.model_fields


@dataclass(frozen=True)
class MemoryBus:
    router: NatsRouter
    """What the service includes: the durable consumer of turn-completed events."""


def build_bus(
    *,
    durable_name: str = _DEFAULTS["consumer_durable_name"].default,
    max_deliver: int = _DEFAULTS["consumer_max_deliver"].default,
    ack_wait_seconds: float = _DEFAULTS["consumer_ack_wait_seconds"].default,
) -> MemoryBus:
    router = NatsRouter()
    inboxes = pull_inbox_prefix()  # this identity's own reply inboxes

    @router.subscriber(
        TurnCompleted.subject,
        # The stream as conversation declares it (duplicate window, replicas on a cluster): a
        # declaration of its own would change it back.
        stream=TURN_COMPLETED,
        durable=durable_name,
        pull_sub=PullSub(batch_size=PULL_BATCH_SIZE),
        inbox_prefix=inboxes,
        config=ConsumerConfig(max_deliver=max_deliver, ack_wait=ack_wait_seconds),
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="memory:turn-completed",
        description="Counts the documents a completed turn cited for the asker (document affinity), "
        "once per turn id.",
    )
    async def on_turn_completed(event: TurnCompleted, recorder: Recorder) -> None:
        recorded = await recorder.apply(event)
        log.debug("turn-completed applied", turn_id=event.turn_id, recorded=recorded)

    @router.subscriber(
        DocumentsDeleted.subject,
        stream=DOCUMENTS_DELETED,
        durable=f"{durable_name}-deletions",
        pull_sub=PullSub(batch_size=PULL_BATCH_SIZE),
        inbox_prefix=inboxes,
        config=ConsumerConfig(max_deliver=max_deliver, ack_wait=ack_wait_seconds),
        ack_policy=AckPolicy.NACK_ON_ERROR,
        title="memory:documents-deleted",
        description="Removes deleted documents from every user's frequently consulted documents of the "
        "tenant, and keeps later citations of them from counting.",
    )
    async def on_documents_deleted(event: DocumentsDeleted, recorder: Recorder) -> None:
        identity = current_identity()
        if identity is None:
            log.error(
                "documents-deleted event without identity headers dropped", documents=len(event.document_ids)
            )
            return
        for document_id in event.document_ids:
            await recorder.store.forget_document(identity.tenant_id, document_id)
        log.info("deleted documents forgotten", documents=len(event.document_ids))

    return MemoryBus(router)


__all__ = ["TURN_RECORDER", "MemoryBus", "TurnRecorder", "build_bus"]
