"""nDCG@k, Recall@k and MRR@k against values worked out by hand (BEIR's definitions)."""

from __future__ import annotations

import math

import pytest

from knowsphere_retrieval.domain.metrics import (
    mean_ndcg_at_k,
    mean_recall_at_k,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank_at_k,
)

# Judged: a is highly relevant (2), c and e relevant (1); the system ranked b, a, c, d.
QRELS = {"a": 2, "c": 1, "e": 1, "x": 0}
RANKING = ["b", "a", "c", "d"]


def test_ndcg_uses_graded_gain_and_log2_discount() -> None:
    # DCG  = 0/log2(2) + 2/log2(3) + 1/log2(4) + 0/log2(5) = 1.261860 + 0.5      = 1.761860
    # IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4)             = 2 + 0.630930 + 0.5  = 3.130930
    assert ndcg_at_k(RANKING, QRELS, 10) == pytest.approx(1.761860 / 3.130930, abs=1e-6)
    assert ndcg_at_k(RANKING, QRELS, 10) == pytest.approx(0.562728, abs=1e-6)
    # At k=2 both lists are cut: DCG = 2/log2(3) = 1.261860, IDCG = 2 + 1/log2(3) = 2.630930.
    assert ndcg_at_k(RANKING, QRELS, 2) == pytest.approx(0.479625, abs=1e-6)


def test_ndcg_bounds_and_edge_cases() -> None:
    assert ndcg_at_k(["a", "c", "e"], QRELS, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["b", "d"], QRELS, 10) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0  # nothing relevant judged
    assert ndcg_at_k(["a", "a", "c"], QRELS, 10) == ndcg_at_k(["a", "c"], QRELS, 10)  # repeats count once
    with pytest.raises(ValueError, match="k must be at least 1"):
        ndcg_at_k(RANKING, QRELS, 0)


def test_recall_counts_relevant_ids_in_the_top_k() -> None:
    assert recall_at_k(RANKING, QRELS, 100) == pytest.approx(2 / 3)
    assert recall_at_k(RANKING, QRELS, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKING, QRELS, 1) == 0.0


def test_reciprocal_rank_is_one_over_the_rank_of_the_first_relevant_id() -> None:
    assert reciprocal_rank_at_k(RANKING, QRELS, 10) == pytest.approx(1 / 2)  # a, at rank 2
    assert reciprocal_rank_at_k(["x", "b", "d", "c"], QRELS, 10) == pytest.approx(1 / 4)  # x is judged 0
    assert reciprocal_rank_at_k(["b", "b", "a"], QRELS, 10) == pytest.approx(1 / 2)  # repeats count once
    assert reciprocal_rank_at_k(RANKING, QRELS, 1) == 0.0  # outside the cut
    assert reciprocal_rank_at_k([], QRELS, 10) == 0.0
    with pytest.raises(ValueError, match="k must be at least 1"):
        reciprocal_rank_at_k(RANKING, QRELS, 0)


def test_means_count_a_query_without_results_as_zero() -> None:
    qrels = {"q1": QRELS, "q2": {"z": 1}}
    runs = {"q1": RANKING}
    assert mean_ndcg_at_k(runs, qrels, 10) == pytest.approx(0.562728 / 2, abs=1e-6)
    assert mean_recall_at_k(runs, qrels, 100) == pytest.approx((2 / 3) / 2)
    assert math.isclose(mean_ndcg_at_k({"q2": ["z"]}, {"q2": {"z": 1}}, 10), 1.0)
    with pytest.raises(ValueError, match="qrels is empty"):
        mean_ndcg_at_k(runs, {}, 10)
