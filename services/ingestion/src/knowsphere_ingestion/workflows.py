"""The IngestDocuments workflow: parse → chunk → embed → index → graph, on Temporal.

One workflow ingests the documents of one upload (a single file, or up to a batch of the files sent
together), so many small files cost one workflow and a few activity calls instead of one each: the
embedding and indexing calls of the whole batch share their batches. Each document still has its own
status, progress, failure and artifacts; a document that fails is marked failed and dropped from the
batch while the others go on.

The workflow holds no data, only the order of the stages, the documents still on their way and what
happens on failure. Each stage is an activity that keeps its output per document in the object store
and records each document's status, so a worker that dies mid-stage is replaced by another that resumes
that stage (documents that finished it are skipped; the embed stage even resumes at the batch it was
on); finished stages are never run again. Activities are idempotent: re-running one with the same
input writes the same artifacts and the same chunk ids.

A stage failing for good (retries used up) runs ``fail_documents``, which removes whatever this run
indexed for the documents still in the batch and marks them failed with the stage and reason. The
graph stage runs after the documents are searchable; its failure leaves a warning, not a failed
document.

Each input carries the caller's signed identity token (``identity_token``); activities act only for
the identity it proves. The workflow renews it (the ``renew_identity`` activity) before a stage when
less than half its lifetime is left, so a long batch keeps a valid one.

This module imports nothing but the SDK and stdlib.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

WORKFLOW_NAME = "IngestDocuments"
PERMANENT = "PermanentFailure"


@dataclass(frozen=True)
class DocumentRun:
    """A document and the ingest run it is in (a re-ingest or a delete supersedes the run)."""

    document_id: str
    run_id: str


@dataclass(frozen=True)
class IngestInput:
    """One document's job, as the per-document steps of the activities see it."""

    tenant_id: str
    user_id: str
    document_id: str
    knowledge_base_id: str
    run_id: str


@dataclass(frozen=True)
class IngestBatch:
    """The documents of one knowledge base ingested together by one workflow."""

    tenant_id: str
    user_id: str
    knowledge_base_id: str
    documents: list[DocumentRun]
    # Empty only in runs started before tokens existed (their activities refuse them).
    identity_token: str = ""
    max_attempts: int = 5
    heartbeat_seconds: float = 30.0
    # Stages as local activities: run in the worker that runs the workflow, recorded in its history
    # as markers, with no task round trip through the server per stage. A dead worker is noticed
    # by the workflow task timeout and the stage resumes on another worker, as with regular ones.
    local_activities: bool = True

    def jobs(self) -> list[IngestInput]:
        return [
            IngestInput(self.tenant_id, self.user_id, d.document_id, self.knowledge_base_id, d.run_id)
            for d in self.documents
        ]


@dataclass(frozen=True)
class StageResult:
    items: int = 0  # pages parsed, chunks made, embedded or indexed (over the batch)
    graph_enabled: bool = False
    # The documents that finished the stage and go on; the others failed or were superseded.
    remaining: list[DocumentRun] = field(default_factory=list)


@dataclass(frozen=True)
class FailInput:
    batch: IngestBatch
    stage: str
    code: str
    reason: str
    attempts: int


@dataclass(frozen=True)
class GraphOutcome:
    batch: IngestBatch
    failure_code: str = ""
    failure_reason: str = ""


RENEW_IDENTITY = "renew_identity"
Job = TypeVar("Job", "IngestBatch", "MigrateInput")


def _token_times(token: str) -> tuple[float, float] | None:
    """(issued, expires) of a token, read without checking it (activities verify it; this only decides
    when to renew); ``None`` when it has no readable times."""
    try:
        payload = token.split(".")[1]
        claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["iat"]), float(claims["exp"])
    except (IndexError, KeyError, TypeError, ValueError, binascii.Error):
        return None


