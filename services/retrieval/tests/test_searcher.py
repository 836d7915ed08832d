"""doc_retrieval end to end in-process: real embedded indexes, scripted embedding/rerank/multi-query.

Checks the order of the spec: expansion only when hits are too few, parents travel once, rerank
reorders (and is reported as skipped when unavailable), MMR applies when asked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.ports import LexicalDoc, StoredChunk, VectorPoint
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.domain.search import (
    KnowledgeBaseIndex,
    RerankUnavailable,
    Searcher,
    SearchSettings,
)

TENANT = "acme"
KB = KnowledgeBaseIndex("kb", "toy-model", 8, ("en",))
TEXTS = {
    "c1": ("p1", "Employees receive 25 days of paid annual leave."),
    "c2": ("p1", "Annual leave can be carried over until March."),
    "c3": ("p2", "The badge reader shows error E0420 when offline."),
    "c4": ("p3", "Holiday entitlement for part-time staff is pro rata."),
    "c5": ("p4", "Employees receive 25 days of paid annual leave every year."),
}


def toy_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.lower().encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:8]]


@pytest.fixture
async def parts(tmp_path: Path):  # type: ignore[no-untyped-def]
    chunks = SqlChunkStore(f"sqlite+aiosqlite:///{tmp_path}/chunks.db")
    await chunks.open()
    vectors = EdgeVectorIndex(tmp_path / "vectors")
    lexical = TantivyLexicalIndex(tmp_path / "lexical")
    stored = [
        StoredChunk(cid, TENANT, "kb", f"doc-{parent}", "handbook.pdf", text, parent, i)
        for i, (cid, (parent, text)) in enumerate(TEXTS.items())
    ]
    await chunks.put_chunks(
        stored, {"p1": "PARENT ONE", "p2": "PARENT TWO", "p3": "PARENT THREE", "p4": "PARENT FOUR"}
    )
    await vectors.ensure_collection(KB.collection, 8)
    await vectors.upsert(
        KB.collection,
        [VectorPoint(c.chunk_id, TENANT, "kb", c.document_id, toy_vector(c.text)) for c in stored],
    )
    await lexical.upsert([LexicalDoc(c.chunk_id, TENANT, "kb", c.document_id, c.text) for c in stored])
    yield chunks, vectors, lexical
    await lexical.close()
    await vectors.close()
    await chunks.close()


def make_searcher(parts, **calls) -> Searcher:  # type: ignore[no-untyped-def]
    chunks, vectors, lexical = parts

    async def embed(model_id: str, query: str) -> list[float]:
        return toy_vector(query)

    return Searcher(vectors=vectors, lexical=lexical, chunks=chunks, embed=embed, **calls)


async def test_expansion_runs_only_when_hits_are_too_few(parts):
    asked: list[str] = []

    async def multi_query(query: str) -> list[str]:
        asked.append(query)
        return ["holiday entitlement"]

    searcher = make_searcher(parts, multi_query=multi_query)
    settings = SearchSettings(expansion_method="llm", expansion_min_hits=2, rerank_enabled=False)
    few = await searcher.search(TENANT, "pro rata", [KB], settings, mode="bm25")
    assert few.stats.expanded and few.stats.expansion_queries == ["holiday entitlement"]
    assert asked == ["pro rata"]
    many = await searcher.search(TENANT, "annual leave", [KB], settings, mode="bm25")
    assert not many.stats.expanded and asked == ["pro rata"]


async def test_parents_travel_once_and_rerank_reorders(parts):
    async def rerank(model_id: str, query: str, texts: Sequence[str]) -> list[float]:
        return [1.0 if "March" in t else 0.1 for t in texts]

    searcher = make_searcher(parts, rerank=rerank)
    outcome = await searcher.search(TENANT, "annual leave", [KB], SearchSettings(top_k=3))
    assert outcome.stats.reranked
    assert outcome.results[0].chunk.chunk_id == "c2"  # the reranker's favourite, not BM25's
    with_p1 = [r for r in outcome.results if r.chunk.parent_id == "p1"]
    assert [r.parent_text for r in with_p1] == ["PARENT ONE", ""]


async def test_rerank_unavailable_is_reported_not_fatal(parts):
    async def rerank(model_id: str, query: str, texts: Sequence[str]) -> list[float]:
        raise RerankUnavailable("no rerank model configured")

    outcome = await make_searcher(parts, rerank=rerank).search(TENANT, "annual leave", [KB], SearchSettings())
    assert not outcome.stats.reranked
    assert outcome.stats.rerank_skipped_reason == "no rerank model configured"
    assert outcome.results


async def test_mmr_pushes_a_near_duplicate_down(parts):
    searcher = make_searcher(parts)
    query = "employees receive paid annual leave days"
    plain = await searcher.search(
        TENANT, query, [KB], SearchSettings(rerank_enabled=False, top_k=3), mode="bm25"
    )
    diverse = await searcher.search(
        TENANT, query, [KB], SearchSettings(rerank_enabled=False, top_k=3, mmr_lambda=0.3), mode="bm25"
    )
    assert diverse.stats.mmr_applied and not plain.stats.mmr_applied
    # c1 and c5 say the same thing: plain relevance keeps both on top, MMR does not.
    assert {r.chunk.chunk_id for r in plain.results[:2]} == {"c1", "c5"}
    assert {r.chunk.chunk_id for r in diverse.results[:2]} != {"c1", "c5"}


async def test_other_tenants_and_unknown_scopes_find_nothing(parts):
    outcome = await make_searcher(parts).search("intruder", "annual leave", [KB], SearchSettings())
    assert outcome.results == []
