"""Ranking metrics computed the way BEIR reports them (pytrec_eval's ``ndcg_cut`` and ``recall``).

- nDCG@k: graded relevance from the qrels as the gain (not 2^rel − 1), discounted by
  log2(rank + 1) with ranks starting at 1, divided by the DCG of the ideal ordering of *all* judged
  relevant documents; a query without relevant documents scores 0.
- Recall@k: relevant documents (grade > 0) in the top k over all relevant documents.
- MRR@k (per query, the reciprocal rank): 1 / the rank of the first relevant document in the top k;
  0 when none is there.

Averages run over every query that has judgements, so a query that returned nothing counts as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def dcg(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranked list of ids against ``relevance`` (id → grade; missing means 0)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ideal = dcg(sorted((g for g in relevance.values() if g > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(relevance.get(doc_id, 0), 0) for doc_id in _dedupe(ranking)[:k]]) / ideal


def recall_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """Share of the relevant ids (grade > 0) found in the first ``k`` of ``ranking``."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    relevant = {doc_id for doc_id, grade in relevance.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_dedupe(ranking)[:k])) / len(relevant)


def reciprocal_rank_at_k(ranking: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """1 / the rank of the first relevant id (grade > 0) among the first ``k`` of ``ranking``; 0 if none."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    for rank, doc_id in enumerate(_dedupe(ranking)[:k], start=1):
        if relevance.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


def mean_ndcg_at_k(
    runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], k: int
) -> float:
    """Mean nDCG@k over every query in ``qrels``; a query missing from ``runs`` scores 0."""
    if not qrels:
        raise ValueError("qrels is empty: no query to average over")
    return sum(ndcg_at_k(runs.get(q, ()), rel, k) for q, rel in qrels.items()) / len(qrels)


def mean_recall_at_k(
    runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], k: int
) -> float:
    """Mean Recall@k over every query in ``qrels``; a query missing from ``runs`` scores 0."""
    if not qrels:
        raise ValueError("qrels is empty: no query to average over")
    return sum(recall_at_k(runs.get(q, ()), rel, k) for q, rel in qrels.items()) / len(qrels)


def _dedupe(ranking: Sequence[str]) -> list[str]:
    """A ranking lists each id once; a repeated id keeps its first (best) rank."""
    return list(dict.fromkeys(ranking))
