"""Retrieval in the running stack: index through the gRPC API, search through the gateway.

Vectors come from modelhub's built-in embedding model, so the whole path is real: modelhub embeds,
retrieval stores chunks in SQLite, vectors in the in-process Qdrant engine, terms in tantivy and
graph facts in ArcadeDB over Bolt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import httpx
import pytest

from knowsphere.modelhub.v1 import modelhub_pb2 as mh
from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel

pytestmark = pytest.mark.e2e
LOCAL = Identity("local", "local")
OTHER = Identity("other-tenant", "eve")
MODEL = "builtin-minilm-l6-v2"

DOCS = {
    "handbook": [
        "Employees receive 25 days of paid annual leave per calendar year.",
        "Unused annual leave can be carried over until the end of March.",
        "Error code E0420 means the badge reader could not reach the access server.",
    ],
    "manual": [
        "The XJ-2000-B pump must be serviced every six months.",
        "The XJ-2000-C pump is serviced once a year.",
        "上海交通大学与公司合作开展了节能研究。",
    ],
}


def _call(stack: Any, identity: Identity, work: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with (
            open_channel(stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor]) as r,
            open_channel(stack.grpc_addr("modelhub"), services=[CONTRACTS["modelhub"].descriptor]) as m,
        ):
            with bound_identity(identity):
                return await work(CONTRACTS["retrieval"].stub(r), CONTRACTS["modelhub"].stub(m))

    return asyncio.run(run())


async def _index(retrieval: Any, modelhub: Any, kb: str) -> None:
    await retrieval.ConfigureKnowledgeBase(
        pb.ConfigureKnowledgeBaseRequest(
            knowledge_base_id=kb, embedding_model_id=MODEL, embedding_dimension=384, graph_enabled=True
        )
    )
    for doc, texts in DOCS.items():
        vectors = await modelhub.Embed(mh.EmbedRequest(model_id=MODEL, texts=texts), timeout=120)
        chunks = [
            pb.Chunk(
                id=f"{kb}-{doc}-{i}",
                document_id=f"{kb}-{doc}",
                knowledge_base_id=kb,
                file_name=f"{doc}.pdf",
                text=text,
                parent_id=f"{kb}-{doc}-parent",
                parent_text=" ".join(texts),
                position=i,
                embeddings=[pb.ChunkEmbedding(model_id=MODEL, dimension=384, values=v.values)],
            )
            for i, (text, v) in enumerate(zip(texts, vectors.embeddings, strict=True))
        ]
        await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=chunks))
        await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=chunks))  # idempotent re-send


@pytest.fixture(scope="module")
def indexed(stack: Any) -> str:
    _call(stack, LOCAL, lambda r, m: _index(r, m, "kb-e2e"))
    return "kb-e2e"


def _search(stack: Any, kb: str, query: str, **options: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{stack.gateway_url}/api/v1/knowledge-bases/{kb}/search",
        json={"query": query, **options},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_search_through_the_gateway_returns_ranked_results_with_score_parts(stack, indexed):
    found = _search(stack, indexed, "how many days of annual leave do I get?")
    top = found["results"][0]
    assert top["chunk_id"] == f"{indexed}-handbook-0"
    assert top["scores"]["vector"] is not None and top["scores"]["bm25"] is not None
    assert top["scores"]["rrf"] > 0
    assert top["parent_text"].startswith("Employees receive 25 days")
    # Parents travel once: later results of the same parent carry only its id.
    same_parent = [r for r in found["results"] if r["parent_id"] == top["parent_id"]]
    assert sum(1 for r in same_parent if r["parent_text"]) == 1
    assert found["stats"]["vector_hit_count"] > 0 and found["stats"]["bm25_hit_count"] > 0
    assert found["stats"]["rerank_skipped_reason"] == "no rerank model configured"


def test_exact_identifiers_and_chinese_names_are_found(stack, indexed):
    part = _search(stack, indexed, "XJ-2000-B", mode="bm25")
    assert [r["chunk_id"] for r in part["results"]] == [f"{indexed}-manual-0"]
    name = _search(stack, indexed, "上海交通大学")
    assert name["results"][0]["chunk_id"] == f"{indexed}-manual-2"
    # The built-in model reads English only, so the vector leg does not vote on a Chinese query.
    assert name["stats"]["vector_weight_used"] == 0.0


def test_another_tenant_never_sees_the_data(stack, indexed):
    async def probe(retrieval: Any, modelhub: Any) -> tuple[Any, Any, Any]:
        search = await retrieval.Search(pb.SearchRequest(query="annual leave", knowledge_base_ids=[indexed]))
        grep = await retrieval.GrepChunks(pb.GrepChunksRequest(pattern="leave", knowledge_base_ids=[indexed]))
        listed = await retrieval.ListChunks(
            pb.ListChunksRequest(selectors=[pb.ChunkSelector(chunk_id=f"{indexed}-handbook-0")])
        )
        return search, grep, listed

    search, grep, listed = _call(stack, OTHER, probe)
    assert list(search.results) == []
    assert list(search.stats.unknown_knowledge_base_ids) == [indexed]
    assert list(grep.matches) == []
    assert list(listed.chunks) == [] and list(listed.not_found) == [f"{indexed}-handbook-0"]


def test_deep_reading_tools(stack, indexed):
    async def read(retrieval: Any, modelhub: Any) -> tuple[Any, Any, Any]:
        grep = await retrieval.GrepChunks(
            pb.GrepChunksRequest(pattern=r"E\d{4}", knowledge_base_ids=[indexed], context_chars=10)
        )
        listed = await retrieval.ListChunks(
            pb.ListChunksRequest(
                selectors=[
                    pb.ChunkSelector(
                        chunk_id=f"{indexed}-handbook-1", neighbours_before=1, neighbours_after=1
                    )
                ],
                include_parent_text=True,
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await retrieval.GrepChunks(pb.GrepChunksRequest(pattern=r"(a)\1", knowledge_base_ids=[indexed]))
        return grep, listed, bad.value

    grep, listed, bad = _call(stack, LOCAL, read)
    assert [m.match for m in grep.matches] == ["E0420"]
    assert [c.position for c in listed.chunks] == [0, 1, 2]
    assert [c.neighbour for c in listed.chunks] == [True, False, True]
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_graph_facts_with_their_supporting_chunks(stack, indexed):
    async def graph(retrieval: Any, modelhub: Any) -> Any:
        await retrieval.IndexGraph(
            pb.IndexGraphRequest(
                knowledge_base_id=indexed,
                document_id=f"{indexed}-manual",
                entities=[
                    pb.EntityInput(name="XJ-2000-B", type="product", source_chunk_ids=[f"{indexed}-manual-0"])
                ],
                relations=[
                    pb.RelationInput(
                        source_name="XJ-2000-B",
                        target_name="six-month service",
                        type="requires",
                        source_chunk_ids=[f"{indexed}-manual-0"],
                    )
                ],
            )
        )
        return await retrieval.QueryKnowledgeGraph(
            pb.QueryKnowledgeGraphRequest(
                knowledge_base_ids=[indexed],
                template=pb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD,
                parameters=pb.GraphQueryParameters(entity_name="xj-2000-b", hops=1),
            )
        )

    answer = _call(stack, LOCAL, graph)
    relation = answer.relations[0]
    assert (relation.source_name, relation.type, relation.target_name) == (
        "XJ-2000-B",
        "requires",
        "six-month service",
    )
    assert relation.supporting_chunks[0].chunk_id == f"{indexed}-manual-0"


def test_deleting_a_document_removes_it_everywhere(stack):
    kb = "kb-e2e-delete"

    async def run(retrieval: Any, modelhub: Any) -> tuple[Any, Any, Any]:
        await _index(retrieval, modelhub, kb)
        deleted = await retrieval.DeleteDocument(
            pb.DeleteDocumentRequest(knowledge_base_id=kb, document_id=f"{kb}-handbook")
        )
        stats = await retrieval.GetIndexStats(pb.GetIndexStatsRequest(knowledge_base_ids=[kb]))
        search = await retrieval.Search(
            pb.SearchRequest(query="annual leave", knowledge_base_ids=[kb], top_k=10)
        )
        return deleted, stats, search

    deleted, stats, search = _call(stack, LOCAL, run)
    assert deleted.deleted_chunk_count == 3
    kb_stats = stats.knowledge_bases[0]
    assert kb_stats.chunk_count == 3
    assert kb_stats.lexical_entry_count == 3
    assert kb_stats.embeddings[0].vector_count == 3
    assert not [r for r in search.results if r.document_id == f"{kb}-handbook"]


def test_each_search_step_is_a_span_with_its_counts(stack, indexed, otlp):
    import secrets

    trace_id = secrets.token_hex(16)
    response = httpx.post(
        f"{stack.gateway_url}/api/v1/knowledge-bases/{indexed}/search",
        json={"query": "annual leave carried over", "mmr_lambda": 0.7},
        headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
        timeout=60,
    )
    assert response.status_code == 200
    wanted = {
        "retrieval.embed_query",
        "retrieval.vector_query",
        "retrieval.bm25_query",
        "retrieval.fusion",
        "retrieval.rerank",
        "retrieval.mmr",
        "retrieval.parent_fetch",
    }

    def complete(found: list[Any]) -> bool:
        names = {s.name for s in found}
        embedded = any(s.attributes.get("gen_ai.operation.name") == "embeddings" for s in found)
        return wanted <= names and embedded

    spans = otlp.wait_for(trace_id, complete, timeout=60)
    steps = {s.name: s for s in spans if s.service == "retrieval" and s.name.startswith("retrieval.")}
    assert wanted <= set(steps), sorted(steps)
    assert steps["retrieval.vector_query"].attributes["ks.result.count"] > 0
    assert steps["retrieval.bm25_query"].attributes["ks.result.count"] > 0
    assert steps["retrieval.rerank"].attributes["ks.rerank.skipped"] == "no rerank model configured"
    # The embedding of the query is modelhub's span, a child of retrieval's.
    embed = [
        s
        for s in spans
        if s.service == "modelhub" and s.attributes.get("gen_ai.operation.name") == "embeddings"
    ]
    assert embed and all(s.trace_id == trace_id for s in embed)
