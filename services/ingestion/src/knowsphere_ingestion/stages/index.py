"""The index stage: a document's chunks and their vectors go to retrieval, and it becomes searchable.

Chunks of documents indexed at the same time share IndexChunks calls; between calls the stage checks
that the document is still this run's. A re-ingested document's chunks of the earlier run are pruned
once the new ones are in. Without a knowledge graph the document is ready here; with one it moves on
to the graph stage, searchable already.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage
from knowsphere_ingestion.domain.records import STAGE_SPAN, KnowledgeBase
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.embed import document_vectors, embedding_models
from knowsphere_ingestion.stages.engine import Done, Stage, run_stage, still_current
from knowsphere_ingestion.stages.errors import FailureCode, from_service
from knowsphere_ingestion.stages.liveness import beat
from knowsphere_ingestion.stages.retrieval_messages import chunk_message, document_message
from knowsphere_ingestion.workflows import IngestBatch, StageResult


async def index_chunks(context: StageContext, batch: IngestBatch) -> StageResult:
    async def one(stage: Stage, kb: KnowledgeBase) -> Done:
        return await _index_one(context, stage, kb)

    return await run_stage(context, batch, IngestionStage.INDEX, one)


async def _index_one(context: StageContext, stage: Stage, kb: KnowledgeBase) -> Done:
    job, document = stage.job, stage.document
    chunks = await context.artifacts.chunks(job)
    embeddings = [
        (model_id, await document_vectors(context, job, model_id, dimension, chunks))
        for model_id, dimension in embedding_models(kb)
    ]
    messages = [
        chunk_message(
            document, job.run_id, chunk, [(model_id, vectors[i]) for model_id, vectors in embeddings]
        )
        for i, chunk in enumerate(chunks)
    ]
    progress = replace(document.progress, chunks_total=len(chunks), chunks_embedded=len(chunks))
    status = DocumentStatus.GRAPH if kb.graph_enabled else DocumentStatus.READY
    size = context.index_batch_size
    try:
        for start in range(0, len(messages), size):
            if start:  # the first batch was checked as the stage began
                await still_current(context, job)
            await context.indexer.write(messages[start : start + size])
            done = min(len(messages), start + size)
            beat(done)
            progress = replace(progress, chunks_indexed=done)
            if done < len(messages):
                await stage.progress(done, len(messages), progress)
        if document.ready_time is not None:  # indexed by an earlier run: drop its chunks
            await context.retrieval.prune_document_chunks(job.knowledge_base_id, job.document_id, job.run_id)
        await context.infos.write([document_message(document, status)])
    except ServiceError as error:
        raise from_service(error, "indexing into retrieval", FailureCode.INDEXING_FAILED) from error

    async def after(recorded: bool) -> None:
        if not recorded:
            # Deleted while the last batch was being written: take back what this run indexed.
            await context.retrieval.delete_document(job.knowledge_base_id, job.document_id)
        elif status == DocumentStatus.READY:
            await context.events.finished(job, len(chunks))
        else:
            await context.events.progress(job, status, STAGE_SPAN[IngestionStage.GRAPH][0], 0, len(chunks))

    percent = 100.0 if status == DocumentStatus.READY else STAGE_SPAN[IngestionStage.GRAPH][0]
    return Done(
        items=len(chunks),
        values={
            "status": status,
            "chunk_count": len(chunks),
            "ready_time": datetime.now(UTC),
            "failure": None,
            "progress": replace(progress, percent=percent),
        },
        after=after,
    )
