"""The stage engine: runs one stage for the documents of a batch together.

For every document it first checks that its run is still the document's current one (a re-ingest or a
delete supersedes it) and records the stage as the document's status; the stage's work runs for all of
them at once; their results are stored in one transaction with the time each took. A document whose
work fails for good is marked failed and leaves the batch; any other error is raised once the rest have
finished, so the workflow's retry redoes only the documents that did not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from temporalio.exceptions import ApplicationError

from knowsphere_contracts.vocabulary import STAGE_STATUS, DocumentStatus, IngestionStage, pipeline_position
from knowsphere_ingestion.domain.records import STAGE_SPAN, Document, KnowledgeBase, Progress
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.errors import FailureCode, is_permanent, permanent
from knowsphere_ingestion.stages.failure import fail_one
from knowsphere_ingestion.stages.identity import job_identity
from knowsphere_ingestion.workflows import DocumentRun, IngestBatch, IngestInput, StageResult, failure_details
from knowsphere_runtime.identity import bound_identity

PROGRESS_INTERVAL_SECONDS = 1.0
"""Least time between two progress writes of one document within a stage."""


@dataclass
class Done:
    """What one document's stage produced: the values to record, and what to do once recorded."""

    items: int
    values: dict[str, Any]
    next_stage: IngestionStage | None = None
    # Called after the batch's results are written, with whether this document's were (False: it was
    # deleted or re-ingested meanwhile).
    after: Callable[[bool], Awaitable[None]] | None = None


class Stage:
    """One document's stage: its job, its document as the stage began, its timing and its progress."""

    def __init__(
        self,
        context: StageContext,
        job: IngestInput,
        stage: IngestionStage,
        document: Document,
        *,
        resumed: bool = True,
    ) -> None:
        self.context = context
        self.job = job
        self.stage = stage
        self.document = document
        self.resumed = resumed
        """False when the document takes this stage's status only now: no attempt of the stage can have
        stored output yet (the status is recorded before any work). The stage before sets the next one's
        status as it finishes, so only the first stage tells a fresh start from a retry by it."""
        self.started = time.perf_counter()
        self._last_progress = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def percent(self, fraction: float) -> float:
        """The document's overall percentage when this stage is ``fraction`` done."""
        low, high = STAGE_SPAN[self.stage]
        return round(low + (high - low) * max(0.0, min(1.0, fraction)), 1)

    async def progress(
        self, done: int, total: int, progress: Progress, *, force: bool = False, eta: float | None = None
    ) -> None:
        """Records and announces how far the stage is, at most once per interval unless ``force``."""
        now = time.perf_counter()
        if not force and now - self._last_progress < PROGRESS_INTERVAL_SECONDS:
            return
        self._last_progress = now
        progress = replace(progress, percent=self.percent(done / total if total else 0.0), eta_seconds=eta)
        updated = await self.context.store.update_document(
            self.job.tenant_id, self.job.document_id, run_id=self.job.run_id, progress=progress
        )
        if updated is not None:
            self.document = updated
        await self.context.events.progress(
            self.job, STAGE_STATUS[self.stage], progress.percent, done, total, eta
        )


StageWork = Callable[[Stage, KnowledgeBase], Awaitable[Done]]

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Outcomes(Generic[T, R]):
    """What the work on each item of a batch came to, in the batch's order."""

    done: list[tuple[T, R]] = field(default_factory=list)
    failed: list[tuple[T, ApplicationError]] = field(default_factory=list)
    """Items whose work failed for good (:func:`~knowsphere_ingestion.stages.errors.permanent`)."""
    retry: BaseException | None = None
    """The first error a retry may fix; raise it (:meth:`raise_retry`) once the rest are recorded."""

    def raise_retry(self) -> None:
        if self.retry is not None:
            raise self.retry


async def gather_outcomes(items: Sequence[T], work: Callable[[T], Awaitable[R]]) -> Outcomes[T, R]:
    """Runs ``work`` for every item at once and sorts what each came to.

    One item's failure does not stop the others: the caller records what finished and what failed for
    good before raising the retry, so the workflow's retry redoes only the rest. A cancelled item is
    raised at once.
    """
    results = await asyncio.gather(*(work(item) for item in items), return_exceptions=True)
    outcomes: Outcomes[T, R] = Outcomes()
    for item, result in zip(items, results, strict=True):
        if isinstance(result, asyncio.CancelledError):
            raise result
        if not isinstance(result, BaseException):
            outcomes.done.append((item, result))
        elif isinstance(result, ApplicationError) and is_permanent(result):
            outcomes.failed.append((item, result))
        elif outcomes.retry is None:
            outcomes.retry = result
    return outcomes


async def knowledge_base(context: StageContext, batch: IngestBatch) -> KnowledgeBase:
    kb = await context.store.get_kb(batch.tenant_id, batch.knowledge_base_id, with_counts=False)
    if kb is None:
        raise permanent(
            FailureCode.KNOWLEDGE_BASE_DELETED, f"knowledge base {batch.knowledge_base_id} no longer exists"
        )
    return kb


