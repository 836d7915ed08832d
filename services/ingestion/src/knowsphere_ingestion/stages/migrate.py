"""An embedding-model migration: every searchable document is embedded with the new model, then
retrieval switches to it.

Queries keep using the old model until the switch; documents ingested meanwhile are embedded with both
(see :func:`~knowsphere_ingestion.stages.embed.embedding_models`). The new vectors are stored per part
like the embed stage's, so a retried migration resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import structlog

from knowsphere_clients.errors import FailedPrecondition, ServiceError
from knowsphere_contracts.vocabulary import DocumentStatus, MigrationState
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.embed import document_vectors
from knowsphere_ingestion.stages.errors import FailureCode, from_service, retryable
from knowsphere_ingestion.stages.identity import job_identity
from knowsphere_ingestion.stages.liveness import beat
from knowsphere_ingestion.stages.retrieval_messages import chunk_message, configure_knowledge_base
from knowsphere_ingestion.workflows import IngestInput, MigrateInput, MigrationFailure
from knowsphere_runtime.identity import bound_identity

log = structlog.get_logger(__name__)

SEARCHABLE = (DocumentStatus.READY, DocumentStatus.GRAPH)


async def migrate_embeddings(context: StageContext, job: MigrateInput) -> None:
    """Embeds every searchable document with the target model, then switches retrieval to it."""
    with bound_identity(job_identity(job)):
        kb = await context.store.get_kb(job.tenant_id, job.knowledge_base_id)
        migration = kb.migration if kb is not None else None
        if (
            kb is None
            or migration is None
            or migration.state != MigrationState.RUNNING
            or migration.to_model_id != job.to_model_id
        ):
            return  # deleted, superseded or already finished
        documents = sorted(
            await context.store.kb_documents(job.tenant_id, kb.id, list(SEARCHABLE)), key=lambda d: d.id
        )
        size = context.index_batch_size
        for number, document in enumerate(documents):
            ingest = IngestInput(job.tenant_id, job.user_id, document.id, kb.id, document.ingest_run_id)
            chunks = await context.artifacts.chunks(ingest)
            vectors = await document_vectors(context, ingest, job.to_model_id, migration.to_dimension, chunks)
            messages = [
                chunk_message(document, ingest.run_id, chunk, [(job.to_model_id, vectors[i])])
                for i, chunk in enumerate(chunks)
            ]
            try:
                for start in range(0, len(messages), size):
                    await context.retrieval.index_chunks(messages[start : start + size])
            except ServiceError as error:
                raise from_service(
                    error, "indexing the new model's vectors", FailureCode.INDEXING_FAILED
                ) from error
            beat(number)
            await context.store.update_kb(
                job.tenant_id,
                kb.id,
                migration=replace(migration, documents_done=number + 1, documents_total=len(documents)),
            )
        switched = replace(kb, embedding_model_id=job.to_model_id, embedding_dimension=migration.to_dimension)
        try:
            await configure_knowledge_base(context.retrieval, switched)
        except FailedPrecondition as error:
            # Documents became searchable meanwhile with only the old model: another pass.
            raise retryable(FailureCode.MIGRATION_INCOMPLETE, error.message) from error
        except ServiceError as error:
            raise from_service(
                error, "switching retrieval to the new model", FailureCode.MIGRATION_FAILED
            ) from error
        await context.store.update_kb(
            job.tenant_id,
            kb.id,
            embedding_model_id=job.to_model_id,
            embedding_dimension=migration.to_dimension,
            migration=replace(
                migration,
                state=MigrationState.COMPLETED,
                documents_done=len(documents),
                documents_total=len(documents),
                end_time=datetime.now(UTC),
            ),
        )
        try:
            await context.retrieval.delete_embeddings(kb.id, migration.from_model_id)
        except ServiceError:
            log.warning("old vectors not deleted", knowledge_base_id=kb.id, model=migration.from_model_id)
        log.info("embedding migration completed", knowledge_base_id=kb.id, model=job.to_model_id)


async def fail_migration(context: StageContext, failed: MigrationFailure) -> None:
    """The migration gave up: it is marked failed with the reason and the new model's vectors go."""
    job = failed.job
    with bound_identity(job_identity(job)):
        kb = await context.store.get_kb(job.tenant_id, job.knowledge_base_id)
        if kb is None or kb.migration is None or kb.migration.to_model_id != job.to_model_id:
            return
        await context.store.update_kb(
            job.tenant_id,
            kb.id,
            migration=replace(
                kb.migration,
                state=MigrationState.FAILED,
                failure_reason=failed.reason,
                end_time=datetime.now(UTC),
            ),
        )
        try:
            await context.retrieval.delete_embeddings(kb.id, job.to_model_id)
        except ServiceError:
            log.warning("new vectors not deleted", knowledge_base_id=kb.id, model=job.to_model_id)
