"""Replays recorded histories on today's workflows: a non-deterministic change fails here, not in production.

A worker that picks up a run started before a deploy replays that run's history through the new code;
if the new code issues other commands (another activity, another order, one more or one less), the run
is stuck with a non-determinism error. The histories in ``histories/`` were recorded by
``record_histories.py`` (IngestDocuments with local and with regular activities, a dropped document, an
emptied batch, the graph on, the graph failing, a permanent failure; MigrateEmbeddings completing and
failing); each must replay on the workflows of ``knowsphere_ingestion.workflows``.

How we know these replays can fail (the issue's acceptance asks for it):
- the tests below replay the recordings on deliberately altered copies of IngestDocuments registered
  under its name: the stages in another order, or one activity more without a version marker, raise
  the SDK's ``NondeterminismError`` naming the mismatched activities; the same extra activity behind
  ``workflow.patched`` replays cleanly (that is how such a change ships);
- by hand, on scratch copies of ``workflows.py`` put first on ``PYTHONPATH`` (the real file untouched),
  ``test_recorded_history_replays`` failed with ``NondeterminismError`` for: parse and chunk swapped
  (every ingest recording), no early return for an emptied batch (``ingest_emptied_batch``), the graph
  stage run with the graph off (the three recordings without graph), the local-activity switch ignored
  (``ingest_batch_activities``), ``fail_migration`` left out (``migration_failure``).
Changes that keep the commands — other retry policies, timeouts or arguments — replay fine by design;
``test_workflows.py`` is what catches those.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from knowsphere_ingestion.workflows import (
    MIGRATION_WORKFLOW_NAME,
    WORKFLOW_NAME,
    IngestBatch,
    IngestDocuments,
    MigrateEmbeddings,
    StageResult,
)

HISTORIES = Path(__file__).resolve().parent / "histories"
RECORDED = sorted(HISTORIES.glob("*.json"))


def recorded(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text(encoding="utf-8"))


def workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


@pytest.mark.parametrize("path", RECORDED, ids=[path.stem for path in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    await Replayer(workflows=[IngestDocuments, MigrateEmbeddings]).replay_workflow(recorded(path.stem))


def test_the_recordings_cover_both_workflows_and_both_activity_modes() -> None:
    """Guards the parametrised replay above against passing over a missing or emptied folder."""
    histories = [recorded(path.stem) for path in RECORDED]
    types = {workflow_type(history) for history in histories}
    kinds = {event.event_type for history in histories for event in history.events}
    assert types == {WORKFLOW_NAME, MIGRATION_WORKFLOW_NAME}
    assert {EventType.EVENT_TYPE_MARKER_RECORDED, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED} <= kinds


# Altered copies of IngestDocuments, registered under its name as a changed deploy would be.

AUDIT_PATCH = "audit-batch"


async def call(job: IngestBatch, name: str, batch: IngestBatch) -> StageResult:
    """One activity called as IngestDocuments calls its stages: local or regular as the batch asks."""
    if job.local_activities:
        return await workflow.execute_local_activity(
            name, batch, start_to_close_timeout=timedelta(hours=1), result_type=StageResult
        )
    return await workflow.execute_activity(
        name, batch, start_to_close_timeout=timedelta(hours=1), result_type=StageResult
    )


async def audit(job: IngestBatch) -> None:
    """The change under test: one more activity before the stages."""
    await call(job, "audit_batch", job)


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class IngestChunkingFirst:
    """The four stages with chunking before parsing."""

    @workflow.run
    async def run(self, job: IngestBatch) -> str:
        batch = job
        for name in ("chunk_documents", "parse_documents", "embed_chunks", "index_chunks"):
            batch = replace(batch, documents=(await call(job, name, batch)).remaining)
        return "done"


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class IngestWithAudit(IngestDocuments):
    """IngestDocuments with the audit activity first, unguarded."""

    @workflow.run
    async def run(self, job: IngestBatch) -> str:
        await audit(job)
        return await super().run(job)


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class IngestWithPatchedAudit(IngestDocuments):
    """IngestDocuments with the audit activity first, for runs started after the change only."""

    @workflow.run
    async def run(self, job: IngestBatch) -> str:
        if workflow.patched(AUDIT_PATCH):
            await audit(job)
        return await super().run(job)


@pytest.mark.parametrize("name", ["ingest_batch", "ingest_batch_activities"])
async def test_stages_in_another_order_do_not_replay(name: str) -> None:
    with pytest.raises(NondeterminismError, match=r"'parse_documents' does not match .* 'chunk_documents'"):
        await Replayer(workflows=[IngestChunkingFirst]).replay_workflow(recorded(name))


@pytest.mark.parametrize("name", ["ingest_batch", "ingest_batch_activities", "ingest_permanent_failure"])
async def test_an_unguarded_extra_activity_does_not_replay(name: str) -> None:
    with pytest.raises(NondeterminismError, match=r"'parse_documents' does not match .* 'audit_batch'"):
        await Replayer(workflows=[IngestWithAudit]).replay_workflow(recorded(name))


@pytest.mark.parametrize("name", ["ingest_batch", "ingest_batch_activities", "ingest_permanent_failure"])
async def test_the_same_activity_behind_a_patch_replays(name: str) -> None:
    await Replayer(workflows=[IngestWithPatchedAudit]).replay_workflow(recorded(name))
