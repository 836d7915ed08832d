"""Evaluation runs at rest (``SqlEvaluationStore``): one suite, run on SQLite always and on PostgreSQL when
one answers at ``KS_TEST_POSTGRES_URL`` (a fresh database per test, dropped after).

What a caller notices: a run comes back whole with its questions in order; a tenant never reads, lists,
counts or deletes another's; runs list newest first, page by page; a batch's results and the progress
are written together and only while the run is running, as is its end, so a run deleted or failed
meanwhile is never written again; only runs whose heartbeat stopped are failed as interrupted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_gateway.adapters.evaluations_sql import SqlEvaluationStore
from knowsphere_gateway.domain.evaluations import (
    INTERRUPTED,
    EvaluationQuery,
    EvaluationRun,
    EvaluationStatus,
    ModeResult,
)

T0 = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
HYBRID, BM25 = SearchMode.HYBRID, SearchMode.BM25
SCORES = {"ndcg_at_10": 0.5, "recall_at_5": 1.0, "recall_at_10": 1.0, "recall_at_20": 1.0, "mrr_at_10": 0.5}


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[SqlEvaluationStore]:
    if request.param == "sqlite":
        sql_store = SqlEvaluationStore(f"sqlite+aiosqlite:///{tmp_path}/gateway.db")
        await sql_store.open()
        assert not sql_store.shared
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("EvaluationStore"):
        sql_store = SqlEvaluationStore(url)
        await sql_store.open()
        assert sql_store.shared
        try:
            yield sql_store
        finally:
            await sql_store.close()


def a_run(
    run_id: str, tenant: str = "acme", kb: str = "kb", at: datetime = T0, **fields: Any
) -> EvaluationRun:
    values: dict[str, Any] = {
        "id": run_id,
        "tenant_id": tenant,
        "knowledge_base_id": kb,
        "name": f"run {run_id}",
        "status": EvaluationStatus.RUNNING,
        "modes": (HYBRID, BM25),
        "created_by": "alice",
        "created_at": at,
        "heartbeat_at": at,
        "total": 3,
    }
    return EvaluationRun(**(values | fields))


QUERIES = [
    EvaluationQuery(0, "q1", "annual leave", {"handbook": 2, "faq": 0}),
    EvaluationQuery(1, "q2", "年假可以结转吗？", {"员工手册": 1}),
    EvaluationQuery(2, "q3", "badge", {}),
]


async def test_a_run_comes_back_whole_with_its_questions_in_order(store: SqlEvaluationStore) -> None:
    run = a_run("e1")
    await store.add(run, QUERIES)
    assert await store.get("acme", "e1") == run
    assert await store.queries("acme", "e1") == QUERIES


async def test_a_tenant_reaches_only_its_own_runs(store: SqlEvaluationStore) -> None:
    await store.add(a_run("e1"), QUERIES)
    assert await store.get("globex", "e1") is None
    assert await store.queries("globex", "e1") == []
    assert await store.list("globex", "kb", limit=10) == []
    assert (await store.count_running("globex"), await store.count_running("acme")) == (0, 1)
    assert not await store.save_batch("globex", "e1", {0: {HYBRID: ModeResult(SCORES, ("x",))}}, 1, T0)
    assert not await store.finish("globex", "e1", EvaluationStatus.COMPLETED, T0)
    assert not await store.delete("globex", "e1")
    assert await store.get("acme", "e1") == a_run("e1")
    assert [q.results for q in await store.queries("acme", "e1")] == [{}, {}, {}]


async def test_runs_list_newest_first_page_by_page(store: SqlEvaluationStore) -> None:
    for index, run_id in enumerate(["e1", "e2", "e3", "e4"]):
        await store.add(a_run(run_id, at=T0 + timedelta(minutes=index)), [])
    await store.add(a_run("e5", at=T0 + timedelta(minutes=1)), [])  # same time as e2: by id
    await store.add(a_run("other-kb", kb="kb-2", at=T0 + timedelta(hours=1)), [])
    first = await store.list("acme", "kb", limit=3)
    assert [r.id for r in first] == ["e4", "e3", "e5"]
    rest = await store.list("acme", "kb", limit=3, after=(first[-1].created_at, first[-1].id))
    assert [r.id for r in rest] == ["e2", "e1"]


async def test_a_batch_and_the_end_are_written_only_while_the_run_is_running(
    store: SqlEvaluationStore,
) -> None:
    await store.add(a_run("e1"), QUERIES)
    later = T0 + timedelta(seconds=30)
    batch = {0: {HYBRID: ModeResult(SCORES, ("handbook", "faq")), BM25: ModeResult(SCORES, ())}}
    assert await store.save_batch("acme", "e1", batch, 1, later)
    run = await store.get("acme", "e1")
    assert run is not None and (run.done, run.heartbeat_at) == (1, later)
    stored = await store.queries("acme", "e1")
    assert [q.results for q in stored] == [batch[0], {}, {}]

    metrics = {HYBRID: SCORES, BM25: dict.fromkeys(SCORES, 0.0)}
    assert await store.finish("acme", "e1", EvaluationStatus.COMPLETED, later, metrics=metrics)
    run = await store.get("acme", "e1")
    assert run is not None
    assert (run.status, run.finished_at, run.metrics, run.error) == (
        EvaluationStatus.COMPLETED,
        later,
        metrics,
        None,
    )
    # Ended: nothing more is written, whatever comes late.
    assert not await store.save_batch("acme", "e1", {1: batch[0]}, 2, later)
    assert not await store.finish("acme", "e1", EvaluationStatus.FAILED, later, error="late")
    run = await store.get("acme", "e1")
    assert run is not None and (run.status, run.done, run.error) == (EvaluationStatus.COMPLETED, 1, None)
    assert [q.results for q in await store.queries("acme", "e1")] == [batch[0], {}, {}]
    assert await store.count_running("acme") == 0


async def test_deleting_removes_the_run_with_its_questions(store: SqlEvaluationStore) -> None:
    await store.add(a_run("e1"), QUERIES)
    await store.add(a_run("e2"), QUERIES)
    assert await store.delete("acme", "e1")
    assert await store.get("acme", "e1") is None and await store.queries("acme", "e1") == []
    assert not await store.save_batch("acme", "e1", {0: {HYBRID: ModeResult(SCORES, ())}}, 1, T0)
    assert await store.queries("acme", "e2") == QUERIES
    assert not await store.delete("acme", "e1")


async def test_only_runs_whose_heartbeat_stopped_are_failed_as_interrupted(store: SqlEvaluationStore) -> None:
    await store.add(a_run("stale", at=T0), [])
    await store.add(a_run("alive", at=T0), [])
    await store.add(a_run("done", at=T0, status=EvaluationStatus.COMPLETED, finished_at=T0), [])
    await store.heartbeat(["alive", "done"], T0 + timedelta(seconds=50))
    now = T0 + timedelta(seconds=70)
    assert await store.fail_stale(now - timedelta(seconds=60), now) == 1
    stale, alive, done = [await store.get("acme", run_id) for run_id in ("stale", "alive", "done")]
    assert stale is not None and (stale.status, stale.error, stale.finished_at) == (
        EvaluationStatus.FAILED,
        INTERRUPTED,
        now,
    )
    assert alive is not None and (alive.status, alive.heartbeat_at) == (
        EvaluationStatus.RUNNING,
        T0 + timedelta(seconds=50),
    )
    assert done is not None and (done.status, done.heartbeat_at) == (EvaluationStatus.COMPLETED, T0)
