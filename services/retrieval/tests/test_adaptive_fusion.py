"""Adaptive fusion: per query, the leg that is surer of its answer gets more of the weight.

Pure checks on :func:`adaptive_weights` and :func:`fuse`, then the searcher end to end over legs that
return scripted hits, so the weights it reports and the order it returns can be seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_retrieval.api.convert import search_settings
from knowsphere_retrieval.domain.fusion import LegWeights, adaptive_weights, fuse
from knowsphere_retrieval.domain.ports import Hit, StoredChunk
from knowsphere_retrieval.domain.search import KnowledgeBaseIndex, Searcher, SearchSettings
from knowsphere_retrieval.settings import Settings

# One clear answer far above a flat tail, and a leg whose top scores are all alike.
PEAKED = [Hit("p1", 0.95)] + [Hit(f"p{i}", 0.30 - 0.001 * i) for i in range(2, 30)]
FLAT = [Hit(f"f{i}", 12.0 - 0.01 * i) for i in range(1, 30)]


def weights(vector: Sequence[Hit], bm25: Sequence[Hit], vector_weight: float = 0.9, bm25_weight: float = 1.1):
    return adaptive_weights(
        vector, bm25, vector_weight=vector_weight, bm25_weight=bm25_weight, strength=0.5, depth=20
    )


def test_a_confident_leg_gets_more_weight_than_a_flat_one():
    vector_sure = weights(PEAKED, FLAT)
    bm25_sure = weights(FLAT, [Hit(h.chunk_id, h.score * 40) for h in PEAKED])
    assert vector_sure.vector > 0.9 and vector_sure.bm25 < 1.1
    assert bm25_sure.bm25 > 1.1 and bm25_sure.vector < 0.9


def test_equally_sure_legs_keep_the_configured_weights():
    # The same shape on another scale: cosine similarities against BM25 scores.
    same = weights(PEAKED, [Hit(h.chunk_id, h.score * 25) for h in PEAKED])
    assert same.vector == pytest.approx(0.9) and same.bm25 == pytest.approx(1.1)


@pytest.mark.parametrize(
    ("vector", "bm25"),
    [
        (PEAKED, FLAT),
        ([Hit("a", 1e300), Hit("b", -1e300)], FLAT),  # absurd scores
        ([Hit("a", 0.5)], FLAT),  # a single hit says nothing about its leg
        ([Hit("a", 0.5), Hit("b", 0.5)], [Hit("c", 3.0), Hit("d", 3.0)]),  # ties everywhere
        (PEAKED, [Hit(f"n{i}", -float(i)) for i in range(30)]),  # negative scores
    ],
)
def test_weights_are_finite_and_share_the_configured_total(vector: list[Hit], bm25: list[Hit]):
    used = adaptive_weights(vector, bm25, vector_weight=0.9, bm25_weight=1.1, strength=50.0, depth=20)
    assert math.isfinite(used.vector) and math.isfinite(used.bm25)
    assert 0.0 <= used.vector <= 2.0 and 0.0 <= used.bm25 <= 2.0
    assert used.vector + used.bm25 == pytest.approx(2.0)


def test_a_muted_or_empty_leg_is_left_as_configured():
    # A vector leg muted for the query's language stays muted however peaked its scores are.
    assert weights(PEAKED, FLAT, vector_weight=0.0) == LegWeights(0.0, 1.1)
    assert weights([], FLAT) == LegWeights(0.9, 1.1)
    assert weights(PEAKED, []) == LegWeights(0.9, 1.1)


def test_strength_zero_fuses_exactly_as_convex():
    flat = adaptive_weights(PEAKED, FLAT, vector_weight=0.9, bm25_weight=1.1, strength=0.0, depth=20)
    adaptive = fuse(
        PEAKED, FLAT, method="adaptive", rrf_k=60, vector_weight=flat.vector, bm25_weight=flat.bm25
    )
    convex = fuse(PEAKED, FLAT, method="convex", rrf_k=60, vector_weight=0.9, bm25_weight=1.1)
    assert [(h.chunk_id, h.score) for h in adaptive] == [(h.chunk_id, h.score) for h in convex]


# --- through the searcher ------------------------------------------------------------------------

TENANT = "acme"
KB = KnowledgeBaseIndex("kb", "toy-model", 4, ("en",))


class Legs:
    """A vector index, lexical index, chunk store and modelhub in one, answering with scripted hits."""

    def __init__(self, vector: Sequence[Hit], bm25: Sequence[Hit]) -> None:
        self._vector, self._bm25 = list(vector), list(bm25)

    async def search(self, *args: object) -> list[Hit]:
        # VectorIndex.search(collection, vector, scope, limit); LexicalIndex.search(query, scope, limit).
        hits = self._vector if len(args) == 4 else self._bm25
        return hits[: int(args[-1])]  # type: ignore[call-overload]

    async def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        return [StoredChunk(c, tenant_id, "kb", f"doc-{c}", "f.txt", c, "", 0) for c in chunk_ids]

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]


def searcher(legs: Legs) -> Searcher:
    return Searcher(vectors=legs, lexical=legs, chunks=legs, models=legs)  # type: ignore[arg-type]


def settings(fusion: str) -> SearchSettings:
    return SearchSettings(
        fusion=fusion,  # type: ignore[arg-type]
        top_k=5,
        vector_weight=0.9,
        bm25_weight=1.1,
        adaptive_strength=0.5,
        adaptive_depth=20,
        expansion_enabled=False,
        rerank_enabled=False,
        include_parent=False,
    )


async def test_the_searcher_reports_and_uses_the_weights_of_this_query():
    # BM25 is flat but slightly prefers f1; the vector leg is sure of p1. Convex keeps BM25's top;
    # adaptive trusts the sure leg for this query and says so in the stats.
    legs = Legs(PEAKED, FLAT)
    convex = await searcher(legs).search(TENANT, "annual leave", [KB], settings("convex"))
    adaptive = await searcher(legs).search(TENANT, "annual leave", [KB], settings("adaptive"))
    assert (convex.stats.vector_weight_used, convex.stats.bm25_weight_used) == (0.9, 1.1)
    assert adaptive.stats.vector_weight_used > 0.9 and 0.0 < adaptive.stats.bm25_weight_used < 1.1
    assert convex.results[0].chunk.chunk_id == "f1"
    assert adaptive.results[0].chunk.chunk_id == "p1"


async def test_the_order_is_the_same_on_every_run():
    # Ties between the legs' hits are broken the same way each time.
    legs = Legs([Hit(f"d{i}", 0.5) for i in range(10)], [Hit(f"d{9 - i}", 2.0) for i in range(10)])
    runs = [
        [
            r.chunk.chunk_id
            for r in (await searcher(legs).search(TENANT, "q", [KB], settings("adaptive"))).results
        ]
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 5


@pytest.mark.parametrize("mode", [SearchMode.VECTOR, SearchMode.BM25])
async def test_a_single_leg_mode_is_the_same_under_adaptive_fusion(mode: SearchMode):
    legs = Legs(PEAKED, FLAT)
    convex = await searcher(legs).search(TENANT, "q", [KB], settings("convex"), mode=mode)
    adaptive = await searcher(legs).search(TENANT, "q", [KB], settings("adaptive"), mode=mode)
    assert [(r.chunk.chunk_id, r.score) for r in adaptive.results] == [
        (r.chunk.chunk_id, r.score) for r in convex.results
    ]
    assert (adaptive.stats.vector_weight_used, adaptive.stats.bm25_weight_used) == (
        convex.stats.vector_weight_used,
        convex.stats.bm25_weight_used,
    )


async def test_a_query_the_vector_model_cannot_read_stays_on_bm25_alone():
    legs = Legs(PEAKED, FLAT)
    adaptive = await searcher(legs).search(TENANT, "上海交通大学的节能研究", [KB], settings("adaptive"))
    assert adaptive.stats.vector_weight_used == 0.0
    assert [r.chunk.chunk_id for r in adaptive.results] == [h.chunk_id for h in FLAT[:5]]


def test_the_server_settings_reach_each_search():
    server = Settings(
        data_dir=".", modelhub_addr="x:1", fusion="adaptive", adaptive_strength=2.5, adaptive_depth=7
    )
    used = search_settings(pb.SearchRequest(query="q", options=pb.SearchOptions(vector_weight=0.3)), server)
    assert (used.fusion, used.adaptive_strength, used.adaptive_depth) == ("adaptive", 2.5, 7)
    assert used.vector_weight == 0.3  # a request's weights are where the adaptive shift starts
