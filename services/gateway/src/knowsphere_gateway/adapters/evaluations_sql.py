"""Evaluation runs on SQLAlchemy 2 async, in the gateway's database (``KS_GATEWAY_DATABASE_URL``: SQLite
in the data dir by default, PostgreSQL in production). Every read and change filters by tenant, but the
sweep of interrupted runs.

``evaluation_runs`` holds a run (its modes, progress, averages and end) and ``evaluation_queries`` its
questions by position, each with its judgements and, once evaluated, its results per mode (JSON). A
batch's results and the run's progress are written in one transaction, and only while the run is still
running: a run deleted or failed meanwhile is never written again, and nothing is half-written.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)

from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_gateway.domain.evaluations import (
    INTERRUPTED,
    EvaluationQuery,
    EvaluationRun,
    EvaluationStatus,
    ModeResult,
)
from knowsphere_sqlstore import AnyRow, SqlDatabase, UtcDateTime, record_from_row, row_from

metadata = MetaData()

evaluation_runs = Table(
    "evaluation_runs",
    metadata,
    Column("id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("knowledge_base_id", String(), nullable=False),
    Column("name", String(), nullable=False),
    Column("status", String(), nullable=False),
    Column("modes", Text(), nullable=False),  # JSON list of mode names
    Column("created_by", String(), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("heartbeat_at", UtcDateTime, nullable=False),
    Column("total", Integer(), nullable=False),
    Column("done", Integer(), nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    Column("error", Text(), nullable=True),
    Column("metrics", Text(), nullable=False),  # JSON: mode → metric → average
    Index("ix_evaluation_runs_knowledge_base", "tenant_id", "knowledge_base_id", "created_at"),
    Index("ix_evaluation_runs_status", "status", "heartbeat_at"),
)

evaluation_queries = Table(
    "evaluation_queries",
    metadata,
    Column("evaluation_id", String(), primary_key=True),
    Column("position", Integer(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("query_id", String(), nullable=False),
    Column("text", Text(), nullable=False),
    Column("relevant", Text(), nullable=False),  # JSON: label → grade
    Column("results", Text(), nullable=False),  # JSON: mode → {metric: value, "ranking": [...]}
)

RUNNING = EvaluationStatus.RUNNING.value


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _encode_results(results: Mapping[SearchMode, ModeResult]) -> str:
    return _json(
        {mode.value: {**result.scores, "ranking": list(result.ranking)} for mode, result in results.items()}
    )


def _decode_results(text: str) -> dict[SearchMode, ModeResult]:
    decoded: dict[SearchMode, ModeResult] = {}
    for mode, value in json.loads(text).items():
        ranking = value.pop("ranking", [])
        decoded[SearchMode(mode)] = ModeResult(scores=value, ranking=tuple(ranking))
    return decoded


def _encode_metrics(metrics: Mapping[SearchMode, Mapping[str, float]]) -> str:
    return _json({mode.value: dict(values) for mode, values in metrics.items()})


def _run(row: AnyRow) -> EvaluationRun:
    return record_from_row(
        EvaluationRun,
        row,
        status=EvaluationStatus(row.status),
        modes=tuple(SearchMode(mode) for mode in json.loads(row.modes)),
        metrics={SearchMode(mode): values for mode, values in json.loads(row.metrics).items()},
    )


def _query(row: AnyRow) -> EvaluationQuery:
    return record_from_row(
        EvaluationQuery,
        row,
        id=row.query_id,
        relevant=json.loads(row.relevant),
        results=_decode_results(row.results),
    )


def _owned(tenant_id: str, evaluation_id: str) -> ColumnElement[bool]:
    return and_(evaluation_runs.c.tenant_id == tenant_id, evaluation_runs.c.id == evaluation_id)


def _running(tenant_id: str, evaluation_id: str) -> ColumnElement[bool]:
    return and_(_owned(tenant_id, evaluation_id), evaluation_runs.c.status == RUNNING)


class SqlEvaluationStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlEvaluationStore")

    @property
    def shared(self) -> bool:
        """A server database is shared by every gateway replica; a SQLite file is one gateway's."""
        return self._db.engine.dialect.name != "sqlite"

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def add(self, run: EvaluationRun, queries: Sequence[EvaluationQuery]) -> None:
        row = row_from(
            evaluation_runs,
            run,
            status=run.status.value,
            modes=_json([mode.value for mode in run.modes]),
            metrics=_encode_metrics(run.metrics),
        )
        rows = [
            row_from(
                evaluation_queries,
                query,
                evaluation_id=run.id,
                tenant_id=run.tenant_id,
                query_id=query.id,
                relevant=_json(dict(query.relevant)),
                results=_encode_results(query.results),
            )
            for query in queries
        ]
        async with self._db.engine.begin() as conn:
            await conn.execute(insert(evaluation_runs).values(row))
            if rows:
                await conn.execute(insert(evaluation_queries), rows)

    async def get(self, tenant_id: str, evaluation_id: str) -> EvaluationRun | None:
        query = select(evaluation_runs).where(_owned(tenant_id, evaluation_id))
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _run(row) if row is not None else None

    async def queries(self, tenant_id: str, evaluation_id: str) -> builtins.list[EvaluationQuery]:
        query = (
            select(evaluation_queries)
            .where(
                evaluation_queries.c.tenant_id == tenant_id,
                evaluation_queries.c.evaluation_id == evaluation_id,
            )
            .order_by(evaluation_queries.c.position)
        )
        async with self._db.engine.connect() as conn:
            return [_query(row) for row in (await conn.execute(query)).all()]

    async def list(
        self,
        tenant_id: str,
        knowledge_base_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
    ) -> builtins.list[EvaluationRun]:
        runs = evaluation_runs.c
        query = select(evaluation_runs).where(
            runs.tenant_id == tenant_id, runs.knowledge_base_id == knowledge_base_id
        )
        if after is not None:
            created_at, last_id = after
            query = query.where(
                (runs.created_at < created_at) | and_(runs.created_at == created_at, runs.id < last_id)
            )
        query = query.order_by(runs.created_at.desc(), runs.id.desc()).limit(limit)
        async with self._db.engine.connect() as conn:
            return [_run(row) for row in (await conn.execute(query)).all()]

    async def count_running(self, tenant_id: str) -> int:
        query = select(func.count()).where(
            evaluation_runs.c.tenant_id == tenant_id, evaluation_runs.c.status == RUNNING
        )
        async with self._db.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def save_batch(
        self,
        tenant_id: str,
        evaluation_id: str,
        results: Mapping[int, Mapping[SearchMode, ModeResult]],
        done: int,
        now: datetime,
    ) -> bool:
        progress = (
            update(evaluation_runs)
            .where(_running(tenant_id, evaluation_id))
            .values(done=done, heartbeat_at=now)
        )
        answers = (
            update(evaluation_queries)
            .where(
                evaluation_queries.c.tenant_id == tenant_id,
                evaluation_queries.c.evaluation_id == evaluation_id,
                evaluation_queries.c.position == bindparam("at"),
            )
            .values(results=bindparam("answer"))
        )
        async with self._db.engine.begin() as conn:
            if not (await conn.execute(progress)).rowcount:
                return False
            if results:
                await conn.execute(
                    answers,
                    [{"at": at, "answer": _encode_results(found)} for at, found in sorted(results.items())],
                )
        return True

    async def finish(
        self,
        tenant_id: str,
        evaluation_id: str,
        status: EvaluationStatus,
        now: datetime,
        *,
        metrics: Mapping[SearchMode, Mapping[str, float]] | None = None,
        error: str | None = None,
    ) -> bool:
        values: dict[str, Any] = {
            "status": status.value,
            "finished_at": now,
            "heartbeat_at": now,
            "error": error,
        }
        if metrics is not None:
            values["metrics"] = _encode_metrics(metrics)
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                update(evaluation_runs).where(_running(tenant_id, evaluation_id)).values(**values)
            )
        return bool(result.rowcount)

    async def heartbeat(self, evaluation_ids: Sequence[str], now: datetime) -> None:
        if not evaluation_ids:
            return
        async with self._db.engine.begin() as conn:
            await conn.execute(
                update(evaluation_runs)
                .where(evaluation_runs.c.id.in_(list(evaluation_ids)), evaluation_runs.c.status == RUNNING)
                .values(heartbeat_at=now)
            )

    async def fail_stale(self, before: datetime, now: datetime) -> int:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                update(evaluation_runs)
                .where(evaluation_runs.c.status == RUNNING, evaluation_runs.c.heartbeat_at < before)
                .values(
                    status=EvaluationStatus.FAILED.value, finished_at=now, heartbeat_at=now, error=INTERRUPTED
                )
            )
        return int(result.rowcount)

    async def delete(self, tenant_id: str, evaluation_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(delete(evaluation_runs).where(_owned(tenant_id, evaluation_id)))
            await conn.execute(
                delete(evaluation_queries).where(
                    evaluation_queries.c.tenant_id == tenant_id,
                    evaluation_queries.c.evaluation_id == evaluation_id,
                )
            )
        return bool(result.rowcount)


__all__ = ["SqlEvaluationStore", "evaluation_queries", "evaluation_runs", "metadata"]
