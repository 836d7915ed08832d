"""Fusing the vector and BM25 legs, and deciding how much each leg is trusted for a query.

Three fusions are offered, all weighted per leg:

- **RRF** (reciprocal rank fusion): ``Σ w_leg / (k + rank_leg)``, rank-only and robust.
- **Convex**: ``Σ w_leg · minmax(score_leg)``, which keeps how *much* better a top hit is; it wins
  when both legs are good (measured by ``make bench-retrieval``).
- **Adaptive**: convex fusion whose weights move per query towards the leg that is surer of its
  answer, read from the legs' own scores for that query (see :func:`adaptive_weights`).

A leg that cannot be good for a query is down-weighted before fusing: an embedding model does not
read a language it was not trained on (the built-in MiniLM scores "hello world" against "你好，世界"
at 0.19), so for a Chinese query an English-only model's vector leg gets ``weak_leg_weight``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from knowsphere_retrieval.domain.ports import Hit

FusionMethod = Literal["rrf", "convex", "adaptive"]


@dataclass
class FusedHit:
    chunk_id: str
    score: float
    rrf: float
    vector: float | None = None
    bm25: float | None = None
    vector_rank: int | None = None
    bm25_rank: int | None = None
    sources: set[str] = field(default_factory=set)


def _minmax(hits: Sequence[Hit]) -> dict[str, float]:
    if not hits:
        return {}
    scores = [h.score for h in hits]
    low, high = min(scores), max(scores)
    if high - low < 1e-12:
        return {h.chunk_id: 1.0 for h in hits}
    return {h.chunk_id: (h.score - low) / (high - low) for h in hits}


@dataclass(frozen=True)
class LegWeights:
    """The weights one query's legs are fused with."""

    vector: float
    bm25: float


def leg_confidence(hits: Sequence[Hit], depth: int) -> float:
    """How much a leg's top ``depth`` scores concentrate on a few hits, in ``[0, 1]``.

    One minus the normalised entropy of the scores measured above the ``depth``-th one
    (``p_i = (s_i − s_depth) / Σ (s_j − s_depth)``, ``1 − H(p) / log depth``). Scale-free, so a cosine
    leg and a BM25 leg compare: a leg that found one clear answer scores near 1, a leg whose top scores
    fall off evenly (it found nothing in particular) scores low.
    """
    scores = sorted((h.score for h in hits), reverse=True)[:depth]
    if len(scores) < 2:
        return 0.0
    floor = scores[-1]
    total = sum(s - floor for s in scores)
    if not math.isfinite(total) or total <= 0:
        return 0.0
    entropy = -sum(p * math.log(p) for p in ((s - floor) / total for s in scores) if p > 0)
    return max(0.0, 1.0 - entropy / math.log(len(scores)))


def adaptive_weights(
    vector_hits: Sequence[Hit],
    bm25_hits: Sequence[Hit],
    *,
    vector_weight: float,
    bm25_weight: float,
    strength: float,
    depth: int,
) -> LegWeights:
    """The weights for this query: the configured ones, moved towards the leg that is surer.

    The vector leg's share ``w_v / (w_v + w_b)`` is shifted on the logit scale by
    ``strength · (confidence_v − confidence_b)``; the sum of the weights is kept, so each weight stays
    within ``[0, vector_weight + bm25_weight]``. A leg that is muted (weight 0) or found nothing keeps
    the configured weights: there is nothing to compare.
    """
    total = vector_weight + bm25_weight
    if vector_weight <= 0 or bm25_weight <= 0 or not vector_hits or not bm25_hits:
        return LegWeights(vector_weight, bm25_weight)
    shift = strength * (leg_confidence(vector_hits, depth) - leg_confidence(bm25_hits, depth))
    if shift == 0:
        return LegWeights(vector_weight, bm25_weight)  # exactly the configured ones, not a rounding of them
    logit = math.log(vector_weight / bm25_weight) + shift
    # Numerically safe logistic: a huge shift gives a share of 0 or 1, never an overflow.
    share = 1.0 / (1.0 + math.exp(-logit)) if logit >= 0 else math.exp(logit) / (1.0 + math.exp(logit))
    return LegWeights(total * share, total * (1.0 - share))


def fuse(
    vector_hits: Sequence[Hit],
    bm25_hits: Sequence[Hit],
    *,
    method: FusionMethod,
    rrf_k: int,
    vector_weight: float,
    bm25_weight: float,
) -> list[FusedHit]:
    """Fused hits, best first. Every hit keeps its per-leg score and rank and its RRF score.

    ``adaptive`` fuses as ``convex`` does, with the weights :func:`adaptive_weights` gave this query.
    """
    fused: dict[str, FusedHit] = {}
    for leg, hits, weight in (("vector", vector_hits, vector_weight), ("bm25", bm25_hits, bm25_weight)):
        for rank, hit in enumerate(hits, start=1):
            item = fused.setdefault(hit.chunk_id, FusedHit(chunk_id=hit.chunk_id, score=0.0, rrf=0.0))
            item.rrf += weight / (rrf_k + rank)
            item.sources.add(leg)
            if leg == "vector":
                item.vector, item.vector_rank = hit.score, rank
            else:
                item.bm25, item.bm25_rank = hit.score, rank
    if method == "rrf":
        for item in fused.values():
            item.score = item.rrf
    else:
        vector_norm = _minmax(vector_hits)
        bm25_norm = _minmax(bm25_hits)
        for item in fused.values():
            item.score = vector_weight * vector_norm.get(item.chunk_id, 0.0) + bm25_weight * bm25_norm.get(
                item.chunk_id, 0.0
            )
    # Ties (same fused score) are broken by RRF, then by id, so results are deterministic.
    return sorted(fused.values(), key=lambda h: (-h.score, -h.rrf, h.chunk_id))
