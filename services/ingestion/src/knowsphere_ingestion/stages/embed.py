"""The embed stage: every chunk gets a vector from each model its knowledge base embeds with.

Vectors are stored per part of a document's chunks and per model as they come back, so a stage that
resumes after a crash embeds only the parts still missing. While an embedding-model migration runs,
documents are embedded with both the active model and the migration's target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from opentelemetry import trace

from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.vocabulary import IngestionStage, MigrationState
from knowsphere_ingestion.domain.chunking import ChunkDraft, embedding_text
from knowsphere_ingestion.domain.records import STAGE_SPAN, KnowledgeBase
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.engine import Done, Stage, run_stage
from knowsphere_ingestion.stages.errors import FailureCode, from_service, permanent
from knowsphere_ingestion.stages.liveness import beat
from knowsphere_ingestion.workflows import IngestBatch, IngestInput, StageResult
from knowsphere_telemetry import attributes as attr

tracer = trace.get_tracer("knowsphere.ingestion")


def embedding_models(kb: KnowledgeBase) -> list[tuple[str, int]]:
    """The (model id, dimension) a document is embedded with: the active model, and a running
    migration's target beside it."""
    models = [(kb.embedding_model_id, kb.embedding_dimension)]
    migration = kb.migration
    if (
        migration is not None
        and migration.state == MigrationState.RUNNING
        and migration.to_model_id != kb.embedding_model_id
    ):
        models.append((migration.to_model_id, migration.to_dimension))
    return models


async def _embed(
    context: StageContext, model_id: str, dimension: int, part: Sequence[ChunkDraft]
) -> list[list[float]]:
    try:
        vectors = await context.embedder.embed(model_id, [embedding_text(c) for c in part])
    except ServiceError as error:
        raise from_service(error, f"embedding with {model_id}", FailureCode.EMBEDDING_FAILED) from error
    if len(vectors) != len(part) or any(len(v) != dimension for v in vectors):
        raise permanent(
            FailureCode.EMBEDDING_FAILED,
            f"{model_id} returned vectors of the wrong count or dimension "
            f"(expected {len(part)} × {dimension})",
        )
    return vectors


async def _embed_part(
    context: StageContext,
    job: IngestInput,
    model_id: str,
    dimension: int,
    number: int,
    part: Sequence[ChunkDraft],
) -> bool:
    """Embeds one part of a document's chunks with one model unless stored already; True if it did."""
    if await context.artifacts.has_vectors(job, model_id, number):
        return False
    vectors = await _embed(context, model_id, dimension, part)
    await context.artifacts.put_vectors(job, model_id, number, vectors)
    return True


async def document_vectors(
    context: StageContext, job: IngestInput, model_id: str, dimension: int, chunks: Sequence[ChunkDraft]
) -> list[list[float]]:
    """The vectors of a document's chunks with one model, in chunk order: those stored, the parts still
    missing embedded now (a migration may have started after the embed stage) and stored."""
    vectors: list[list[float]] = []
    for number, part in enumerate(context.artifacts.parts(chunks)):
        stored = await context.artifacts.find_vectors(job, model_id, number)
        if stored is None:
            stored = await _embed(context, model_id, dimension, part)
            await context.artifacts.put_vectors(job, model_id, number, stored)
        vectors.extend(stored)
        beat(number)
    return vectors


async def embed_chunks(context: StageContext, batch: IngestBatch) -> StageResult:
    async def one(stage: Stage, kb: KnowledgeBase) -> Done:
        return await _embed_one(context, stage, kb)

    return await run_stage(context, batch, IngestionStage.EMBED, one)


async def _embed_one(context: StageContext, stage: Stage, kb: KnowledgeBase) -> Done:
    job = stage.job
    chunks = await context.artifacts.chunks(job)
    parts = context.artifacts.parts(chunks)
    done = 0
    embedded_now = 0
    progress = replace(stage.document.progress, chunks_total=len(chunks))
    with tracer.start_as_current_span("ingestion.embed_batches") as span:
        span.set_attribute(attr.DOCUMENT_ID, job.document_id)
        span.set_attribute(attr.EMBEDDING_MODEL_ID, kb.embedding_model_id)
        span.set_attribute(attr.CHUNKS, len(chunks))
        for number, part in enumerate(parts):
            fresh = False
            for model_id, dimension in embedding_models(kb):
                fresh = await _embed_part(context, job, model_id, dimension, number, part) or fresh
            if fresh:
                embedded_now += len(part)
            done += len(part)
            beat(number)
            progress = replace(progress, chunks_embedded=done)
            if len(parts) > 1:  # a one-part document goes straight on to its finish
                eta = (len(chunks) - done) * stage.elapsed() / embedded_now if embedded_now else None
                await stage.progress(done, len(chunks), progress, force=number == len(parts) - 1, eta=eta)
        span.set_attribute(attr.CHUNKS_RESUMED, len(chunks) - embedded_now)
    progress = replace(progress, percent=STAGE_SPAN[IngestionStage.EMBED][1], eta_seconds=None)
    return Done(items=len(chunks), next_stage=IngestionStage.INDEX, values={"progress": progress})
