"""Retrieval evaluation runs: a set of labelled questions run through a knowledge base's search in
several modes, scored per question, and averaged per mode.

A run belongs to a tenant and a knowledge base; the gateway keeps it (its questions, their judgements,
the per-question scores and rankings, the averages). Retrieval scores each question
(``EvaluateQueries``); this module holds the vocabulary, the limits of what a run may ask, the check of a
request against them and the averaging. The metric names are retrieval's ``RankingMetrics`` fields: one
definition, in the contract.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final, Protocol

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode

EVALUATION_ID_PREFIX: Final = "eval_"
MAX_EVALUATION_QUERIES: Final = 2000
"""Questions in one run."""
MAX_QUERY_ID_CHARS: Final = 200
MAX_EVALUATION_NAME_CHARS: Final = 200
MAX_LABELS_PER_QUERY: Final = 100
"""Relevance judgements of one question."""
MAX_GRADE: Final = 100
"""The highest relevance grade (0 = judged not relevant)."""
DEFAULT_MODES: Final = tuple(SearchMode)
"""Every search mode: what a run evaluates when it names none."""
METRICS: Final = tuple(item.name for item in rpb.RankingMetrics.DESCRIPTOR.fields)
"""The scores of a question in a mode, and the averages of a run: ndcg_at_10, recall_at_5 …"""
INTERRUPTED: Final = "the run was interrupted by a restart of the gateway; start it again"


class EvaluationStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class ModeResult:
    """One question's scores in one mode (``METRICS`` → value) and the documents found, best first."""

    scores: Mapping[str, float]
    ranking: tuple[str, ...]


@dataclass(frozen=True)
class EvaluationQuery:
    """A labelled question of a run, at ``position`` in the order it was given; ``results`` by mode once
    it has been evaluated."""

    position: int
    id: str
    text: str
    relevant: Mapping[str, int]
    results: Mapping[SearchMode, ModeResult] = field(default_factory=dict)

    @property
    def judged_relevant(self) -> bool:
        """At least one document is judged relevant (grade > 0): the question counts in the averages."""
        return any(grade > 0 for grade in self.relevant.values())


