"""Retrieval's gRPC face for writers (ingestion): knowledge-base configuration, indexing and deletion.

The chunk store is the source of truth; the vector, lexical and graph indexes follow it. Every write
is idempotent by chunk id, so a retried batch converges instead of duplicating. Bad input answers
INVALID_ARGUMENT naming the field and the limit; nothing of a refused batch is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import grpc

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_contracts.vocabulary import MAX_EMBEDDING_DIMENSION
from knowsphere_retrieval.api.convert import (
    config_message,
    document_metadata,
    graph_entity,
    graph_relation,
    stored_chunk,
)
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.ports import KnowledgeBaseConfig, LexicalDoc, StoredChunk, VectorPoint
from knowsphere_retrieval.domain.search import collection_name
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid


@dataclass
class _Batch:
    """One IndexChunks request, validated and sorted by destination."""

    chunks: list[StoredChunk] = field(default_factory=list)
    parents: dict[str, str] = field(default_factory=dict)
    points: dict[tuple[str, int], list[VectorPoint]] = field(default_factory=dict)  # per (model, dimension)
    new_models: dict[str, dict[str, int]] = field(default_factory=dict)  # per knowledge base: model → dim


class IndexingServicer:
    def __init__(self, *, settings: Settings, stores: Stores) -> None:
        self._settings = settings
        self._stores = stores

    async def ConfigureKnowledgeBase(self, request: pb.ConfigureKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.ConfigureKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb_id, model_id, dimension = (
                request.knowledge_base_id,
                request.embedding_model_id,
                request.embedding_dimension,
            )
            if not kb_id:
                raise invalid("knowledge_base_id", "required")
            if not model_id:
                raise invalid("embedding_model_id", "required")
            if not 0 < dimension <= MAX_EMBEDDING_DIMENSION:
                raise invalid("embedding_dimension", f"{dimension}; must be 1–{MAX_EMBEDDING_DIMENSION}")
            chunks, vectors = self._stores.chunks, self._stores.vectors
            existing = await chunks.get_kb_configs(tenant, [kb_id])
            stored = dict(existing[0].stored_models) if existing else {}
            collection = collection_name(model_id, dimension)
            if existing and existing[0].embedding_model_id != model_id:
                # A switch is refused until every chunk has a vector of the new model.
                chunk_count = (await chunks.knowledge_base_counts(tenant, [kb_id]))[kb_id].chunk_count
                if chunk_count:
                    have = await self._stores.vector_count(collection, tenant, kb_id)
                    if have < chunk_count:
                        raise RequestError(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            f"knowledge base {kb_id} cannot switch to {model_id}: {chunk_count - have} of "
                            f"{chunk_count} chunks have no vector of that model yet; index them first",
                        )
            await vectors.ensure_collection(collection, dimension)
            stored.setdefault(model_id, dimension)
            await chunks.put_kb_config(
                KnowledgeBaseConfig(
                    tenant_id=tenant,
                    knowledge_base_id=kb_id,
                    embedding_model_id=model_id,
                    embedding_dimension=dimension,
                    language_hint=request.language_hint,
                    graph_enabled=request.graph_enabled,
                    stored_models=tuple(sorted(stored.items())),
                )
            )
            saved = (await chunks.get_kb_configs(tenant, [kb_id]))[0]
            return pb.ConfigureKnowledgeBaseResponse(config=config_message(saved))

        return await answer(context, work)

    async def IndexChunks(self, request: pb.IndexChunksRequest, context: Any) -> Any:
        async def work() -> pb.IndexChunksResponse:
            tenant = require_identity().tenant_id
            if not request.chunks:
                raise invalid("chunks", "at least one chunk is required")
            if len(request.chunks) > self._settings.max_index_batch:
                raise invalid(
                    "chunks", f"{len(request.chunks)} chunks; the limit is {self._settings.max_index_batch}"
                )
            kb_ids = list(dict.fromkeys(c.knowledge_base_id for c in request.chunks))
            configs = {
                c.knowledge_base_id: c for c in await self._stores.chunks.get_kb_configs(tenant, kb_ids)
            }
            missing = [kb for kb in kb_ids if kb not in configs]
            if missing:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"knowledge base(s) {', '.join(missing)} not configured; "
                    "call ConfigureKnowledgeBase first",
                )
            batch = _validated_batch(tenant, request.chunks, configs)
            await self._write(tenant, batch, configs)
            return pb.IndexChunksResponse(indexed_count=len(batch.chunks))

        return await answer(context, work)

    async def _write(self, tenant: str, batch: _Batch, configs: dict[str, KnowledgeBaseConfig]) -> None:
        stores = self._stores
        await stores.chunks.put_chunks(batch.chunks, batch.parents)
        await stores.lexical.upsert(
            [
                LexicalDoc(
                    c.chunk_id,
                    tenant,
                    c.knowledge_base_id,
                    c.document_id,
                    c.text,
                    " ".join((c.file_name, *c.heading_path)),
                )
                for c in batch.chunks
            ]
        )
        for (model_id, dimension), points in batch.points.items():
            collection = collection_name(model_id, dimension)
            await stores.vectors.ensure_collection(collection, dimension)
            await stores.vectors.upsert(collection, points)
        for kb_id, models in batch.new_models.items():
            config = configs[kb_id]
            merged = dict(config.stored_models) | models
            await stores.chunks.put_kb_config(replace(config, stored_models=tuple(sorted(merged.items()))))

    async def PutDocumentInfo(self, request: pb.PutDocumentInfoRequest, context: Any) -> Any:
        async def work() -> pb.PutDocumentInfoResponse:
            tenant = require_identity().tenant_id
            given = ([request.document] if request.HasField("document") else []) + list(request.documents)
            if not given:
                raise invalid(
                    "document", "at least one document's metadata (document or documents) is required"
                )
            await self._stores.chunks.put_document_infos([document_metadata(tenant, d) for d in given])
            return pb.PutDocumentInfoResponse()

        return await answer(context, work)

    async def PruneDocumentChunks(self, request: pb.PruneDocumentChunksRequest, context: Any) -> Any:
        async def work() -> pb.PruneDocumentChunksResponse:
            tenant = require_identity().tenant_id
            stores = self._stores
            removed = await stores.chunks.prune_document(
                tenant, request.knowledge_base_id, request.document_id, request.keep_ingest_run_id
            )
            await stores.drop_from_indexes(tenant, request.knowledge_base_id, removed)
            if stores.graph is not None and removed:
                await stores.graph.delete_chunks(tenant, request.knowledge_base_id, removed)
            return pb.PruneDocumentChunksResponse(deleted_chunk_count=len(removed))

        return await answer(context, work)

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context: Any) -> Any:
        async def work() -> pb.DeleteDocumentResponse:
            tenant = require_identity().tenant_id
            kb_id, document_id = request.knowledge_base_id, request.document_id
            if not kb_id or not document_id:
                raise invalid("document_id", "knowledge_base_id and document_id are required")
            stores = self._stores
            # Indexes first, the store (the source of truth) last: a crash in between leaves chunks a
            # retried delete still finds, never index entries pointing at nothing.
            chunk_ids = await stores.chunks.document_chunk_ids(tenant, document_id)
            await stores.drop_from_indexes(tenant, kb_id, chunk_ids)
            await stores.lexical.delete_document(tenant, kb_id, document_id)
            if stores.graph is not None:
                await stores.graph.delete_document(tenant, kb_id, document_id)
            removed = await stores.chunks.delete_document(tenant, kb_id, document_id)
            return pb.DeleteDocumentResponse(deleted_chunk_count=len(removed))

        return await answer(context, work)

    async def DeleteKnowledgeBase(self, request: pb.DeleteKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.DeleteKnowledgeBaseResponse:
            tenant = require_identity().tenant_id
            kb_id = request.knowledge_base_id
            if not kb_id:
                raise invalid("knowledge_base_id", "required")
            stores = self._stores
            configs = await stores.chunks.get_kb_configs(tenant, [kb_id])
            counts = await stores.chunks.knowledge_base_counts(tenant, [kb_id])
            for collection, _, _ in await stores.collections_of(configs[0]) if configs else ():
                await stores.vectors.delete_knowledge_base(collection, tenant, kb_id)
            await stores.lexical.delete_knowledge_base(tenant, kb_id)
            if stores.graph is not None:
                await stores.graph.delete_knowledge_base(tenant, kb_id)
            removed = await stores.chunks.delete_knowledge_base(tenant, kb_id)
            await stores.chunks.delete_kb_config(tenant, kb_id)
            return pb.DeleteKnowledgeBaseResponse(
                deleted_chunk_count=len(removed), deleted_document_count=counts[kb_id].document_count
            )

        return await answer(context, work)

    async def DeleteEmbeddings(self, request: pb.DeleteEmbeddingsRequest, context: Any) -> Any:
        async def work() -> pb.DeleteEmbeddingsResponse:
            tenant = require_identity().tenant_id
            kb_id, model_id = request.knowledge_base_id, request.embedding_model_id
            stores = self._stores
            configs = await stores.chunks.get_kb_configs(tenant, [kb_id])
            if not configs:
                raise RequestError(grpc.StatusCode.NOT_FOUND, f"knowledge base {kb_id} not found")
            config = configs[0]
            if model_id == config.embedding_model_id:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{model_id} is the active model of {kb_id}; switch first",
                )
            stored = dict(config.stored_models)
            dimension = stored.pop(model_id, None)
            deleted = 0
            if dimension is not None:
                collection = collection_name(model_id, dimension)
                deleted = await stores.vector_count(collection, tenant, kb_id)
                if deleted:
                    await stores.vectors.delete_knowledge_base(collection, tenant, kb_id)
                await stores.chunks.put_kb_config(
                    replace(config, stored_models=tuple(sorted(stored.items())))
                )
            return pb.DeleteEmbeddingsResponse(deleted_vector_count=deleted)

        return await answer(context, work)

    async def IndexGraph(self, request: pb.IndexGraphRequest, context: Any) -> Any:
        async def work() -> pb.IndexGraphResponse:
            tenant = require_identity().tenant_id
            graph = self._stores.graph
            if graph is None:
                raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "the graph store is turned off")
            kb_id = request.knowledge_base_id
            configs = await self._stores.chunks.get_kb_configs(tenant, [kb_id])
            if not configs or not configs[0].graph_enabled:
                raise RequestError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"knowledge base {kb_id} is not configured with the graph on",
                )
            await graph.upsert(
                tenant,
                kb_id,
                request.document_id,
                [graph_entity(e) for e in request.entities],
                [graph_relation(r) for r in request.relations],
            )
            return pb.IndexGraphResponse(
                entity_count=len(request.entities), relation_count=len(request.relations)
            )

        return await answer(context, work)


def _validated_batch(
    tenant: str, chunks: Sequence[pb.Chunk], configs: dict[str, KnowledgeBaseConfig]
) -> _Batch:
    """The batch's chunks, parents and vectors; INVALID_ARGUMENT naming the first bad field."""
    batch = _Batch()
    for index, chunk in enumerate(chunks):
        where = f"chunks[{index}]"
        if not chunk.id or not chunk.document_id:
            raise invalid(where, "id and document_id are required")
        if not chunk.text.strip():
            raise invalid(f"{where}.text", "empty text")
        batch.chunks.append(stored_chunk(tenant, chunk))
        if chunk.parent_id and chunk.parent_text:
            batch.parents[chunk.parent_id] = chunk.parent_text
        kb_id = chunk.knowledge_base_id
        known = dict(configs[kb_id].stored_models)
        for e_index, embedding in enumerate(chunk.embeddings):
            e_where = f"{where}.embeddings[{e_index}]"
            model_id, dimension = embedding.model_id, embedding.dimension
            if dimension != len(embedding.values):
                raise invalid(e_where, f"dimension {dimension} but {len(embedding.values)} values")
            expected = known.get(model_id) or batch.new_models.get(kb_id, {}).get(model_id)
            if expected is not None and expected != dimension:
                raise invalid(
                    e_where,
                    f"{model_id} vectors have dimension {expected} in this knowledge base, got {dimension}",
                )
            if expected is None:
                batch.new_models.setdefault(kb_id, {})[model_id] = dimension
            batch.points.setdefault((model_id, dimension), []).append(
                VectorPoint(chunk.id, tenant, kb_id, chunk.document_id, list(embedding.values))
            )
    return batch
