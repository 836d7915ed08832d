"""The chunk stage: the parsed document is cut into chunks as its knowledge base's settings say (default
sizes fitted to the input window of its embedding model when ``KS_INGESTION_CHUNK_SIZES_FIT_MODEL``)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from knowsphere_contracts.vocabulary import IngestionStage
from knowsphere_ingestion.domain.chunking import chunk_document
from knowsphere_ingestion.domain.records import STAGE_SPAN, KnowledgeBase
from knowsphere_ingestion.parsing.errors import ParseErrorCode
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.engine import Done, Stage, run_stage
from knowsphere_ingestion.stages.errors import permanent
from knowsphere_ingestion.stages.liveness import heartbeating
from knowsphere_ingestion.workflows import IngestBatch, StageResult

CHUNK_ON_LOOP_CHARS = 200_000
"""Documents with more text than this are chunked on a thread, not on the event loop."""


async def chunk_documents(context: StageContext, batch: IngestBatch) -> StageResult:
    async def one(stage: Stage, kb: KnowledgeBase) -> Done:
        return await _chunk_one(context, stage, kb)

    return await run_stage(context, batch, IngestionStage.CHUNK, one)


async def _chunk_one(context: StageContext, stage: Stage, kb: KnowledgeBase) -> Done:
    job = stage.job
    parsed = await context.artifacts.parsed(job)
    # When so configured, sizes the knowledge base leaves at their defaults fit what its embedding
    # model reads.
    window = 0
    if context.chunk_sizes_fit_model:
        window = await context.modelhub.model_window(kb.embedding_model_id)
    config = kb.chunking.to_config(window)
    if sum(len(b.text) for b in parsed.blocks) <= CHUNK_ON_LOOP_CHARS:
        # Milliseconds of work: on the loop, where a thread hop would cost more than the work.
        chunks = chunk_document(job.document_id, parsed, config)
    else:
        loop = asyncio.get_running_loop()
        chunks = await heartbeating(
            loop.run_in_executor(None, chunk_document, job.document_id, parsed, config)
        )
    if not chunks:
        raise permanent(
            ParseErrorCode.EMPTY_DOCUMENT, f"{stage.document.file_name} contains no text to index"
        )
    await context.artifacts.put_chunks(job, chunks)
    progress = replace(
        stage.document.progress, chunks_total=len(chunks), percent=STAGE_SPAN[IngestionStage.CHUNK][1]
    )
    return Done(items=len(chunks), next_stage=IngestionStage.EMBED, values={"progress": progress})
