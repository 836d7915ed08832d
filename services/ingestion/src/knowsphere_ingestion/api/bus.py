"""Ingestion on the NATS bus: the document events the workers publish and the API watches, and the
model changes that drop cached model facts.

The workers publish each document's progress and its final status on the subjects of the document's
tenant (``ks.ingestion.documents.progress.v1.<tenant>``, ``….finished.v1.<tenant>``); the API's one
typed subscriber per kind reads every tenant's, refuses a message whose subject names another tenant
than its signed identity, and hands them to the progress watches open in its process
(WatchDocumentProgress) through a :class:`~knowsphere_runtime.bus.Fanout` found in FastStream's
context under ``DOCUMENT_EVENTS``.
What a process caches of a tenant's models (whether a default ASR model exists, an embedding model's
languages) is dropped when modelhub announces a change (``ks.modelhub.model.changed.v1``; see
:mod:`knowsphere_clients.model_changes`); both the API and the workers include that router.
``make asyncapi`` documents these from :func:`build_bus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import structlog
from faststream import Context
from faststream.nats import NatsRouter
from faststream.nats.annotations import NatsMessage
from faststream.nats.publisher.usecase import LogicPublisher

from knowsphere_clients.model_changes import model_changes_router
from knowsphere_contracts.events import (
    MAX_DELETED_PER_EVENT,
    DocumentsDeleted,
    DocumentsFinished,
    DocumentsProgress,
)
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import on_own_tenant_subject, require_identity
from knowsphere_runtime.streams import DOCUMENTS_DELETED, MSG_ID_HEADER

DocumentEvent = DocumentsProgress | DocumentsFinished
DOCUMENT_EVENTS = "document_events"
"""Context name of the API's ``Fanout[DocumentEvent]``."""

Events = Annotated[Fanout[DocumentEvent], Context(DOCUMENT_EVENTS)]

__all__ = ["DOCUMENT_EVENTS", "DocumentEvent", "IngestionBus", "build_bus"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class IngestionBus:
    publishers: NatsRouter
    """What the workers include: the publishers of document events."""
    subscribers: NatsRouter
    """What the API includes: the subscribers feeding its progress watches."""
    progress: LogicPublisher
    finished: LogicPublisher
    model_changes: NatsRouter
    """What a process caching model facts includes (with its ModelHubClient under
    :data:`knowsphere_clients.model_changes.MODELHUB`)."""
    deletions: NatsRouter
    """What the API includes: the publisher of deleted documents."""
    deleted: LogicPublisher

    async def announce_deleted(self, knowledge_base_id: str, document_ids: list[str]) -> None:
        """Tells whom it concerns (memory) that documents are gone, in events of at most
        :data:`MAX_DELETED_PER_EVENT`; each stored once however often it is sent."""
        for start in range(0, len(document_ids), MAX_DELETED_PER_EVENT):
            batch = document_ids[start : start + MAX_DELETED_PER_EVENT]
            event = DocumentsDeleted(knowledge_base_id=knowledge_base_id, document_ids=batch)
            key = f"deleted:{knowledge_base_id}:{batch[0]}:{len(batch)}"
            await self.deleted.publish(event.model_dump(mode="json"), headers={MSG_ID_HEADER: key})

    async def publish(self, event: DocumentEvent) -> None:
        """Publishes a document event on its kind's subject of the current identity's tenant."""
        publisher = self.finished if isinstance(event, DocumentsFinished) else self.progress
        subject = event.subject_for(require_identity().tenant_id)
        await publisher.publish(event.model_dump(mode="json"), subject=subject)


def _own_tenant(message: NatsMessage, base: str) -> bool:
    subject = message.raw_message.subject
    if on_own_tenant_subject(subject, base):
        return True
    log.error("document event refused: its subject names another tenant than its identity", subject=subject)
    return False


def build_bus() -> IngestionBus:
    publishers = NatsRouter()
    progress = publishers.publisher(
        DocumentsProgress.subject + ".{tenant}",
        schema=DocumentsProgress,
        title="ingestion:document-progress",
        description="Documents' stages and progress while a worker ingests them (a batch's together).",
    )
    finished = publishers.publisher(
        DocumentsFinished.subject + ".{tenant}",
        schema=DocumentsFinished,
        title="ingestion:document-finished",
        description="Documents that became ready, or failed with the stage and reason.",
    )
    subscribers = NatsRouter()

    @subscribers.subscriber(
        DocumentsProgress.subject + ".*",
        title="ingestion:watch-progress",
        description="Feeds the API's progress watches (WatchDocumentProgress), every tenant's.",
    )
    async def on_progress(event: DocumentsProgress, message: NatsMessage, events: Events) -> None:
        if _own_tenant(message, DocumentsProgress.subject):
            events.publish(event)

    @subscribers.subscriber(
        DocumentsFinished.subject + ".*",
        title="ingestion:watch-finished",
        description="Feeds the API's progress watches (WatchDocumentProgress), every tenant's.",
    )
    async def on_finished(event: DocumentsFinished, message: NatsMessage, events: Events) -> None:
        if _own_tenant(message, DocumentsFinished.subject):
            events.publish(event)

    model_changes = model_changes_router("ingestion")

    deletions = NatsRouter()
    deleted = deletions.publisher(
        DocumentsDeleted.subject,
        stream=DOCUMENTS_DELETED,
        schema=DocumentsDeleted,
        title="ingestion:documents-deleted",
        description="Documents deleted for good (memory forgets them in document affinity).",
    )

    return IngestionBus(publishers, subscribers, progress, finished, model_changes, deletions, deleted)
