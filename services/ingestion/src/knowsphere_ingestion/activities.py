"""The activities of IngestDocuments and MigrateEmbeddings, as Temporal registers them.

Each activity is one stage over a batch of documents, idempotent and resumable; the work is in
:mod:`knowsphere_ingestion.stages` (the stage engine and one module per stage). This class only binds
the worker's dependencies to the activity names the workflows call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from knowsphere_clients import ModelHubClient, RetrievalClient
from knowsphere_ingestion.adapters.batching import EmbedBatcher, WriteBatcher
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.parsing.budget import BudgetedParser
from knowsphere_ingestion.stages import chunk, embed, failure, graph, index, migrate, parse
from knowsphere_ingestion.stages.context import StageContext
from knowsphere_ingestion.stages.events import DocumentEvents, Publish
from knowsphere_ingestion.stages.identity import renew_token
from knowsphere_ingestion.stages.run_artifacts import RunArtifacts
from knowsphere_ingestion.storage.blobs import BlobStore
from knowsphere_ingestion.workflows import (
    RENEW_IDENTITY,
    FailInput,
    GraphOutcome,
    IngestBatch,
    MigrateInput,
    MigrationFailure,
    StageResult,
)

__all__ = ["IngestionActivities"]


class IngestionActivities:
    def __init__(
        self,
        *,
        store: IngestionStore,
        blobs: BlobStore,
        modelhub: ModelHubClient,
        retrieval: RetrievalClient,
        batcher: EmbedBatcher,
        publish: Publish,
        parser: BudgetedParser,
        index_batch_size: int = 128,
        vectors_per_artifact: int = 64,
        chunk_sizes_fit_model: bool = False,
    ) -> None:
        self.context = StageContext(
            store=store,
            blobs=blobs,
            modelhub=modelhub,
            retrieval=retrieval,
            embedder=batcher,
            indexer=WriteBatcher(retrieval.index_chunks, batch_size=index_batch_size),
            infos=WriteBatcher(retrieval.put_document_infos, batch_size=index_batch_size),
            artifacts=RunArtifacts(blobs, vectors_per_artifact=vectors_per_artifact),
            events=DocumentEvents(publish),
            parser=parser,
            index_batch_size=index_batch_size,
            chunk_sizes_fit_model=chunk_sizes_fit_model,
        )

    def all(self) -> list[Callable[..., Any]]:
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

    @activity.defn(name="parse_documents")
    async def parse_documents(self, batch: IngestBatch) -> StageResult:
        return await parse.parse_documents(self.context, batch)

    @activity.defn(name="chunk_documents")
    async def chunk_documents(self, batch: IngestBatch) -> StageResult:
        return await chunk.chunk_documents(self.context, batch)

    @activity.defn(name="embed_chunks")
    async def embed_chunks(self, batch: IngestBatch) -> StageResult:
        return await embed.embed_chunks(self.context, batch)

    @activity.defn(name="index_chunks")
    async def index_chunks(self, batch: IngestBatch) -> StageResult:
        return await index.index_chunks(self.context, batch)

    @activity.defn(name="extract_graph")
    async def extract_graph(self, batch: IngestBatch) -> StageResult:
        return await graph.extract_graph(self.context, batch)

    @activity.defn(name="finish_graph")
    async def finish_graph(self, outcome: GraphOutcome) -> None:
        await graph.finish_graph(self.context, outcome)

    @activity.defn(name="fail_documents")
    async def fail_documents(self, failed: FailInput) -> StageResult:
        return await failure.fail_documents(self.context, failed)

    @activity.defn(name="migrate_embeddings")
    async def migrate_embeddings(self, job: MigrateInput) -> None:
        await migrate.migrate_embeddings(self.context, job)

    @activity.defn(name="fail_migration")
    async def fail_migration(self, failed: MigrationFailure) -> None:
        await migrate.fail_migration(self.context, failed)

    @activity.defn(name=RENEW_IDENTITY)
    async def renew_identity(self, token: str) -> str:
        return renew_token(token)
