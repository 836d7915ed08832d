"""The vector index on a Qdrant server, through ``qdrant-client``'s ``AsyncQdrantClient`` (production).

Same semantics and the same points as the in-process engine (:mod:`.vector_edge`; ids and payload from
:mod:`.vector_points`): one collection per embedding model and dimension, cosine distance, payload
``tenant_id`` indexed as the tenant key (``is_tenant``: the server keeps each tenant's points together
on disk), ``knowledge_base_id`` and ``document_id`` keyword-indexed. The HNSW graph follows Qdrant's
multitenancy layout: no global graph (``m=0``), links only between points of the same tenant
(``payload_m``), since every query is filtered by one tenant. The server optimizes in the background.

``url=":memory:"`` runs qdrant-client's local mode instead of a server; it exists to test this adapter
where no server runs and is far too slow for real use (about 1 s per filtered query at 50k points).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from knowsphere_retrieval.adapters.vector_points import (
    CHUNK_ID,
    DOCUMENT_ID,
    KNOWLEDGE_BASE_ID,
    TENANT_ID,
    check_collection_name,
    check_dimension,
    check_limit,
    check_points,
    check_vector,
    payload,
    point_id,
)
from knowsphere_retrieval.domain.ports import Hit, Scope, VectorPoint

DEFAULT_TIMEOUT_SECONDS: Final = 30
UPSERT_BATCH_POINTS: Final = 256
SEARCH_HNSW_EF: Final = 128
HNSW_EF_CONSTRUCT: Final = 100
HNSW_PAYLOAD_M: Final = 16
_HTTP_CONFLICT: Final = 409
LOCAL_MODE: Final = ":memory:"


class QdrantServerVectorIndex:
    """:class:`~knowsphere_retrieval.domain.ports.VectorIndex` on a Qdrant server."""

    def __init__(
        self, url: str, api_key: str | None = None, *, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        # Local mode has no payload indexes and searches exactly: it gets neither setting.
        self._local = url == LOCAL_MODE
        if self._local:
            self._client = AsyncQdrantClient(location=LOCAL_MODE)
        else:
            self._client = AsyncQdrantClient(url=url, api_key=api_key or None, timeout=timeout_seconds)
        self._dimensions: dict[str, int] = {}

    async def ensure_collection(self, collection: str, dimension: int) -> None:
        check_collection_name(collection)
        check_dimension(dimension)
        existing = await self._dimension(collection)
        if existing is None:
            try:
                await self._client.create_collection(
                    collection,
                    vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
                    hnsw_config=models.HnswConfigDiff(
                        m=0, payload_m=HNSW_PAYLOAD_M, ef_construct=HNSW_EF_CONSTRUCT
                    ),
                )
            except UnexpectedResponse as exc:
                if exc.status_code != _HTTP_CONFLICT:  # another replica created it meanwhile
                    raise
            existing = await self._dimension(collection)
            if not self._local:
                await self._create_payload_indexes(collection)
        if existing != dimension:
            raise ValueError(
                f"collection {collection!r} holds {existing}-dimensional vectors; "
                f"it cannot be used with dimension {dimension}"
            )

    async def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        check_collection_name(collection)
        if not points:
            return
        dimension = await self._dimension(collection)
        if dimension is None:
            raise KeyError(f"collection {collection!r} does not exist; call ensure_collection first")
        check_points(collection, dimension, points)
        for start in range(0, len(points), UPSERT_BATCH_POINTS):
            batch = points[start : start + UPSERT_BATCH_POINTS]
            await self._client.upsert(
                collection,
                points=[
                    models.PointStruct(
                        id=str(point_id(p.tenant_id, p.chunk_id)), vector=list(p.vector), payload=payload(p)
                    )
                    for p in batch
                ],
                wait=True,
            )

    async def search(self, collection: str, vector: Sequence[float], scope: Scope, limit: int) -> list[Hit]:
        check_collection_name(collection)
        check_limit(limit)
        if limit == 0 or not scope.knowledge_base_ids:
            return []
        dimension = await self._dimension(collection)
        if dimension is None:
            return []
        check_vector(collection, dimension, vector, "query vector")
        must: list[models.Condition] = [
            _match(TENANT_ID, scope.tenant_id),
            _match_any(KNOWLEDGE_BASE_ID, scope.knowledge_base_ids),
        ]
        if scope.document_ids:
            must.append(_match_any(DOCUMENT_ID, scope.document_ids))
        response = await self._client.query_points(
            collection,
            query=list(vector),
            query_filter=models.Filter(must=must),
            search_params=None if self._local else models.SearchParams(hnsw_ef=max(SEARCH_HNSW_EF, limit)),
            limit=limit,
            with_payload=[CHUNK_ID],
        )
        return [Hit(chunk_id=str((p.payload or {})[CHUNK_ID]), score=float(p.score)) for p in response.points]

    async def delete_chunks(self, collection: str, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        if not chunk_ids:
            return
        ids: list[models.ExtendedPointId] = [str(point_id(tenant_id, c)) for c in chunk_ids]
        await self._delete(collection, [_match(TENANT_ID, tenant_id), models.HasIdCondition(has_id=ids)])

    async def delete_document(
        self, collection: str, tenant_id: str, knowledge_base_id: str, document_id: str
    ) -> None:
        await self._delete(
            collection,
            [
                _match(TENANT_ID, tenant_id),
                _match(KNOWLEDGE_BASE_ID, knowledge_base_id),
                _match(DOCUMENT_ID, document_id),
            ],
        )

    async def delete_knowledge_base(self, collection: str, tenant_id: str, knowledge_base_id: str) -> None:
        await self._delete(
            collection, [_match(TENANT_ID, tenant_id), _match(KNOWLEDGE_BASE_ID, knowledge_base_id)]
        )

    async def count(self, collection: str, tenant_id: str, knowledge_base_id: str) -> int:
        check_collection_name(collection)
        if await self._dimension(collection) is None:
            return 0
        result = await self._client.count(
            collection,
            count_filter=models.Filter(
                must=[_match(TENANT_ID, tenant_id), _match(KNOWLEDGE_BASE_ID, knowledge_base_id)]
            ),
            exact=True,
        )
        return result.count

    async def collections(self) -> list[str]:
        response = await self._client.get_collections()
        return sorted(c.name for c in response.collections)

    async def drop_collection(self, collection: str) -> None:
        check_collection_name(collection)
        self._dimensions.pop(collection, None)
        if await self._client.collection_exists(collection):
            await self._client.delete_collection(collection)

    async def close(self) -> None:
        await self._client.close()

    async def _dimension(self, collection: str) -> int | None:
        """The collection's vector length, or ``None`` when it does not exist."""
        known = self._dimensions.get(collection)
        if known is not None:
            return known
        if not await self._client.collection_exists(collection):
            return None
        info = await self._client.get_collection(collection)
        vectors = info.config.params.vectors
        if not isinstance(vectors, models.VectorParams):
            raise ValueError(
                f"collection {collection!r} has named vectors; this index uses one unnamed vector"
            )
        self._dimensions[collection] = vectors.size
        return vectors.size

    async def _create_payload_indexes(self, collection: str) -> None:
        # Creating an index that exists already is accepted by the server, so this is idempotent.
        schemas = {
            TENANT_ID: models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            KNOWLEDGE_BASE_ID: models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD, enable_hnsw=False
            ),
            DOCUMENT_ID: models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=False),
        }
        for field_name, schema in schemas.items():
            await self._client.create_payload_index(collection, field_name, field_schema=schema, wait=True)

    async def _delete(self, collection: str, must: list[models.Condition]) -> None:
        check_collection_name(collection)
        if await self._dimension(collection) is None:
            return
        await self._client.delete(
            collection, points_selector=models.FilterSelector(filter=models.Filter(must=must)), wait=True
        )


def _match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_any(key: str, values: Sequence[str]) -> models.FieldCondition:
    if len(values) == 1:
        return _match(key, values[0])
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
