"""What ingestion sends to retrieval, each shape built in one place from ingestion's records: chunks,
document metadata, graph entries, and a knowledge base's configuration (which the API sends too).

Fields are copied by name (:func:`knowsphere_contracts.convert.message_from`), so a field added to a
record and to retrieval's message crosses with no edit here; only what the record does not hold under
the message's name is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import RetrievalClient
from knowsphere_contracts.convert import message_from
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_ingestion.domain.chunking import ChunkDraft
from knowsphere_ingestion.domain.graph import ExtractedEntity, ExtractedRelation
from knowsphere_ingestion.domain.records import Document, KnowledgeBase

DOCUMENT_METADATA_PREFIX = "doc."
"""Chunks carry their document's metadata under this prefix, beside their own."""


async def configure_knowledge_base(retrieval: RetrievalClient, kb: KnowledgeBase) -> None:
    """Tells retrieval what it needs of a knowledge base: the embedding model its queries use (and its
    dimension), the language hint, whether it keeps a graph."""
    await retrieval.configure_knowledge_base(
        kb.id,
        embedding_model_id=kb.embedding_model_id,
        embedding_dimension=kb.embedding_dimension,
        language_hint=kb.language_hint,
        graph_enabled=kb.graph_enabled,
    )


def chunk_message(
    document: Document, run_id: str, chunk: ChunkDraft, vectors: Sequence[tuple[str, Sequence[float]]]
) -> rpb.Chunk:
    """A chunk of ``document`` made by ingest run ``run_id``, with its vector of each (model id, vector)."""
    return message_from(
        rpb.Chunk,
        chunk,
        document_id=document.id,
        knowledge_base_id=document.knowledge_base_id,
        file_name=document.file_name,
        # Built here: message_from would copy each float of a vector one by one.
        embeddings=[
            rpb.ChunkEmbedding(model_id=model_id, dimension=len(vector), values=vector)
            for model_id, vector in vectors
        ],
        metadata={
            **chunk.metadata,
            **{DOCUMENT_METADATA_PREFIX + key: value for key, value in document.metadata.items()},
        },
        ingest_run_id=run_id,
    )


def document_message(document: Document, status: DocumentStatus) -> rpb.DocumentMetadata:
    """A document's metadata as retrieval keeps it; the status goes as its number (retrieval's
    ``DocumentStatus`` mirrors ingestion's)."""
    return message_from(rpb.DocumentMetadata, document, document_id=document.id, status=status)


def entity_message(entity: ExtractedEntity) -> rpb.EntityInput:
    return message_from(rpb.EntityInput, entity)


def relation_message(relation: ExtractedRelation) -> rpb.RelationInput:
    return message_from(rpb.RelationInput, relation)
