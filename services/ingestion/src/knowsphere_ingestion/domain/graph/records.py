"""The records of graph extraction, the limits that bound them, and the labels chunks are cited by.

Chunks are shown to the model under local labels ``C1``, ``C2`` … (in batch order) so the model cites
short labels, not 32-character ids; the parser maps labels back to chunk ids. Unknown labels are
dropped; an item citing no valid label is attributed to every chunk of its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_MAX_ENTITIES_PER_BATCH: Final = 50
DEFAULT_MAX_RELATIONS_PER_BATCH: Final = 80
MAX_DESCRIPTION_CHARS: Final = 1000
MAX_ALIASES_PER_ENTITY: Final = 10
MAX_RELATION_TYPE_CHARS: Final = 64
CHUNK_LABEL_PREFIX: Final = "C"

DEFAULT_ENTITY_TYPES: Final[tuple[str, ...]] = (
    "person",
    "organization",
    "location",
    "product",
    "technology",
    "concept",
    "event",
    "date",
)
FALLBACK_ENTITY_TYPE: Final = "concept"
DEFAULT_RELATION_TYPE: Final = "related_to"


@dataclass(frozen=True)
class ChunkText:
    id: str
    text: str
    heading_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedEntity:
    name: str
    type: str
    description: str = ""
    aliases: tuple[str, ...] = ()
    source_chunk_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedRelation:
    source_name: str
    target_name: str
    type: str
    description: str = ""
    weight: float = 0.0  # in [0, 1]; 0 means not given
    source_chunk_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphExtraction:
    entities: tuple[ExtractedEntity, ...] = ()
    relations: tuple[ExtractedRelation, ...] = ()


def chunk_label(index: int) -> str:
    """The label of the ``index``-th (0-based) chunk of a batch: ``C1``, ``C2`` …"""
    return f"{CHUNK_LABEL_PREFIX}{index + 1}"
