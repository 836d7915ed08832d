"""Retrieval's gRPC face in-process: the split servicers bound as one service, over real embedded stores.

A caller's view through the real contract on loopback: every method of RetrievalService answers,
what IndexChunks and PutDocumentInfo take comes back whole from Search, ListChunks, GrepChunks and
GetDocumentInfo, search options override the service's defaults, and bad input names its field.
Another tenant naming Acme's knowledge-base, chunk and document ids reads and deletes nothing of
Acme's, and a call without an identity is refused.
modelhub is scripted (toy query vectors, no rerank model configured).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.api.grpc import build_binding
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.search import Searcher
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving

ACME = Identity("acme", "alice")
GLOBEX = Identity("globex", "gus")
MODEL = "toy-model"


def toy_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.lower().encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:8]]


class ScriptedModels:
    def __init__(self) -> None:
        self.rerank_calls = 0

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        return toy_vector(query)

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], *, top_n: int = 0
    ) -> list[float]:
        self.rerank_calls += 1
        return [0.0] * len(documents)

    async def has_default(self, model_type: ModelType) -> bool:
        return model_type != ModelType.RERANK

    async def complete(self, messages: Sequence[Mapping[str, str]], **options: Any) -> str:
        return ""

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        return ()


def chunk(kb: str, document: str, position: int, text: str, **fields: Any) -> pb.Chunk:
    return pb.Chunk(
        id=f"{document}-{position}",
        document_id=document,
        knowledge_base_id=kb,
        file_name=f"{document}.pdf",
        text=text,
        position=position,
        embeddings=[pb.ChunkEmbedding(model_id=MODEL, dimension=8, values=toy_vector(text))],
        **fields,
    )


@pytest.fixture
async def retrieval(tmp_path: Path) -> AsyncIterator[Any]:
    settings = Settings(data_dir=tmp_path, modelhub_addr="127.0.0.1:1", top_k=2)
    chunks = SqlChunkStore(f"sqlite+aiosqlite:///{tmp_path}/chunks.db")
    await chunks.open()
    vectors = EdgeVectorIndex(tmp_path / "vectors")
    lexical = TantivyLexicalIndex(tmp_path / "lexical")
    models = ScriptedModels()
    stores = Stores(chunks, vectors, lexical, vector_backend="edge", lexical_backend="tantivy")
    searcher = Searcher(vectors=vectors, lexical=lexical, chunks=chunks, models=models)
    binding = build_binding(settings=settings, stores=stores, searcher=searcher, models=models)
    assert binding.pending == ()  # every method of the contract is implemented by one part
    async with serving("retrieval", binding=binding) as channel:
        with bound_identity(ACME):
            stub = CONTRACTS["retrieval"].stub(channel)
            await stub.ConfigureKnowledgeBase(
                pb.ConfigureKnowledgeBaseRequest(
                    knowledge_base_id="kb", embedding_model_id=MODEL, embedding_dimension=8
                )
            )
            yield stub
    await lexical.close()
    await vectors.close()
    await chunks.close()


async def test_what_is_indexed_comes_back_whole(retrieval):
    indexed = chunk(
        "kb",
        "handbook",
        3,
        "Unused annual leave can be carried over until the end of March.",
        parent_id="handbook-p1",
        parent_text="Leave. Unused annual leave can be carried over until the end of March.",
        heading_path=["Leave", "Carry-over"],
        page=7,
        metadata={"lang": "en"},
        ingest_run_id="run-1",
        token_count=14,
    )
    other = chunk("kb", "handbook", 4, "The badge reader shows error E0420 when offline.")
    assert (await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=[indexed, other]))).indexed_count == 2

    found = await retrieval.Search(
        pb.SearchRequest(query="annual leave carried over", knowledge_base_ids=["kb"])
    )
    top = found.results[0]
    assert (top.handle, top.chunk_id, top.document_id, top.file_name, top.knowledge_base_id) == (
        "handbook-3",
        "handbook-3",
        "handbook",
        "handbook.pdf",
        "kb",
    )
    assert (top.text, top.parent_id, top.parent_text) == (indexed.text, "handbook-p1", indexed.parent_text)
    assert (top.position, list(top.heading_path), top.page, dict(top.metadata)) == (
        3,
        ["Leave", "Carry-over"],
        7,
        {"lang": "en"},
    )
    assert top.scores.HasField("vector") and top.scores.HasField("bm25") and top.scores.rrf > 0
    assert not top.scores.HasField("rerank")
    assert found.stats.rerank_skipped_reason == "no rerank model configured"
    assert found.stats.total_duration.ToNanoseconds() > 0
    assert (found.stats.vector_hit_count, found.stats.bm25_hit_count) == (2, 1)

    listed = await retrieval.ListChunks(
        pb.ListChunksRequest(
            selectors=[pb.ChunkSelector(handle=top.handle, neighbours_after=1)], include_parent_text=True
        )
    )
    assert [(c.chunk_id, c.neighbour) for c in listed.chunks] == [("handbook-3", False), ("handbook-4", True)]
    assert listed.chunks[0].parent_text == indexed.parent_text and list(listed.chunks[0].heading_path) == [
        "Leave",
        "Carry-over",
    ]

    grep = await retrieval.GrepChunks(pb.GrepChunksRequest(pattern=r"E0\d+", knowledge_base_ids=["kb"]))
    match = grep.matches[0]
    assert (match.handle, match.match, match.match_offset, match.file_name) == (
        "handbook-4",
        "E0420",
        other.text.index("E0420"),
        "handbook.pdf",
    )


async def test_search_options_override_the_service_defaults(retrieval):
    texts = ["annual leave days", "annual leave carry-over", "annual leave for part-time staff"]
    await retrieval.IndexChunks(
        pb.IndexChunksRequest(chunks=[chunk("kb", "leave", i, t) for i, t in enumerate(texts)])
    )
    request = pb.SearchRequest(query="annual leave", knowledge_base_ids=["kb"])
    assert len((await retrieval.Search(request)).results) == 2  # the service's top_k
    request.top_k = 3
    request.options.mode = pb.SEARCH_MODE_BM25
    request.options.rerank_enabled = False
    answer = await retrieval.Search(request)
    assert len(answer.results) == 3
    assert answer.stats.vector_weight_used == 0 and answer.stats.vector_hit_count == 0
    assert answer.stats.rerank_skipped_reason == ""  # not asked for: nothing to skip
    assert all(not r.scores.HasField("vector") for r in answer.results)


async def test_document_info_keeps_what_was_pushed(retrieval):
    created = datetime(2025, 3, 1, 12, 30, tzinfo=UTC)
    metadata = pb.DocumentMetadata(
        document_id="handbook",
        knowledge_base_id="kb",
        file_name="handbook.pdf",
        title="Staff handbook",
        size_bytes=2048,
        page_count=12,
        language="en",
        status=pb.DOCUMENT_STATUS_READY,
        metadata={"owner": "hr"},
    )
    metadata.create_time.FromDatetime(created)
    await retrieval.PutDocumentInfo(pb.PutDocumentInfoRequest(documents=[metadata]))
    await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=[chunk("kb", "handbook", 0, "Annual leave.")]))
    info = await retrieval.GetDocumentInfo(pb.GetDocumentInfoRequest(document_ids=["handbook", "unknown"]))
    assert list(info.not_found) == ["unknown"]
    document = info.documents[0]
    assert document.metadata == metadata
    assert (document.index.chunk_count, document.index.HasField("last_index_time")) == (1, True)


async def test_a_bad_chunk_is_refused_naming_its_field_and_nothing_is_written(retrieval):
    good = chunk("kb", "manual", 0, "The pump is serviced every six months.")
    bad = chunk("kb", "manual", 1, "Wrong vector.")
    bad.embeddings[0].dimension = 4
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=[good, bad]))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "chunks[1].embeddings[0]" in (refused.value.details() or "")
    stats = await retrieval.GetIndexStats(pb.GetIndexStatsRequest(knowledge_base_ids=["kb"]))
    assert stats.knowledge_bases[0].chunk_count == 0
    assert (stats.vector_backend, stats.lexical_backend, stats.graph_backend) == ("edge", "tantivy", "none")


async def test_graph_calls_say_the_graph_is_off(retrieval):
    with pytest.raises(grpc.aio.AioRpcError) as off:
        await retrieval.QueryKnowledgeGraph(
            pb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=["kb"], parameters=pb.GraphQueryParameters(entity_name="pump")
            )
        )
    assert off.value.code() == grpc.StatusCode.FAILED_PRECONDITION


# --- another tenant, and no tenant ---------------------------------------------------------------


async def index_acme_handbook(retrieval: Any) -> None:
    """Acme's knowledge base ``kb``: a handbook of two chunks with its metadata."""
    await retrieval.PutDocumentInfo(
        pb.PutDocumentInfoRequest(
            document=pb.DocumentMetadata(
                document_id="handbook", knowledge_base_id="kb", file_name="handbook.pdf", title="Handbook"
            )
        )
    )
    await retrieval.IndexChunks(
        pb.IndexChunksRequest(
            chunks=[
                chunk("kb", "handbook", 0, "Unused annual leave can be carried over.", ingest_run_id="run-1"),
                chunk("kb", "handbook", 1, "The badge reader shows error E0420.", ingest_run_id="run-1"),
            ]
        )
    )


