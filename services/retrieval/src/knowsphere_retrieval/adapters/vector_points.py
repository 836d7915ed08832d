"""How chunks become Qdrant points, shared by both vector backends (in-process engine and server).

Both backends store the same points, so a collection can move from one to the other:

- the point id is a UUIDv5 of the tenant and the chunk id, so re-sending a chunk replaces its point
  (idempotent upsert) and two tenants that happen to use the same chunk id never overwrite each other;
- the payload carries ``tenant_id``, ``knowledge_base_id``, ``document_id`` and ``chunk_id``
  (hits are reported by the chunk id in the payload, never by decoding the point id).

The checks here run before anything is written, so a bad batch is rejected whole.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Final

from knowsphere_retrieval.domain.ports import VectorPoint

TENANT_ID: Final = "tenant_id"
KNOWLEDGE_BASE_ID: Final = "knowledge_base_id"
DOCUMENT_ID: Final = "document_id"
CHUNK_ID: Final = "chunk_id"

# Qdrant's own limit on a dense vector's length.
MAX_DIMENSION: Final = 65_536
MAX_COLLECTION_NAME_CHARS: Final = 128
# Names become directory names of the in-process engine and collection names on a server: keep them
# to characters both accept everywhere.
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

_POINT_ID_NAMESPACE: Final = uuid.UUID("6f0d7c52-3f4e-5b8e-9a51-4b6e6f77e3a1")


def point_id(tenant_id: str, chunk_id: str) -> uuid.UUID:
    """The point id of a tenant's chunk: deterministic, so re-sending a chunk replaces its point."""
    # The length prefix keeps ("a", "bc") and ("ab", "c") apart.
    return uuid.uuid5(_POINT_ID_NAMESPACE, f"{len(tenant_id)}:{tenant_id}{chunk_id}")


def payload(point: VectorPoint) -> dict[str, str]:
    return {
        TENANT_ID: point.tenant_id,
        KNOWLEDGE_BASE_ID: point.knowledge_base_id,
        DOCUMENT_ID: point.document_id,
        CHUNK_ID: point.chunk_id,
    }


def check_collection_name(collection: str) -> None:
    if len(collection) > MAX_COLLECTION_NAME_CHARS or not _COLLECTION_NAME.fullmatch(collection):
        raise ValueError(
            f"collection name {collection!r} is invalid: use 1 to {MAX_COLLECTION_NAME_CHARS} letters, "
            "digits, '_', '-' or '.', starting with a letter or digit"
        )


def check_dimension(dimension: int) -> None:
    if not 1 <= dimension <= MAX_DIMENSION:
        raise ValueError(f"dimension is {dimension}; it must be between 1 and {MAX_DIMENSION}")


def check_vector(collection: str, dimension: int, vector: Sequence[float], what: str) -> None:
    if len(vector) != dimension:
        raise ValueError(
            f"{what} has {len(vector)} dimensions but collection {collection!r} holds "
            f"{dimension}-dimensional vectors"
        )


def check_points(collection: str, dimension: int, points: Sequence[VectorPoint]) -> None:
    """Reject the whole batch if any point is malformed, naming the point and the field."""
    for point in points:
        for field_name in (CHUNK_ID, TENANT_ID, KNOWLEDGE_BASE_ID, DOCUMENT_ID):
            if not getattr(point, field_name):
                raise ValueError(f"point for chunk {point.chunk_id!r} has an empty {field_name}")
        check_vector(collection, dimension, point.vector, f"vector of chunk {point.chunk_id!r}")


def check_limit(limit: int) -> None:
    if limit < 0:
        raise ValueError(f"limit is {limit}; it must be 0 or more")
