"""The document events the stages publish: progress while a document moves on, and its final status.

Events are advisory — the status in the database is the truth — so a publish that fails is logged and
the stage goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from knowsphere_contracts.events import DocumentFinished, DocumentProgress, Event
from knowsphere_contracts.vocabulary import STAGE_STATUS, DocumentStatus
from knowsphere_ingestion.domain.records import Failure
from knowsphere_ingestion.workflows import IngestInput

log = structlog.get_logger(__name__)

Publish = Callable[[Event], Awaitable[None]]


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
        try:
            await self._publish(
                DocumentProgress(
                    document_id=job.document_id,
                    knowledge_base_id=job.knowledge_base_id,
                    stage=status,
                    percent=percent,
                    done=done,
                    total=total,
                    eta_seconds=eta,
                )
            )
        except Exception:
            log.warning("progress event not published", document_id=job.document_id, exc_info=True)

    async def finished(self, job: IngestInput, chunk_count: int, failure: Failure | None = None) -> None:
        """The document became ready (no ``failure``) or failed with ``failure``."""
        try:
            await self._publish(
                DocumentFinished(
                    document_id=job.document_id,
                    knowledge_base_id=job.knowledge_base_id,
                    status=DocumentStatus.FAILED if failure else DocumentStatus.READY,
                    failed_stage=STAGE_STATUS.get(failure.stage) if failure and failure.stage else None,
                    reason=failure.reason if failure else None,
                    chunk_count=chunk_count,
                )
            )
        except Exception:
            log.warning("finished event not published", document_id=job.document_id, exc_info=True)
