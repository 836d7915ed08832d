"""What every stage works with: the stores, the peers, the batchers, the run artifacts and the events.

One :class:`StageContext` is built by the worker and handed to every stage; stages hold no state of
their own between calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import ModelHubClient, RetrievalClient
from knowsphere_ingestion.adapters.batching import EmbedBatcher, WriteBatcher
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.parsing.budget import BudgetedParser
from knowsphere_ingestion.stages.events import DocumentEvents
from knowsphere_ingestion.stages.run_artifacts import RunArtifacts
from knowsphere_ingestion.storage.blobs import BlobStore


@dataclass(frozen=True)
class StageContext:
    store: IngestionStore
    blobs: BlobStore
    modelhub: ModelHubClient
    retrieval: RetrievalClient
    embedder: EmbedBatcher
    """Embeds the texts of many documents together."""
    indexer: WriteBatcher[rpb.Chunk]
    """Writes the chunks of documents indexed at the same time together."""
    infos: WriteBatcher[rpb.DocumentMetadata]
    """Writes the metadata of documents finishing their index stage together."""
    artifacts: RunArtifacts
    events: DocumentEvents
    parser: BudgetedParser
    """Parses each file in a child process of its own, within the parse budget."""
    index_batch_size: int
    """Chunks per IndexChunks call."""
    chunk_sizes_fit_model: bool = False
    """Whether default chunk sizes fit the knowledge base's embedding model's input window."""
