"""The words every service shares, defined once: document statuses, ingestion stages, graph names.

The enums are generated from the protos (``make proto``), so a value added to a proto enum reaches
every service and the gateway's JSON without another edit. What the protos cannot say — which statuses
are final, which status a stage works under, the order of the pipeline, how an entity name becomes a
merge key — is said here, once.

Retrieval keeps a mirror of ``DocumentStatus`` in its own contract (``retrieval.v1.DocumentStatus``,
same names and numbers; a test holds them equal); ingestion sends the number, so a status unknown to an
older retrieval still travels intact (proto3 enums are open).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from knowsphere.ingestion.v1.ingestion_enums import (
    ChunkingStrategy,
    DocumentStatus,
    IngestionStage,
    MigrationState,
)

ARTIFACT_DOWNLOAD_PREFIX: Final = "/api/v1/artifacts"
"""Where the public API serves a file a tool produced (``{prefix}/{artifact_id}``): the gateway's route,
and the link a tool's answer gives the model to pass on."""

__all__ = [
    "ARTIFACT_DOWNLOAD_PREFIX",
    "IN_PROGRESS_STATUSES",
    "MAX_EMBEDDING_DIMENSION",
    "MAX_ENTITY_NAME_CHARS",
    "STAGE_STATUS",
    "TERMINAL_STATUSES",
    "ChunkingStrategy",
    "DocumentStatus",
    "IngestionStage",
    "MigrationState",
    "entity_key",
    "normalise_entity_name",
    "pipeline_position",
]

# --- document statuses ---------------------------------------------------------------------------

TERMINAL_STATUSES: Final = frozenset({DocumentStatus.READY, DocumentStatus.FAILED})
"""A document in one of these is not being worked on."""

IN_PROGRESS_STATUSES: Final = tuple(s for s in DocumentStatus if s not in TERMINAL_STATUSES)
"""Every status a document passes through while a workflow works on it, in pipeline order."""

STAGE_STATUS: Final[Mapping[IngestionStage, DocumentStatus]] = MappingProxyType(
    {
        IngestionStage.PARSE: DocumentStatus.PARSING,
        IngestionStage.CHUNK: DocumentStatus.CHUNKING,
        IngestionStage.EMBED: DocumentStatus.EMBEDDING,
        IngestionStage.INDEX: DocumentStatus.INDEXING,
        IngestionStage.GRAPH: DocumentStatus.GRAPH,
    }
)
"""The status a document shows while a stage works on it."""

_PIPELINE: Final[dict[DocumentStatus, int]] = {
    status: n for n, status in enumerate(s for s in DocumentStatus if s != DocumentStatus.FAILED)
}


def pipeline_position(status: DocumentStatus | str) -> int:
    """Where a status lies on the way from queued to ready (failed is off the way: -1)."""
    return _PIPELINE.get(DocumentStatus(status), -1)


# --- embeddings ----------------------------------------------------------------------------------

MAX_EMBEDDING_DIMENSION: Final = 8192
"""Largest vector dimension a model record, a knowledge base or an index accepts."""


# --- knowledge-graph names -------------------------------------------------------------------------

MAX_ENTITY_NAME_CHARS: Final = 512
"""Longest merge key of an entity name; retrieval refuses a longer one, ingestion drops it."""

_WHITESPACE: Final = re.compile(r"\s+")


def normalise_entity_name(name: str) -> str:
    """The merge key of an entity name: NFKC, case-folded, runs of whitespace as one space, trimmed."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", name).casefold()).strip()


def entity_key(field: str, name: str) -> str:
    """The merge key of ``name``; ValueError naming ``field`` when it is empty or over the limit."""
    key = normalise_entity_name(name)
    if not key:
        raise ValueError(f"{field} must contain more than white space")
    if len(key) > MAX_ENTITY_NAME_CHARS:
        raise ValueError(f"{field} is {len(key)} characters long; the limit is {MAX_ENTITY_NAME_CHARS}")
    return key
