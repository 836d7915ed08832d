"""Maximal marginal relevance: trade relevance against redundancy among the results."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Overlap of two term sets, the redundancy measure when no vectors are at hand."""
    return len(a & b) / len(a | b) if a and b else 0.0


def mmr_order(
    relevance: Sequence[float], vectors: Sequence[Sequence[float] | None], lambda_: float, limit: int
) -> list[int]:
    """Indices in MMR order. ``lambda_`` = 1 keeps pure relevance order; items without a vector are
    treated as unlike everything (they keep their relevance)."""
    return mmr_order_by(relevance, lambda i, j: _pair_cosine(vectors, i, j), lambda_, limit)


def _pair_cosine(vectors: Sequence[Sequence[float] | None], i: int, j: int) -> float:
    a, b = vectors[i], vectors[j]
    return _cosine(a, b) if a is not None and b is not None else 0.0


def mmr_order_by(
    relevance: Sequence[float], similarity: Callable[[int, int], float], lambda_: float, limit: int
) -> list[int]:
    """MMR with any pairwise similarity (cosine of vectors, Jaccard of terms …)."""
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"mmr_lambda must be within [0, 1], got {lambda_}")
    remaining = list(range(len(relevance)))
    top = max(relevance) if relevance else 1.0
    scale = top if top > 0 else 1.0
    chosen: list[int] = []
    while remaining and len(chosen) < limit:
        best, best_value = remaining[0], -math.inf
        for index in remaining:
            redundancy = max((similarity(index, other) for other in chosen), default=0.0)
            value = lambda_ * (relevance[index] / scale) - (1.0 - lambda_) * redundancy
            if value > best_value:
                best, best_value = index, value
        chosen.append(best)
        remaining.remove(best)
    return chosen
