"""Retrieval for the tests of its callers and its own: the real servicers over embedded stores
(SQLite chunks, the edge vector index, tantivy) on a loopback gRPC server, with modelhub scripted —
toy query vectors, no rerank model.

``async with serving_documents(tmp_path, identity, "kb", {"doc-1": ("d1.txt", ["text", …])}) as client``
gives a :class:`RetrievalClient` to a service whose knowledge base holds those documents, one chunk per
text.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_clients import RetrievalClient
from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.api.grpc import build_binding
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.search import Searcher
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving

TOY_MODEL = "toy-model"
TOY_DIMENSION = 8

Documents = Mapping[str, tuple[str, Sequence[str]]]
"""document id → (file name, its chunks' texts in reading order)."""


def toy_vector(text: str) -> list[float]:
    """A fixed vector of ``TOY_DIMENSION`` per text (its hash): equal texts, equal vectors."""
    digest = hashlib.sha256(text.lower().encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:TOY_DIMENSION]]


class ToyModels:
    """modelhub as retrieval asks it: toy query vectors, no rerank model configured."""

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        return toy_vector(query)

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], *, top_n: int = 0
    ) -> list[float]:
        raise AssertionError("no rerank model is configured")

    async def has_default(self, model_type: ModelType) -> bool:
        return model_type != ModelType.RERANK

    async def complete(self, messages: Sequence[Mapping[str, str]], **options: Any) -> str:
        return ""

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        return ()


@asynccontextmanager
async def serving_documents(
    data_dir: Path, identity: Identity, knowledge_base_id: str, documents: Documents
) -> AsyncIterator[RetrievalClient]:
    """Retrieval in-process under ``data_dir``, ``identity``'s knowledge base holding ``documents``."""
    chunks = SqlChunkStore(f"sqlite+aiosqlite:///{data_dir}/chunks.db")
    await chunks.open()
    vectors = EdgeVectorIndex(data_dir / "vectors")
    lexical = TantivyLexicalIndex(data_dir / "lexical")
    try:
        models = ToyModels()
        stores = Stores(chunks, vectors, lexical, vector_backend="edge", lexical_backend="tantivy")
        binding = build_binding(
            settings=Settings(data_dir=data_dir, modelhub_addr="127.0.0.1:1"),
            stores=stores,
            searcher=Searcher(vectors=vectors, lexical=lexical, chunks=chunks, models=models),
            models=models,
        )
        async with serving("retrieval", binding=binding) as channel:
            client = RetrievalClient(channel)
            with bound_identity(identity):
                await client.configure_knowledge_base(
                    knowledge_base_id, embedding_model_id=TOY_MODEL, embedding_dimension=TOY_DIMENSION
                )
                await client.index_chunks(
                    [
                        pb.Chunk(
                            id=f"{document}-{position}",
                            document_id=document,
                            knowledge_base_id=knowledge_base_id,
                            file_name=file_name,
                            text=text,
                            position=position,
                            embeddings=[
                                pb.ChunkEmbedding(
                                    model_id=TOY_MODEL, dimension=TOY_DIMENSION, values=toy_vector(text)
                                )
                            ],
                        )
                        for document, (file_name, texts) in documents.items()
                        for position, text in enumerate(texts)
                    ]
                )
            yield client
    finally:
        await lexical.close()
        await vectors.close()
        await chunks.close()


__all__ = ["TOY_DIMENSION", "TOY_MODEL", "Documents", "ToyModels", "serving_documents", "toy_vector"]
