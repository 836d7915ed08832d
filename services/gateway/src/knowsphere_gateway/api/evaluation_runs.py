"""Evaluation runs in the background of the gateway process (``api/evaluations.py`` starts them).

A run is an asyncio task that sends its questions to retrieval's ``EvaluateQueries`` in batches of
``batch_size``, as the user who started it, and stores each batch's results with the progress; then the
averages per mode and ``completed``. A failed call ends it ``failed`` with a message a person can act on
(never a service's internals). At most ``max_running_per_tenant`` runs of a tenant run at once.

Runs outlive no process: while a gateway runs one, it renews the run's heartbeat every
``heartbeat_seconds``. At start-up, and then on every heartbeat, a run whose heartbeat stopped for
``stale_seconds`` (its gateway died) is failed saying it was interrupted and should be started again. On
a SQLite file, which one gateway owns, every run still running at start-up is failed at once; on a
shared database another replica's runs keep running. Stopping the gateway cancels its runs and fails
them the same way. Deleting a run cancels it first; a run deleted through another replica stops at its
next batch, which finds nothing to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from opentelemetry import trace

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_clients import RetrievalClient
from knowsphere_clients.errors import ServiceError
from knowsphere_gateway.api.errors import error_body
from knowsphere_gateway.domain.evaluations import (
    INTERRUPTED,
    METRICS,
    EvaluationOptions,
    EvaluationQuery,
    EvaluationRun,
    EvaluationStatus,
    EvaluationStore,
    ModeResult,
    TooManyRunning,
    average_metrics,
    new_evaluation_id,
)
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("knowsphere.gateway")

FAILED_UNEXPECTEDLY = "the run failed unexpectedly; start it again"


def utc_now() -> datetime:
    return datetime.now(UTC)


def retrieval_query(query: EvaluationQuery) -> rpb.EvaluationQuery:
    return rpb.EvaluationQuery(id=query.id, text=query.text, relevance=dict(query.relevant))


def mode_results(evaluated: rpb.QueryEvaluation) -> dict[SearchMode, ModeResult]:
    results: dict[SearchMode, ModeResult] = {}
    for item in evaluated.modes:
        mode = SearchMode.from_number(item.mode)
        if mode is not None:
            scores = {name: float(getattr(item.metrics, name)) for name in METRICS}
            results[mode] = ModeResult(scores=scores, ranking=tuple(item.ranking))
    return results


@dataclass
class _Running:
    run: EvaluationRun
    task: asyncio.Task[None]


class EvaluationRuns:
    """The runs of this gateway process, and a lifecycle component: :meth:`start` opens the store and
    fails interrupted runs; :meth:`stop` cancels the runs and closes the store."""

    name = "evaluation-runs"

    def __init__(
        self,
        store: EvaluationStore,
        retrieval: RetrievalClient,
        options: EvaluationOptions,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self._retrieval = retrieval
        self._options = options
        self._clock = clock
        self._running: dict[str, _Running] = {}
        self._starting = asyncio.Lock()
        self._keeper: asyncio.Task[None] | None = None

    async def start(self) -> object:
        await self.store.open()
        now = self._clock()
        before = now - timedelta(seconds=self._options.stale_seconds) if self.store.shared else now
        interrupted = await self.store.fail_stale(before, now)
        if interrupted:
            log.warning("evaluation runs interrupted by a restart marked failed", runs=interrupted)
        self._keeper = asyncio.create_task(self._keep_alive())
        return None

    async def stop(self, grace: float | None = None) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        running = list(self._running.values())
        for item in running:
            item.task.cancel()
        await asyncio.gather(*(item.task for item in running), return_exceptions=True)
        now = self._clock()
        for item in running:
            await self.store.finish(
                item.run.tenant_id, item.run.id, EvaluationStatus.FAILED, now, error=INTERRUPTED
            )
        await self.store.close()

    async def begin(
        self,
        identity: Identity,
        knowledge_base_id: str,
        name: str,
        modes: Sequence[SearchMode],
        queries: Sequence[EvaluationQuery],
    ) -> EvaluationRun:
        """Stores a new run and starts it; :class:`TooManyRunning` when the tenant is at its limit."""
        limit = self._options.max_running_per_tenant
        async with self._starting:  # two requests of this process cannot both take the last place
            if await self.store.count_running(identity.tenant_id) >= limit:
                raise TooManyRunning(limit)
            now = self._clock()
            run = EvaluationRun(
                id=new_evaluation_id(),
                tenant_id=identity.tenant_id,
                knowledge_base_id=knowledge_base_id,
                name=name,
                status=EvaluationStatus.RUNNING,
                modes=tuple(modes),
                created_by=identity.user_id,
                created_at=now,
                heartbeat_at=now,
                total=len(queries),
            )
            await self.store.add(run, queries)
        started_by = trace.get_current_span().get_span_context()
        # A context of its own: the run outlives the request, whose identity and span it must not hold.
        task = asyncio.create_task(
            self._run(run, queries, started_by), name=f"evaluation {run.id}", context=contextvars.Context()
        )
        self._running[run.id] = _Running(run, task)
        task.add_done_callback(lambda _: self._running.pop(run.id, None))
        return run

    async def delete(self, tenant_id: str, evaluation_id: str) -> bool:
        """Cancels the run when it runs here, then removes it; False when the tenant has no such run."""
        if await self.store.get(tenant_id, evaluation_id) is None:
            return False
        item = self._running.get(evaluation_id)
        if item is not None:
            item.task.cancel()
            await asyncio.gather(item.task, return_exceptions=True)
        return await self.store.delete(tenant_id, evaluation_id)

    async def _run(
        self, run: EvaluationRun, queries: Sequence[EvaluationQuery], started_by: trace.SpanContext
    ) -> None:
        links = [trace.Link(started_by)] if started_by.is_valid else None
        with (
            _tracer.start_as_current_span("gateway.evaluation_run", links=links) as span,
            bound_identity(Identity(run.tenant_id, run.created_by)),
        ):
            span.set_attribute(attributes.KNOWLEDGE_BASE_ID, run.knowledge_base_id)
            try:
                done = await self._evaluate(run, queries)
                if done is None:
                    return  # deleted or ended meanwhile: nothing more to write
                await self.store.finish(
                    run.tenant_id,
                    run.id,
                    EvaluationStatus.COMPLETED,
                    self._clock(),
                    metrics=average_metrics(done, run.modes),
                )
            except ServiceError as error:
                await self._fail(run, error_body(error)["message"])
            except Exception:
                log.exception("evaluation run failed", evaluation_id=run.id)
                await self._fail(run, FAILED_UNEXPECTEDLY)

    async def _evaluate(
        self, run: EvaluationRun, queries: Sequence[EvaluationQuery]
    ) -> list[EvaluationQuery] | None:
        """Every question with its results, batch by batch; None when the run stopped being written."""
        modes = [mode.to_proto() for mode in run.modes]
        size = self._options.batch_size
        done: list[EvaluationQuery] = []
        for first in range(0, len(queries), size):
            batch = queries[first : first + size]
            response = await self._retrieval.evaluate_queries(
                run.knowledge_base_id, modes, [retrieval_query(q) for q in batch]
            )
            answered = {evaluated.query_id: mode_results(evaluated) for evaluated in response.queries}
            scored = [
                EvaluationQuery(q.position, q.id, q.text, q.relevant, answered.get(q.id, {})) for q in batch
            ]
            results = {q.position: q.results for q in scored}
            progress = first + len(batch)
            if not await self.store.save_batch(run.tenant_id, run.id, results, progress, self._clock()):
                return None
            done += scored
        return done

    async def _fail(self, run: EvaluationRun, message: str) -> None:
        try:
            await self.store.finish(
                run.tenant_id, run.id, EvaluationStatus.FAILED, self._clock(), error=message
            )
        except Exception:  # the store is away too: the heartbeat stops, and the run is failed as stale
            log.warning("recording a failed evaluation run failed", evaluation_id=run.id, exc_info=True)

    async def _keep_alive(self) -> None:
        stale = timedelta(seconds=self._options.stale_seconds)
        while True:
            await asyncio.sleep(self._options.heartbeat_seconds)
            try:
                now = self._clock()
                await self.store.heartbeat(list(self._running), now)
                interrupted = await self.store.fail_stale(now - stale, now)
                if interrupted:
                    log.warning("interrupted evaluation runs marked failed", runs=interrupted)
            except Exception:  # a database hiccup: the next beat tries again
                log.warning("renewing the evaluation runs' heartbeat failed", exc_info=True)


__all__ = ["FAILED_UNEXPECTEDLY", "EvaluationRuns", "mode_results", "retrieval_query", "utc_now"]