async def acme_handbook(retrieval: Any) -> dict[str, Any]:
    """What Acme reads of its handbook through every read of the service."""
    found = await retrieval.Search(pb.SearchRequest(query="annual leave", knowledge_base_ids=["kb"], top_k=5))
    grep = await retrieval.GrepChunks(pb.GrepChunksRequest(pattern="E0420", knowledge_base_ids=["kb"]))
    listed = await retrieval.ListChunks(
        pb.ListChunksRequest(selectors=[pb.ChunkSelector(chunk_id="handbook-0", neighbours_after=1)])
    )
    info = await retrieval.GetDocumentInfo(pb.GetDocumentInfoRequest(document_ids=["handbook"]))
    stats = (
        await retrieval.GetIndexStats(pb.GetIndexStatsRequest(knowledge_base_ids=["kb"]))
    ).knowledge_bases
    return {
        "search": [r.chunk_id for r in found.results],
        "grep": [m.chunk_id for m in grep.matches],
        "list": [c.chunk_id for c in listed.chunks],
        "info": [d.metadata.title for d in info.documents],
        "counts": [(s.chunk_count, s.document_count, s.lexical_entry_count) for s in stats],
        "vectors": [(e.model_id, e.vector_count) for s in stats for e in s.embeddings],
    }


ACME_HANDBOOK = {
    "search": ["handbook-0"],
    "grep": ["handbook-1"],
    "list": ["handbook-0", "handbook-1"],
    "info": ["Handbook"],
    "counts": [(2, 1, 2)],
    "vectors": [(MODEL, 2)],
}