async def current_documents(context: StageContext, batch: IngestBatch) -> dict[str, Document]:
    """The batch's documents by id, as stored now (deleted ones are absent)."""
    ids = [d.document_id for d in batch.documents]
    return {d.id: d for d in await context.store.get_documents(batch.tenant_id, ids)}


async def still_current(context: StageContext, job: IngestInput) -> None:
    """Fails the document's stage as superseded when its run is no longer the document's current one."""
    document = await context.store.get_document(job.tenant_id, job.document_id)
    if document is None or document.ingest_run_id != job.run_id:
        raise permanent(
            FailureCode.SUPERSEDED, "the document was deleted or re-ingested while this run was working"
        )


async def run_stage(
    context: StageContext, batch: IngestBatch, stage: IngestionStage, work: StageWork
) -> StageResult:
    """Runs ``work`` for every document of the batch still on its way, together.

    Documents deleted or re-ingested meanwhile drop out; those that finished this stage in an earlier
    attempt are passed on untouched; one failing for good is marked failed and drops out while the
    others go on. Any other error is raised once the rest have finished.
    """
    with bound_identity(job_identity(batch)):
        kb = await knowledge_base(context, batch)
        status = STAGE_STATUS[stage]
        jobs = batch.jobs()
        found = await current_documents(context, batch)
        remaining: list[IngestInput] = []
        todo: list[tuple[IngestInput, Document]] = []
        for job in jobs:
            document = found.get(job.document_id)
            if document is None or document.ingest_run_id != job.run_id:
                await context.artifacts.delete(job)  # superseded: drop what this run stored
            elif document.status == DocumentStatus.FAILED:
                continue  # failed by an earlier attempt of this stage
            elif pipeline_position(document.status) > pipeline_position(status):
                remaining.append(job)  # finished this stage in an earlier attempt
            else:
                todo.append((job, document))
        await _start(context, batch, stage, todo, found)
        stages = [
            Stage(context, job, stage, found[job.document_id], resumed=document.status == status)
            for job, document in todo
        ]
        outcomes = await gather_outcomes(stages, lambda current: work(current, kb))
        for current, error in outcomes.failed:
            code, reason, attempts = failure_details(error)
            if code == FailureCode.SUPERSEDED:
                await context.artifacts.delete(current.job)
            else:
                await fail_one(context, current.job, stage, code, reason, attempts)
        items, recorded = await _record(context, batch, stage, outcomes.done)
        remaining.extend(recorded)
        outcomes.raise_retry()
        order = {job.document_id: n for n, job in enumerate(jobs)}
        remaining.sort(key=lambda job: order[job.document_id])
        return StageResult(
            items=items,
            graph_enabled=kb.graph_enabled,
            remaining=[DocumentRun(job.document_id, job.run_id) for job in remaining],
        )


async def _start(
    context: StageContext,
    batch: IngestBatch,
    stage: IngestionStage,
    todo: list[tuple[IngestInput, Document]],
    found: dict[str, Document],
) -> None:
    """Records the stage as the status of the documents entering it (not of those resuming it)."""
    status = STAGE_STATUS[stage]
    starting = [job for job, document in todo if document.status != status]
    if not starting:
        return
    low = STAGE_SPAN[stage][0]
    for job in starting:
        document = found[job.document_id]
        found[job.document_id] = replace(
            document, status=status, progress=replace(document.progress, percent=low, eta_seconds=None)
        )
    await context.store.set_stage(
        batch.tenant_id,
        [(job.document_id, job.run_id, found[job.document_id].progress) for job in starting],
        status,
    )
    async with context.events.collected():
        for job in starting:
            await context.events.progress(job, status, low)


async def _record(
    context: StageContext, batch: IngestBatch, stage: IngestionStage, finished: list[tuple[Stage, Done]]
) -> tuple[int, list[IngestInput]]:
    """Stores the results of the documents that finished, in one transaction; returns the items they
    produced and the jobs recorded (a document deleted or re-ingested meanwhile is not)."""
    recorded = await context.store.finish_stages(
        batch.tenant_id,
        stage,
        [
            (
                s.job.document_id,
                s.job.run_id,
                s.elapsed(),
                {**done.values, **({"status": STAGE_STATUS[done.next_stage]} if done.next_stage else {})},
            )
            for s, done in finished
        ],
    )
    items = 0
    going_on: list[IngestInput] = []
    async with context.events.collected():  # the batch's documents moving on, announced together
        for current, done in finished:
            ok = current.job.document_id in recorded
            if done.after is not None:
                await done.after(ok)
            if not ok:
                await context.artifacts.delete(current.job)  # superseded while it worked
                continue
            items += done.items
            going_on.append(current.job)
            if done.next_stage is not None:
                progress = done.values.get("progress", current.document.progress)
                await context.events.progress(current.job, STAGE_STATUS[done.next_stage], progress.percent)
    return items, going_on
