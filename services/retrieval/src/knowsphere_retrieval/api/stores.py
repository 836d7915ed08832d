"""The stores every part of retrieval's gRPC face shares, and the look-ups and clean-ups they all make.

The graph store arrives after the servicers exist (the embedded Bolt server starts with the service),
so it is attached here once, and every servicer sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from knowsphere_retrieval.domain.ports import (
    ChunkStore,
    GraphStore,
    KnowledgeBaseConfig,
    LexicalIndex,
    VectorIndex,
)
from knowsphere_retrieval.domain.search import collection_name
from knowsphere_runtime.rpc.errors import invalid


@dataclass
class Stores:
    chunks: ChunkStore
    vectors: VectorIndex
    lexical: LexicalIndex
    vector_backend: str
    lexical_backend: str
    graph: GraphStore | None = None
    graph_backend: str = "none"

    def attach_graph(self, graph: GraphStore | None, backend: str) -> None:
        """Set the graph store once it is up."""
        self.graph = graph
        self.graph_backend = backend

    async def configs(
        self, tenant_id: str, knowledge_base_ids: Sequence[str], field: str, limit: int
    ) -> list[KnowledgeBaseConfig]:
        """The configured knowledge bases among the ids a read names (1 to ``limit`` of them)."""
        if not knowledge_base_ids:
            raise invalid(field, "at least one knowledge base id is required")
        if len(knowledge_base_ids) > limit:
            raise invalid(field, f"{len(knowledge_base_ids)} ids; the limit is {limit}")
        return await self.chunks.get_kb_configs(tenant_id, knowledge_base_ids)

    async def collections(self) -> frozenset[str]:
        """The vector collections that exist: one call to the vector index (an HTTP round trip on
        Qdrant), so a request reads it once and passes it on as ``existing``."""
        return frozenset(await self.vectors.collections())

    async def collections_of(self, config: KnowledgeBaseConfig) -> list[tuple[str, str, int]]:
        """(collection, model id, dimension) of every model with vectors stored for the knowledge base,
        among the collections that exist."""
        present = await self.collections()
        found = [
            (collection_name(model, dimension), model, dimension) for model, dimension in config.stored_models
        ]
        return [item for item in found if item[0] in present]

    async def vector_count(
        self,
        collection: str,
        tenant_id: str,
        knowledge_base_id: str,
        *,
        existing: AbstractSet[str] | None = None,
    ) -> int:
        """The knowledge base's vectors in ``collection``; 0 when the collection does not exist
        (``existing``: the collections, read here when not given)."""
        present = await self.collections() if existing is None else existing
        if collection not in present:
            return 0
        return await self.vectors.count(collection, tenant_id, knowledge_base_id)

    async def drop_from_indexes(
        self, tenant_id: str, knowledge_base_id: str, chunk_ids: Sequence[str]
    ) -> None:
        """Remove chunks from the lexical index and from every vector collection of the knowledge base."""
        if not chunk_ids:
            return
        await self.lexical.delete_chunks(tenant_id, chunk_ids)
        configs = await self.chunks.get_kb_configs(tenant_id, [knowledge_base_id])
        for collection, _, _ in await self.collections_of(configs[0]) if configs else ():
            await self.vectors.delete_chunks(collection, tenant_id, chunk_ids)
