"""The graph stage: entities and relations found by the tenant's LLM go to retrieval's knowledge graph.

It runs after the document is searchable. Each document's chunks are sent to the LLM in batches; the
replies are merged into one graph request. A document whose extraction fails for good still becomes
ready, with a warning saying why it has no graph.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import structlog

from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage
from knowsphere_ingestion.domain import graph as gx
from knowsphere_ingestion.domain.records import Document, Failure
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.engine import Stage, current_documents, gather_outcomes
from knowsphere_ingestion.stages.errors import FailureCode, from_service, permanent
from knowsphere_ingestion.stages.identity import job_identity
from knowsphere_ingestion.stages.liveness import beat
from knowsphere_ingestion.stages.retrieval_messages import document_message, entity_message, relation_message
from knowsphere_ingestion.workflows import (
    GraphOutcome,
    IngestBatch,
    IngestInput,
    StageResult,
    failure_details,
)
from knowsphere_runtime.identity import bound_identity

log = structlog.get_logger(__name__)

GRAPH_BATCH_TOKENS = 1500
"""Chunk text sent to the LLM in one extraction request."""
GRAPH_DOCUMENTS_AT_ONCE = 4
"""Documents of a batch whose graph is extracted at once (each one's LLM calls go one after another)."""
EXTRACTION_PURPOSE = "graph_extraction"


async def extract_graph(context: StageContext, batch: IngestBatch) -> StageResult:
    """Extracts and stores the graph of each document still in the graph stage, then makes it ready.

    A document whose extraction fails for good becomes ready with a warning; an error a retry may fix
    is raised once the others are done, so the retry redoes only the rest.
    """
    with bound_identity(job_identity(batch)):
        found = await current_documents(context, batch)
        current = [
            (job, found[job.document_id])
            for job in batch.jobs()
            if job.document_id in found
            and found[job.document_id].ingest_run_id == job.run_id
            and found[job.document_id].status == DocumentStatus.GRAPH
        ]
        limit = asyncio.Semaphore(GRAPH_DOCUMENTS_AT_ONCE)

        async def one(item: tuple[IngestInput, Document]) -> int:
            async with limit:
                return await _graph_one(context, *item)

        outcomes = await gather_outcomes(current, one)
        for (job, _), _stored in outcomes.done:
            await _make_ready(context, job)
        for (job, _), error in outcomes.failed:
            code, reason, _attempts = failure_details(error)
            await _make_ready(context, job, code, reason)
        outcomes.raise_retry()
        items = sum(stored for _, stored in outcomes.done)
        return StageResult(items=items, graph_enabled=True, remaining=batch.documents)


async def finish_graph(context: StageContext, outcome: GraphOutcome) -> None:
    """After the graph stage gave up: the documents still in it become ready with the reason."""
    batch = outcome.batch
    with bound_identity(job_identity(batch)):
        for job in batch.jobs():
            await _make_ready(context, job, outcome.failure_code, outcome.failure_reason)


async def _graph_one(context: StageContext, job: IngestInput, document: Document) -> int:
    """Extracts and stores one document's graph; returns the entities and relations stored."""
    stage = Stage(context, job, IngestionStage.GRAPH, document)
    chunks = await context.artifacts.chunks(job)
    batches = gx.batch_chunks(
        [gx.ChunkText(id=c.id, text=c.text, heading_path=c.heading_path) for c in chunks], GRAPH_BATCH_TOKENS
    )
    results: list[gx.GraphExtraction] = []
    unreadable: list[str] = []
    done = 0
    progress = document.progress
    for number, batch in enumerate(batches):
        messages = gx.build_extraction_messages(batch, document.language or "en")
        try:
            raw = await context.modelhub.complete(messages, purpose=EXTRACTION_PURPOSE, temperature=0.0)
        except ServiceError as error:
            raise from_service(error, "extracting entities with the LLM", FailureCode.GRAPH_FAILED) from error
        try:
            results.append(gx.parse_extraction(raw, batch))
        except gx.ExtractionOutputError as error:
            log.warning("graph extraction output unreadable", batch=number, reason=str(error))
            unreadable.append(str(error))
        done += len(batch)
        beat(number)
        progress = replace(progress, chunks_graphed=done)
        await stage.progress(done, len(chunks), progress)
    if batches and len(unreadable) == len(batches):
        # Not one reply could be read: an empty graph would hide that the stage did nothing.
        raise permanent(
            FailureCode.GRAPH_FAILED,
            f"none of the LLM's {len(batches)} replies held entities and relations: {unreadable[-1]}",
        )
    merged = gx.merge_extractions(results)
    entities = [entity_message(e) for e in merged.entities]
    relations = [relation_message(r) for r in merged.relations]
    try:
        await context.retrieval.index_graph(job.knowledge_base_id, job.document_id, entities, relations)
    except ServiceError as error:
        raise from_service(error, "storing the graph", FailureCode.GRAPH_FAILED) from error
    await context.store.finish_stages(
        job.tenant_id,
        IngestionStage.GRAPH,
        [
            (
                job.document_id,
                job.run_id,
                stage.elapsed(),
                {"progress": replace(progress, chunks_graphed=len(chunks))},
            )
        ],
    )
    return len(entities) + len(relations)


async def _make_ready(
    context: StageContext, job: IngestInput, failure_code: str = "", failure_reason: str = ""
) -> None:
    """Makes a document in the graph stage ready, with a warning when its extraction failed."""
    document = await context.store.get_document(job.tenant_id, job.document_id)
    if document is None or document.ingest_run_id != job.run_id or document.status != DocumentStatus.GRAPH:
        return
    warnings = list(document.warnings)
    if failure_code:
        warnings.append(
            Failure(
                stage=IngestionStage.GRAPH,
                code=failure_code,
                reason=f"entity extraction failed; the document is searchable without it: {failure_reason}",
                time=datetime.now(UTC),
            )
        )
    updated = await context.store.update_document(
        job.tenant_id,
        job.document_id,
        run_id=job.run_id,
        status=DocumentStatus.READY,
        warnings=warnings,
        progress=replace(document.progress, percent=100.0, eta_seconds=None),
    )
    if updated is None:
        return
    try:
        await context.infos.write([document_message(updated, DocumentStatus.READY)])
    except ServiceError as error:
        raise from_service(
            error, "recording the document in retrieval", FailureCode.INDEXING_FAILED
        ) from error
    await context.events.finished(job, updated.chunk_count)
