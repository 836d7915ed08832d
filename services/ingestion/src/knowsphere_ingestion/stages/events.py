"""The document events the stages publish: progress while documents move on, and their final status.

A stage moves the documents of a batch on together, so what it announces while recording their
results is collected (:meth:`DocumentEvents.collected`) and published as one event per kind and
knowledge base — a batch of 64 small files costs the bus a handful of messages per stage, not hundreds.
Events are advisory — the status in the database is the truth — so a publish that fails is logged and
the stage goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar

import structlog

from knowsphere_contracts.events import DocumentsFinished, DocumentsProgress, FinishedDocument, ProgressUpdate
from knowsphere_contracts.vocabulary import STAGE_STATUS, DocumentStatus
from knowsphere_ingestion.api.bus import DocumentEvent
from knowsphere_ingestion.domain.records import Failure
from knowsphere_ingestion.workflows import IngestInput

log = structlog.get_logger(__name__)

Publish = Callable[[DocumentEvent], Awaitable[None]]
"""Publishes a document event on its subject (:meth:`~knowsphere_ingestion.api.bus.IngestionBus.publish`)."""
Pending = list[tuple[str, ProgressUpdate | FinishedDocument]]  # (knowledge base id, item)

# What the current task announces while collecting; None when it publishes at once.
_collecting: ContextVar[Pending | None] = ContextVar("ingestion_events_collecting", default=None)


class DocumentEvents:
    def __init__(self, publish: Publish) -> None:
        self._publish = publish

    async def progress(
        self,
        job: IngestInput,
        status: DocumentStatus,
        percent: float,
        done: int = 0,
        total: int = 0,
        eta: float | None = None,
    ) -> None:
        update = ProgressUpdate(
            document_id=job.document_id,
            stage=status,
            percent=percent,
            done=done,
            total=total,
            eta_seconds=eta,
        )
        await self._announce(job.knowledge_base_id, update)

    async def finished(self, job: IngestInput, chunk_count: int, failure: Failure | None = None) -> None:
        """The document became ready (no ``failure``) or failed with ``failure``."""
        document = FinishedDocument(
            document_id=job.document_id,
            status=DocumentStatus.FAILED if failure else DocumentStatus.READY,
            failed_stage=STAGE_STATUS.get(failure.stage) if failure and failure.stage else None,
            reason=failure.reason if failure else None,
            chunk_count=chunk_count,
        )
        await self._announce(job.knowledge_base_id, document)

    @asynccontextmanager
    async def collected(self) -> AsyncIterator[None]:
        """What the current task announces inside is published on exit, one event per kind and
        knowledge base (tasks started inside publish their own at once)."""
        pending: Pending = []
        token = _collecting.set(pending)
        try:
            yield
        finally:
            _collecting.reset(token)
            await self._flush(pending)

    async def _announce(self, knowledge_base_id: str, item: ProgressUpdate | FinishedDocument) -> None:
        pending = _collecting.get()
        if pending is not None:
            pending.append((knowledge_base_id, item))
        else:
            await self._flush([(knowledge_base_id, item)])

    async def _flush(self, pending: Pending) -> None:
        progress: dict[str, list[ProgressUpdate]] = {}
        finished: dict[str, list[FinishedDocument]] = {}
        for kb_id, item in pending:
            if isinstance(item, ProgressUpdate):
                progress.setdefault(kb_id, []).append(item)
            else:
                finished.setdefault(kb_id, []).append(item)
        events: list[DocumentEvent] = [
            *(DocumentsProgress(knowledge_base_id=kb, updates=updates) for kb, updates in progress.items()),
            *(DocumentsFinished(knowledge_base_id=kb, documents=docs) for kb, docs in finished.items()),
        ]
        for event in events:
            try:
                await self._publish(event)
            except Exception:
                log.warning("document event not published", subject=event.subject, exc_info=True)