async def assert_globex_reaches_nothing_of_acme(retrieval: Any) -> None:
    """Every read and delete of Globex naming Acme's ids, while bound to Globex."""
    found = await retrieval.Search(pb.SearchRequest(query="annual leave", knowledge_base_ids=["kb"]))
    assert list(found.results) == []
    grep = await retrieval.GrepChunks(pb.GrepChunksRequest(pattern="E0420", knowledge_base_ids=["kb"]))
    assert list(grep.matches) == []
    listed = await retrieval.ListChunks(
        pb.ListChunksRequest(
            selectors=[
                pb.ChunkSelector(handle="handbook-0", neighbours_after=1),
                pb.ChunkSelector(chunk_id="handbook-1"),
                pb.ChunkSelector(
                    range=pb.PositionRange(document_id="handbook", start_position=0, end_position=5)
                ),
            ],
            include_parent_text=True,
        )
    )
    assert (list(listed.chunks), list(listed.not_found)) == ([], ["handbook-0", "handbook-1"])
    info = await retrieval.GetDocumentInfo(pb.GetDocumentInfoRequest(document_ids=["handbook"]))
    assert (list(info.documents), list(info.not_found)) == ([], ["handbook"])
    pruned = await retrieval.PruneDocumentChunks(
        pb.PruneDocumentChunksRequest(knowledge_base_id="kb", document_id="handbook", keep_ingest_run_id="x")
    )
    assert pruned.deleted_chunk_count == 0
    deleted = await retrieval.DeleteDocument(
        pb.DeleteDocumentRequest(knowledge_base_id="kb", document_id="handbook")
    )
    assert deleted.deleted_chunk_count == 0
    dropped = await retrieval.DeleteKnowledgeBase(pb.DeleteKnowledgeBaseRequest(knowledge_base_id="kb"))
    assert (dropped.deleted_chunk_count, dropped.deleted_document_count) == (0, 0)


