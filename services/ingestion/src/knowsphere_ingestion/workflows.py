"""The IngestDocument workflow: parse → chunk → embed → index → graph, on Temporal.

The workflow holds no data, only the order of the stages and what happens on failure. Each stage is an
activity that keeps its output in the object store and records the document's status, so a worker
that dies mid-stage is replaced by another that resumes that stage (the embed stage even resumes at the
batch it was on); finished stages are never run again. Activities are idempotent: re-running one with
the same input writes the same artifacts and the same chunk ids.

A permanent failure (a corrupt file, a refused model call, retries used up) runs ``fail_document``,
which removes whatever this run indexed and marks the document failed with the stage and reason. The
graph stage runs after the document is searchable; its failure leaves a warning, not a failed document.

This module is loaded into Temporal's workflow sandbox: it imports nothing but the SDK and stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

WORKFLOW_NAME = "IngestDocument"
PERMANENT = "PermanentFailure"


@dataclass(frozen=True)
class IngestInput:
    tenant_id: str
    user_id: str
    document_id: str
    knowledge_base_id: str
    run_id: str
    max_attempts: int = 5
    heartbeat_seconds: float = 30.0
    # Stages as local activities: run in the worker that runs the workflow, recorded in its history
    # as markers, with no task round trip through the server per stage. A dead worker is noticed
    # by the workflow task timeout and the stage resumes on another worker, as with regular ones.
    local_activities: bool = True


@dataclass(frozen=True)
class StageResult:
    items: int = 0  # pages parsed, chunks made, embedded or indexed
    graph_enabled: bool = False


@dataclass(frozen=True)
class FailInput:
    job: IngestInput
    stage: str
    code: str
    reason: str
    attempts: int


@dataclass(frozen=True)
class GraphOutcome:
    job: IngestInput
    failure_code: str = ""
    failure_reason: str = ""


def workflow_id(document_id: str, run_id: str) -> str:
    return f"ingest-{document_id}-{run_id}"


def failure_details(error: BaseException) -> tuple[str, str, int]:
    """(code, readable reason, attempts) of an activity failure."""
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError):
        details = cause.details
        info = details[0] if details and isinstance(details[0], dict) else {}
        return (
            str(info.get("code") or cause.type or "stage_failed"),
            str(info.get("reason") or cause.message),
            int(info.get("attempt", 0) or 0),
        )
    if isinstance(cause, BaseException) and cause is not error:
        message = getattr(cause, "message", None) or str(cause)
        return type(cause).__name__.lower(), str(message), 0
    return "stage_failed", str(error), 0


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)  # stdlib-only and deterministic: no sandbox needed
class IngestDocument:
    def __init__(self) -> None:
        self._stage = "parse"

    @workflow.query
    def stage(self) -> str:
        return self._stage

    @workflow.run
    async def run(self, job: IngestInput) -> str:
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=job.max_attempts,
            non_retryable_error_types=[PERMANENT],
        )
        heartbeat = timedelta(seconds=job.heartbeat_seconds)

        async def stage(name: str, timeout: timedelta) -> StageResult:
            self._stage = name.split("_")[0]  # parse_document → parse, embed_chunks → embed …
            if job.local_activities:
                return await workflow.execute_local_activity(
                    name,
                    job,
                    start_to_close_timeout=timeout,
                    retry_policy=retry,
                    result_type=StageResult,
                )
            return await workflow.execute_activity(
                name,
                job,
                start_to_close_timeout=timeout,
                heartbeat_timeout=heartbeat,
                retry_policy=retry,
                result_type=StageResult,
            )

        try:
            await stage("parse_document", timedelta(minutes=30))
            await stage("chunk_document", timedelta(minutes=10))
            await stage("embed_chunks", timedelta(hours=6))
            indexed = await stage("index_chunks", timedelta(hours=1))
        except (ActivityError, ApplicationError) as error:  # local activities raise the cause
            if isinstance(error.cause, CancelledError):
                raise
            code, reason, attempts = failure_details(error)
            await workflow.execute_activity(
                "fail_document",
                FailInput(job, self._stage, code, reason, attempts),
                start_to_close_timeout=timedelta(minutes=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
            )
            return "failed"
        if not indexed.graph_enabled:
            return "ready"
        self._stage = "graph"
        outcome = GraphOutcome(job)
        try:
            await workflow.execute_activity(
                "extract_graph",
                job,
                start_to_close_timeout=timedelta(hours=2),
                heartbeat_timeout=heartbeat,
                retry_policy=retry,
                result_type=StageResult,
            )
        except (ActivityError, ApplicationError) as error:  # local activities raise the cause
            if isinstance(error.cause, CancelledError):
                raise
            code, reason, _ = failure_details(error)
            outcome = GraphOutcome(job, code, reason)
        await workflow.execute_activity(
            "finish_graph",
            outcome,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        )
        return "ready"


MIGRATION_WORKFLOW_NAME = "MigrateEmbeddings"


@dataclass(frozen=True)
class MigrateInput:
    tenant_id: str
    user_id: str
    knowledge_base_id: str
    to_model_id: str
    heartbeat_seconds: float = 30.0


@dataclass(frozen=True)
class MigrationFailure:
    job: MigrateInput
    reason: str


def migration_workflow_id(knowledge_base_id: str, to_model_id: str) -> str:
    return f"migrate-{knowledge_base_id}-{to_model_id}"


@workflow.defn(name=MIGRATION_WORKFLOW_NAME, sandboxed=False)
class MigrateEmbeddings:
    """Re-embeds every document of a knowledge base with a new model, then switches retrieval over.

    Queries keep using the old model until the switch; documents ingested meanwhile are embedded with
    both. A failure leaves the old model active and the migration marked failed with the reason.
    """

    @workflow.run
    async def run(self, job: MigrateInput) -> str:
        try:
            await workflow.execute_activity(
                "migrate_embeddings",
                job,
                start_to_close_timeout=timedelta(hours=24),
                heartbeat_timeout=timedelta(seconds=job.heartbeat_seconds),
                retry_policy=RetryPolicy(
                    maximum_interval=timedelta(seconds=30),
                    maximum_attempts=5,
                    non_retryable_error_types=[PERMANENT],
                ),
            )
        except (ActivityError, ApplicationError) as error:
            if isinstance(error.cause, CancelledError):
                raise
            _, reason, _ = failure_details(error)
            await workflow.execute_activity(
                "fail_migration",
                MigrationFailure(job, reason),
                start_to_close_timeout=timedelta(minutes=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
            )
            return "failed"
        return "completed"
