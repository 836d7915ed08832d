"""A document failing for good: what its run indexed and stored is removed, and it shows why it failed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import structlog

from knowsphere_contracts.vocabulary import STAGE_STATUS, DocumentStatus, IngestionStage, pipeline_position
from knowsphere_ingestion.domain.records import Failure
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.identity import job_identity
from knowsphere_ingestion.workflows import DocumentRun, FailInput, IngestInput, StageResult
from knowsphere_runtime.identity import bound_identity

log = structlog.get_logger(__name__)


async def fail_documents(context: StageContext, failed: FailInput) -> StageResult:
    """A stage gave up for the whole batch: the documents still in it that had not finished the stage
    are marked failed; those that had (in an attempt before the one that gave up) are passed on, so the
    workflow takes them through the next stages."""
    batch = failed.batch
    try:
        stage: IngestionStage | None = IngestionStage(failed.stage)
    except ValueError:  # a stage this build does not know: the failure is recorded without one
        stage = None
    passed: list[DocumentRun] = []
    graph_enabled = False
    with bound_identity(job_identity(batch)):
        kb = await context.store.get_kb(batch.tenant_id, batch.knowledge_base_id)
        graph_enabled = bool(kb and kb.graph_enabled)
        for job in batch.jobs():
            document = await context.store.get_document(job.tenant_id, job.document_id)
            if (
                stage is not None
                and document is not None
                and document.ingest_run_id == job.run_id
                and document.status != DocumentStatus.FAILED
                and pipeline_position(document.status) > pipeline_position(STAGE_STATUS[stage])
            ):
                passed.append(DocumentRun(job.document_id, job.run_id))
                continue
            await fail_one(context, job, stage, failed.code, failed.reason, failed.attempts)
    return StageResult(items=0, graph_enabled=graph_enabled, remaining=passed)


async def fail_one(
    context: StageContext,
    job: IngestInput,
    stage: IngestionStage | None,
    code: str,
    reason: str,
    attempts: int,
) -> None:
    """Removes what this run indexed and its artifacts; marks the document failed with the reason."""
    document = await context.store.get_document(job.tenant_id, job.document_id)
    if document is None or document.ingest_run_id != job.run_id or document.status == DocumentStatus.FAILED:
        return  # deleted or superseded (whoever did that owns the clean-up), or failed already
    if stage in (IngestionStage.INDEX, IngestionStage.GRAPH) or document.chunk_count > 0:
        await context.retrieval.delete_document(job.knowledge_base_id, job.document_id)
    await context.artifacts.delete(job)
    failure = Failure(
        stage=stage, code=code, reason=reason, attempts=max(1, attempts), time=datetime.now(UTC)
    )
    await context.store.update_document(
        job.tenant_id,
        job.document_id,
        run_id=job.run_id,
        status=DocumentStatus.FAILED,
        failure=failure,
        chunk_count=0,
        progress=replace(document.progress, eta_seconds=None),
    )
    log.info("document failed", document_id=job.document_id, stage=stage, code=code)
    await context.events.finished(job, 0, failure)
