"""Fusing the vector and BM25 legs, and deciding how much each leg is trusted for a query.

Two fusions are offered, both weighted per leg:

- **RRF** (reciprocal rank fusion): ``Σ w_leg / (k + rank_leg)``, rank-only and robust.
- **Convex**: ``Σ w_leg · minmax(score_leg)``, which keeps how *much* better a top hit is; it wins
  when both legs are good (measured by ``make bench-retrieval``).

A leg that cannot be good for a query is down-weighted before fusing: an embedding model does not
read a language it was not trained on (the built-in MiniLM scores "hello world" against "你好，世界"
at 0.19), so for a Chinese query an English-only model's vector leg gets ``weak_leg_weight``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from knowsphere_retrieval.domain.ports import Hit

FusionMethod = Literal["rrf", "convex"]


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


def fuse(
    vector_hits: Sequence[Hit],
    bm25_hits: Sequence[Hit],
    *,
    method: FusionMethod,
    rrf_k: int,
    vector_weight: float,
    bm25_weight: float,
) -> list[FusedHit]:
    """Fused hits, best first. Every hit keeps its per-leg score and rank and its RRF score."""
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