async def test_another_tenant_using_acme_ids_gets_nothing_and_deletes_nothing(retrieval):
    await index_acme_handbook(retrieval)
    assert await acme_handbook(retrieval) == ACME_HANDBOOK

    with bound_identity(GLOBEX):
        # Acme's knowledge-base id is unknown to Globex ...
        unknown = await retrieval.Search(pb.SearchRequest(query="annual leave", knowledge_base_ids=["kb"]))
        assert list(unknown.stats.unknown_knowledge_base_ids) == ["kb"]
        stats = await retrieval.GetIndexStats(pb.GetIndexStatsRequest(knowledge_base_ids=["kb"]))
        assert list(stats.knowledge_bases) == []
        await assert_globex_reaches_nothing_of_acme(retrieval)
        # ... and stays Acme's when Globex configures a knowledge base of the same id and model.
        await retrieval.ConfigureKnowledgeBase(
            pb.ConfigureKnowledgeBaseRequest(
                knowledge_base_id="kb", embedding_model_id=MODEL, embedding_dimension=8
            )
        )
        own = await retrieval.Search(pb.SearchRequest(query="annual leave", knowledge_base_ids=["kb"]))
        assert list(own.stats.unknown_knowledge_base_ids) == []
        stats = await retrieval.GetIndexStats(pb.GetIndexStatsRequest(knowledge_base_ids=["kb"]))
        assert [(s.chunk_count, s.document_count) for s in stats.knowledge_bases] == [(0, 0)]
        assert [e.vector_count for e in stats.knowledge_bases[0].embeddings] == [0]
        await assert_globex_reaches_nothing_of_acme(retrieval)

    assert await acme_handbook(retrieval) == ACME_HANDBOOK


async def test_a_call_without_identity_is_refused(retrieval):
    await index_acme_handbook(retrieval)
    calls = [
        lambda: retrieval.Search(pb.SearchRequest(query="annual leave", knowledge_base_ids=["kb"])),
        lambda: retrieval.ListChunks(
            pb.ListChunksRequest(selectors=[pb.ChunkSelector(chunk_id="handbook-0")])
        ),
        lambda: retrieval.GetDocumentInfo(pb.GetDocumentInfoRequest(document_ids=["handbook"])),
        lambda: retrieval.IndexChunks(
            pb.IndexChunksRequest(chunks=[chunk("kb", "intruder", 0, "Injected.")])
        ),
        lambda: retrieval.DeleteKnowledgeBase(pb.DeleteKnowledgeBaseRequest(knowledge_base_id="kb")),
        lambda: retrieval.QueryKnowledgeGraph(
            pb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=["kb"], parameters=pb.GraphQueryParameters(entity_name="badge")
            )
        ),
    ]
    with bound_identity(None):
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await acme_handbook(retrieval) == ACME_HANDBOOK
