"""The pure parts of doc_retrieval: fusion, language gating, MMR and synonym expansion."""

import pytest

from knowsphere_contracts.language import detect_language, model_reads
from knowsphere_retrieval.domain.expansion import SynonymTable, parse_variants
from knowsphere_retrieval.domain.fusion import fuse
from knowsphere_retrieval.domain.mmr import jaccard, mmr_order_by
from knowsphere_retrieval.domain.ports import Hit
from knowsphere_retrieval.domain.search import collection_name

VECTOR = [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.1)]
BM25 = [Hit("c", 12.0), Hit("a", 11.0), Hit("d", 2.0)]


def test_rrf_sums_weighted_reciprocal_ranks_and_keeps_every_part():
    fused = fuse(VECTOR, BM25, method="rrf", rrf_k=60, vector_weight=1.0, bm25_weight=1.0)
    by_id = {h.chunk_id: h for h in fused}
    assert fused[0].chunk_id == "a"  # rank 1 + rank 2 beats rank 3 + rank 1
    assert by_id["a"].rrf == pytest.approx(1 / 61 + 1 / 62)
    assert (by_id["a"].vector, by_id["a"].vector_rank, by_id["a"].bm25, by_id["a"].bm25_rank) == (
        0.9,
        1,
        11.0,
        2,
    )
    assert by_id["d"].vector is None and by_id["d"].bm25_rank == 3


def test_convex_fusion_keeps_the_size_of_a_lead():
    fused = fuse(VECTOR, BM25, method="convex", rrf_k=60, vector_weight=0.5, bm25_weight=0.5)
    by_id = {h.chunk_id: h.score for h in fused}
    # a: 0.5*1.0 + 0.5*0.9 ; c: 0.5*0.0 + 0.5*1.0
    assert by_id["a"] == pytest.approx(0.5 + 0.5 * 0.9)
    assert by_id["c"] == pytest.approx(0.5)
    assert [h.chunk_id for h in fused][:2] == ["a", "c"]


def test_a_leg_with_weight_zero_cannot_lift_a_hit():
    fused = fuse(VECTOR, BM25, method="convex", rrf_k=60, vector_weight=0.0, bm25_weight=1.0)
    assert [h.chunk_id for h in fused][:3] == ["c", "a", "d"]


def test_query_language_against_the_models_languages():
    assert detect_language("上海交通大学的节能研究") == "zh"
    assert detect_language("XJ-2000-B 泵的保养周期") == "zh"
    assert detect_language("annual leave policy") == "en"
    assert model_reads(("en",), "en") and not model_reads(("en",), "zh")
    assert model_reads(("multi",), "zh") and model_reads((), "zh")


def test_mmr_trades_relevance_for_novelty():
    texts = [
        frozenset({"leave", "days", "annual"}),
        frozenset({"leave", "days", "annual"}),
        frozenset({"badge"}),
    ]
    relevance = [1.0, 0.99, 0.6]

    def sim(i: int, j: int) -> float:
        return jaccard(texts[i], texts[j])

    assert mmr_order_by(relevance, sim, 1.0, 3) == [0, 1, 2]
    assert mmr_order_by(relevance, sim, 0.5, 3) == [0, 2, 1]
    with pytest.raises(ValueError, match="mmr_lambda"):
        mmr_order_by(relevance, sim, 1.5, 3)


def test_synonym_expansion_replaces_known_terms_only():
    table = SynonymTable([["年假", "带薪休假"], ["annual leave", "holiday entitlement", "PTO"]])
    assert table.expand("how much annual leave do I get") == [
        "how much holiday entitlement do I get",
        "how much PTO do I get",
    ]
    assert table.expand("年假怎么算") == ["带薪休假怎么算"]
    assert table.expand("badge reader error") == []


def test_a_models_alternative_queries_are_read_line_by_line():
    answer = (
        "1. How many holiday days?\n2) XJ-2000 service interval\n\n- annual leave\n• PTO 2025\n"
        "* annual leave\n"
    )
    assert parse_variants(answer, "annual leave", 3) == [
        "How many holiday days?",
        "XJ-2000 service interval",  # list markers go, numbers in the query stay
        "PTO 2025",
    ]
    assert parse_variants("", "q", 3) == []


def test_collection_names_are_safe_and_distinct_per_dimension():
    assert collection_name("builtin-minilm-l6-v2", 384) == "emb_builtin_minilm_l6_v2_384"
    assert collection_name("BAAI/bge-m3", 1024) != collection_name("BAAI/bge-m3", 768)