async def renewed(job: Job) -> Job:
    """``job`` with a fresh identity token when less than half of its token's lifetime is left.

    A job without a token (a run from before tokens, whose history has no renewal) or with one whose
    times cannot be read is left as it is: its activities refuse it.
    """
    times = _token_times(job.identity_token)
    if times is None:
        return job
    issued, expires = times
    if expires - workflow.now().timestamp() > (expires - issued) / 2:
        return job
    token = await workflow.execute_activity(
        RENEW_IDENTITY,
        job.identity_token,
        start_to_close_timeout=timedelta(minutes=1),
        retry_policy=RetryPolicy(
            maximum_interval=timedelta(seconds=30), non_retryable_error_types=[PERMANENT]
        ),
        result_type=str,
    )
    return replace(job, identity_token=token)


def workflow_id(run_id: str) -> str:
    """The workflow of an ingest run; every document of one upload batch shares the run id."""
    return f"ingest-{run_id}"


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
class IngestDocuments:
    def __init__(self) -> None:
        self._stage = "parse"

    @workflow.query
    def stage(self) -> str:
        return self._stage

    @workflow.run
    async def run(self, job: IngestBatch) -> str:
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=job.max_attempts,
            non_retryable_error_types=[PERMANENT],
        )
        heartbeat = timedelta(seconds=job.heartbeat_seconds)

        async def stage(name: str, batch: IngestBatch, timeout: timedelta) -> StageResult:
            self._stage = name.split("_")[0]  # parse_documents → parse, embed_chunks → embed …
            if job.local_activities:
                return await workflow.execute_local_activity(
                    name,
                    batch,
                    start_to_close_timeout=timeout,
                    retry_policy=retry,
                    result_type=StageResult,
                )
            return await workflow.execute_activity(
                name,
                batch,
                start_to_close_timeout=timeout,
                heartbeat_timeout=heartbeat,
                retry_policy=retry,
                result_type=StageResult,
            )

        batch = job
        graph_enabled = False
        for name, timeout in (
            ("parse_documents", timedelta(minutes=30)),
            ("chunk_documents", timedelta(minutes=10)),
            ("embed_chunks", timedelta(hours=6)),
            ("index_chunks", timedelta(hours=1)),
        ):
            try:
                # The time limits are per document: a batch gets them once for each of its documents.
                batch = await renewed(batch)
                result = await stage(name, batch, timeout * len(batch.documents))
            except (ActivityError, ApplicationError) as error:  # local activities raise the cause
                if isinstance(error.cause, CancelledError):
                    raise
                code, reason, attempts = failure_details(error)
                passed = await workflow.execute_activity(
                    "fail_documents",
                    FailInput(batch, self._stage, code, reason, attempts),
                    start_to_close_timeout=timedelta(minutes=10),
                    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                    result_type=StageResult,
                )
                # Documents that had finished the stage before it gave up go on; the rest failed.
                # (A run recorded before fail_documents answered has no answer: all of it failed.)
                if passed is None or not passed.remaining:
                    return "failed"
                result = passed
            batch = replace(batch, documents=result.remaining)
            graph_enabled = result.graph_enabled
            if not batch.documents:
                return "done"
        if not graph_enabled:
            return "done"
        self._stage = "graph"
        batch = await renewed(batch)
        outcome = GraphOutcome(batch)
        try:
            await workflow.execute_activity(
                "extract_graph",
                batch,
                start_to_close_timeout=timedelta(hours=2) * len(batch.documents),
                heartbeat_timeout=heartbeat,
                retry_policy=retry,
                result_type=StageResult,
            )
        except (ActivityError, ApplicationError) as error:  # local activities raise the cause
            if isinstance(error.cause, CancelledError):
                raise
            code, reason, _ = failure_details(error)
            outcome = GraphOutcome(batch, code, reason)
        await workflow.execute_activity(
            "finish_graph",
            outcome,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        )
        return "done"


MIGRATION_WORKFLOW_NAME = "MigrateEmbeddings"


@dataclass(frozen=True)
class MigrateInput:
    tenant_id: str
    user_id: str
    knowledge_base_id: str
    to_model_id: str
    identity_token: str = ""
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
            job = await renewed(job)
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
