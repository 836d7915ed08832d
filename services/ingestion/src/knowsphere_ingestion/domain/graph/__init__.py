"""Entity and relation extraction for the knowledge graph: prompt building, output parsing, merging.

Pure logic, no I/O: the ingestion workflow's graph stage sends each batch's messages to a chat model
and feeds the reply back here; the merged result becomes retrieval's ``IndexGraph`` request
(``EntityInput`` / ``RelationInput``).

A caller groups a document's chunks with :func:`batch_chunks`, sends each batch's
:func:`build_extraction_messages` to a chat model, reads each reply with :func:`parse_extraction` and
merges the batches with :func:`merge_extractions`. Rules a caller can rely on (the module named gives
the details):

* A batch is a run of consecutive non-blank chunks within a token budget; a chunk is never split
  (``batching``).
* The model cites chunks by local labels ``C1``, ``C2`` …, mapped back to chunk ids; an item citing no
  valid label is attributed to every chunk of its batch (``records``).
* The instructions are Chinese for a ``zh*`` answer language, else English; names stay as written,
  entity types are the English labels of ``DEFAULT_ENTITY_TYPES`` (``prompt``).
* Parsing is tolerant of real model output and raises ``ExtractionOutputError`` only when the reply
  holds no JSON object or array at all (``reply``, ``json_salvage``). Per batch at most
  ``max_entities`` entities and ``max_relations`` relations are kept (``reply``).
* Merged output uses retrieval's merge keys and is sorted by key, so the same replies always give
  byte-identical requests (``merge``).
"""

from knowsphere_ingestion.domain.graph.batching import DEFAULT_BATCH_MAX_TOKENS, batch_chunks
from knowsphere_ingestion.domain.graph.merge import merge_extractions
from knowsphere_ingestion.domain.graph.prompt import build_extraction_messages, is_chinese
from knowsphere_ingestion.domain.graph.records import (
    CHUNK_LABEL_PREFIX,
    DEFAULT_ENTITY_TYPES,
    DEFAULT_MAX_ENTITIES_PER_BATCH,
    DEFAULT_MAX_RELATIONS_PER_BATCH,
    DEFAULT_RELATION_TYPE,
    FALLBACK_ENTITY_TYPE,
    MAX_ALIASES_PER_ENTITY,
    MAX_DESCRIPTION_CHARS,
    MAX_RELATION_TYPE_CHARS,
    ChunkText,
    ExtractedEntity,
    ExtractedRelation,
    GraphExtraction,
    chunk_label,
)
from knowsphere_ingestion.domain.graph.reply import ExtractionOutputError, parse_extraction

__all__ = [
    "CHUNK_LABEL_PREFIX",
    "DEFAULT_BATCH_MAX_TOKENS",
    "DEFAULT_ENTITY_TYPES",
    "DEFAULT_MAX_ENTITIES_PER_BATCH",
    "DEFAULT_MAX_RELATIONS_PER_BATCH",
    "DEFAULT_RELATION_TYPE",
    "FALLBACK_ENTITY_TYPE",
    "MAX_ALIASES_PER_ENTITY",
    "MAX_DESCRIPTION_CHARS",
    "MAX_RELATION_TYPE_CHARS",
    "ChunkText",
    "ExtractedEntity",
    "ExtractedRelation",
    "ExtractionOutputError",
    "GraphExtraction",
    "batch_chunks",
    "build_extraction_messages",
    "chunk_label",
    "is_chinese",
    "merge_extractions",
    "parse_extraction",
]