@dataclass(frozen=True)
class EvaluationRun:
    """A run as stored. ``done`` of ``total`` questions are evaluated; ``metrics`` (mode → ``METRICS`` →
    average) is set when it has completed; ``heartbeat_at`` is renewed while a gateway runs it."""

    id: str
    tenant_id: str
    knowledge_base_id: str
    name: str
    status: EvaluationStatus
    modes: tuple[SearchMode, ...]
    created_by: str
    created_at: datetime
    heartbeat_at: datetime
    total: int
    done: int = 0
    finished_at: datetime | None = None
    error: str | None = None
    metrics: Mapping[SearchMode, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationOptions:
    """The numbers of evaluation runs (settings ``KS_GATEWAY_EVALUATION_…``)."""

    max_running_per_tenant: int = 2
    batch_size: int = 50  # questions per EvaluateQueries call (retrieval's limit)
    heartbeat_seconds: float = 10.0  # how often a gateway marks the runs it is running as alive
    stale_seconds: float = 60.0  # a run whose heartbeat is older is taken for interrupted


DEFAULT_EVALUATION_OPTIONS: Final = EvaluationOptions()


class EvaluationRefused(ValueError):
    """A run request outside the limits; ``field`` names the part at fault. ``too_large`` when it asks
    for more than a run takes (too many questions)."""

    def __init__(self, field: str, message: str, *, too_large: bool = False) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.too_large = too_large


class TooManyRunning(Exception):
    """The tenant already has as many runs running as it may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the tenant already has {limit} evaluation runs running (the limit); wait for one to finish "
            "or delete one"
        )
        self.limit = limit


class EvaluationStore(Protocol):
    """Where runs are kept; every read and change but the sweep of interrupted runs is scoped to a
    tenant. A run's progress, results and end are written only while it is still running, so a run
    deleted or failed meanwhile is never written again."""

    @property
    def shared(self) -> bool:
        """True when several gateways may use the store at once (a server database)."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def add(self, run: EvaluationRun, queries: Sequence[EvaluationQuery]) -> None: ...

    async def get(self, tenant_id: str, evaluation_id: str) -> EvaluationRun | None: ...

    async def queries(self, tenant_id: str, evaluation_id: str) -> builtins.list[EvaluationQuery]:
        """The run's questions in the order they were given (none for an unknown run)."""
        ...

    async def list(
        self,
        tenant_id: str,
        knowledge_base_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
    ) -> builtins.list[EvaluationRun]:
        """The knowledge base's runs, newest first (by ``created_at``, then id); ``after`` is the
        (created_at, id) of the previous page's last run."""
        ...

    async def count_running(self, tenant_id: str) -> int: ...

    async def save_batch(
        self,
        tenant_id: str,
        evaluation_id: str,
        results: Mapping[int, Mapping[SearchMode, ModeResult]],
        done: int,
        now: datetime,
    ) -> bool:
        """Stores the results of some questions (by position) and the progress, at once; False (and
        nothing written) when the run is no longer running."""
        ...

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
        """Ends a running run; False when it was no longer running."""
        ...

    async def heartbeat(self, evaluation_ids: Sequence[str], now: datetime) -> None:
        """Marks these runs, those still running, as alive at ``now``."""
        ...

    async def fail_stale(self, before: datetime, now: datetime) -> int:
        """Fails every running run (of any tenant) whose heartbeat is older than ``before``, saying it
        was interrupted; the number failed."""
        ...

    async def delete(self, tenant_id: str, evaluation_id: str) -> bool:
        """Removes the run with its questions; False when the tenant has no such run."""
        ...


def new_evaluation_id() -> str:
    return EVALUATION_ID_PREFIX + secrets.token_hex(8)


def check_name(name: str) -> str:
    if len(name) > MAX_EVALUATION_NAME_CHARS:
        raise EvaluationRefused("name", f"{len(name)} characters; the limit is {MAX_EVALUATION_NAME_CHARS}")
    return name


def check_modes(modes: Sequence[SearchMode]) -> tuple[SearchMode, ...]:
    """The modes of a run: each once, at least one."""
    if not modes:
        raise EvaluationRefused("modes", f"at least one mode is required ({', '.join(DEFAULT_MODES)})")
    for index, mode in enumerate(modes):
        if mode in modes[:index]:
            raise EvaluationRefused(f"modes[{index}]", f"{mode.value} is given twice")
    return tuple(modes)


def check_queries(queries: Sequence[EvaluationQuery], *, max_query_chars: int) -> None:
    """Refuses (:class:`EvaluationRefused`) questions outside the limits: at most
    :data:`MAX_EVALUATION_QUERIES`, ids unique and at most :data:`MAX_QUERY_ID_CHARS` long, text not empty
    and at most ``max_query_chars`` long, at most :data:`MAX_LABELS_PER_QUERY` labels of grades 0 to
    :data:`MAX_GRADE`, and at least one question judging a document relevant."""
    if not queries:
        raise EvaluationRefused("queries", "at least one query is required")
    if len(queries) > MAX_EVALUATION_QUERIES:
        raise EvaluationRefused(
            "queries", f"{len(queries)} queries; the limit is {MAX_EVALUATION_QUERIES}", too_large=True
        )
    seen: set[str] = set()
    for index, query in enumerate(queries):
        where = f"queries[{index}]"
        if not query.id:
            raise EvaluationRefused(f"{where}.id", "an id is required")
        if len(query.id) > MAX_QUERY_ID_CHARS:
            raise EvaluationRefused(
                f"{where}.id", f"{len(query.id)} characters; the limit is {MAX_QUERY_ID_CHARS}"
            )
        if query.id in seen:
            raise EvaluationRefused(f"{where}.id", f"{query.id!r} is given twice; ids must be unique")
        seen.add(query.id)
        if not query.text.strip():
            raise EvaluationRefused(f"{where}.text", "empty text")
        if len(query.text) > max_query_chars:
            raise EvaluationRefused(
                f"{where}.text", f"{len(query.text)} characters; the limit is {max_query_chars}"
            )
        if len(query.relevant) > MAX_LABELS_PER_QUERY:
            raise EvaluationRefused(
                f"{where}.relevant", f"{len(query.relevant)} labels; the limit is {MAX_LABELS_PER_QUERY}"
            )
        for label, grade in query.relevant.items():
            if not label:
                raise EvaluationRefused(f"{where}.relevant", "an empty label")
            if not 0 <= grade <= MAX_GRADE:
                raise EvaluationRefused(
                    f"{where}.relevant", f"grade {grade} of {label!r} is outside 0..{MAX_GRADE}"
                )
    if not any(query.judged_relevant for query in queries):
        raise EvaluationRefused(
            "queries", "no query judges a document relevant (a grade above 0): there is nothing to score"
        )


def average_metrics(
    queries: Sequence[EvaluationQuery], modes: Sequence[SearchMode]
) -> dict[SearchMode, dict[str, float]]:
    """Per mode, each metric averaged over the questions judging a document relevant (a question
    without results in a mode counts as 0 there)."""
    counted = [query for query in queries if query.judged_relevant]
    averages: dict[SearchMode, dict[str, float]] = {}
    for mode in modes:
        totals = dict.fromkeys(METRICS, 0.0)
        for query in counted:
            result = query.results.get(mode)
            for name in METRICS:
                totals[name] += result.scores.get(name, 0.0) if result is not None else 0.0
        averages[mode] = {name: total / len(counted) if counted else 0.0 for name, total in totals.items()}
    return averages


__all__ = [
    "DEFAULT_EVALUATION_OPTIONS",
    "DEFAULT_MODES",
    "EVALUATION_ID_PREFIX",
    "INTERRUPTED",
    "MAX_EVALUATION_NAME_CHARS",
    "MAX_EVALUATION_QUERIES",
    "MAX_GRADE",
    "MAX_LABELS_PER_QUERY",
    "MAX_QUERY_ID_CHARS",
    "METRICS",
    "EvaluationOptions",
    "EvaluationQuery",
    "EvaluationRefused",
    "EvaluationRun",
    "EvaluationStatus",
    "EvaluationStore",
    "ModeResult",
    "TooManyRunning",
    "average_metrics",
    "check_modes",
    "check_name",
    "check_queries",
    "new_evaluation_id",
]
