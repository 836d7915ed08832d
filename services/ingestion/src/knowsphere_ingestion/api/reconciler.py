"""The API's reconciler: finishes what a crash interrupted — deletions half done, uploads whose
workflow never started."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import structlog

from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api.documents import DocumentRemoval
from knowsphere_ingestion.api.runs import Runs
from knowsphere_ingestion.domain.records import Document
from knowsphere_runtime.identity import Identity, bound_identity

log = structlog.get_logger(__name__)


class Reconciler:
    """Finishes what a crash interrupted: deletions half done, uploads whose workflow never started.

    Runs at start-up and then every ``interval`` seconds. Deleting and starting are idempotent, so
    several API replicas reconciling at once do no harm.
    """

    name = "reconciler"

    def __init__(
        self, store: IngestionStore, removal: DocumentRemoval, runs: Runs, interval: float = 60.0
    ) -> None:
        self._store = store
        self._removal = removal
        self._runs = runs
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> object:
        self._task = asyncio.create_task(self._loop())
        return None

    async def stop(self, grace: float | None = None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.warning("reconciliation failed; retrying later", exc_info=True)
            await asyncio.sleep(self._interval)

    async def run_once(self) -> None:
        # One document or run that cannot be finished now (a peer away) does not hold up the others.
        for document in await self._store.deleting_documents():
            with bound_identity(Identity(document.tenant_id, "system")):
                try:
                    await self._removal.purge(document)
                except Exception:
                    log.warning(
                        "deletion not finished; retrying later", document_id=document.id, exc_info=True
                    )
        cutoff = datetime.now(UTC) - timedelta(seconds=self._interval / 2)
        runs: dict[str, list[Document]] = {}
        for document in await self._store.stale_queued(cutoff):
            runs.setdefault(document.ingest_run_id, []).append(document)
        for run_id, documents in runs.items():  # the documents of one upload batch share their run
            with bound_identity(Identity(documents[0].tenant_id, "system")):
                try:
                    await self._runs.start(documents)
                except Exception:
                    log.warning("queued run not started; retrying later", run_id=run_id, exc_info=True)
