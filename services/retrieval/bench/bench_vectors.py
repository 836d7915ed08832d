"""Micro-benchmark of a vector index: insert throughput, optimize time, filtered query latency, recall.

Inserts N random 384-dimensional points (default 50,000) spread over a few tenants and knowledge
bases into a fresh index (the in-process engine in a temporary directory by default), optimizes it,
then runs 200 queries, each filtered by one tenant and one to three of its knowledge bases, and
prints latency p50/p95 (through the async API, as the service calls it), recall@10 against exact
search (numpy), insert throughput and the longest event-loop stall while optimizing. The last line
is one JSON object.

Points are drawn around random cluster centres by default, which is closer to real embeddings than
uniform noise; ``--distribution uniform`` is the worst case for any HNSW graph (recall drops).

    .venv/bin/python services/retrieval/bench/bench_vectors.py
    .venv/bin/python services/retrieval/bench/bench_vectors.py --backend qdrant-local --points 10000
    QDRANT_URL=http://host:6333 .venv/bin/python services/retrieval/bench/bench_vectors.py \\
        --backend qdrant-server
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.adapters.vector_qdrant import LOCAL_MODE, QdrantServerVectorIndex
from knowsphere_retrieval.domain.ports import Scope, VectorIndex, VectorPoint

COLLECTION = "bench-vectors"
BATCH_SIZE = 512  # the retrieval service's largest IndexChunks batch
CHUNKS_PER_DOCUMENT = 50
CLUSTERS = 500
CLUSTER_SPREAD = 0.35  # noise around a cluster centre, relative to the centre's length
LIMIT = 10
MAX_KNOWLEDGE_BASES_PER_QUERY = 3
STALL_PROBE_SECONDS = 0.01
SEED = 7


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def make_vectors(rng: np.random.Generator, count: int, dim: int, centres: np.ndarray | None) -> np.ndarray:
    if centres is None:
        return rng.standard_normal((count, dim)).astype(np.float32)
    picks = centres[rng.integers(0, len(centres), count)]
    noise = rng.standard_normal((count, dim)).astype(np.float32) * CLUSTER_SPREAD
    return (picks + noise).astype(np.float32)


def open_index(backend: str, data_dir: Path) -> VectorIndex:
    if backend == "edge":
        return EdgeVectorIndex(data_dir, auto_optimize_points=None)
    if backend == "qdrant-local":
        return QdrantServerVectorIndex(LOCAL_MODE)
    url = os.environ.get("QDRANT_URL", "")
    if not url:
        sys.exit("--backend qdrant-server needs QDRANT_URL")
    return QdrantServerVectorIndex(url, os.environ.get("QDRANT_API_KEY") or None)


async def longest_stall_while(awaitable: asyncio.Future[bool] | asyncio.Task[bool]) -> tuple[bool, float]:
    """Run ``awaitable`` and measure the longest time the event loop went without a turn meanwhile."""
    longest = 0.0
    while not awaitable.done():
        before = time.perf_counter()
        await asyncio.sleep(STALL_PROBE_SECONDS)
        longest = max(longest, time.perf_counter() - before - STALL_PROBE_SECONDS)
    return awaitable.result(), longest


async def run(args: argparse.Namespace) -> dict[str, object]:
    rng = np.random.default_rng(SEED)
    centres = (
        rng.standard_normal((CLUSTERS, args.dim)).astype(np.float32)
        if args.distribution == "clustered"
        else None
    )
    vectors = make_vectors(rng, args.points, args.dim, centres)
    tenants = [f"tenant-{t}" for t in range(args.tenants)]
    kb_count = args.tenants * args.kbs_per_tenant
    kb_of = rng.integers(0, kb_count, args.points)  # knowledge base k belongs to tenant k % tenants
    chunk_ids = [f"chunk-{i}" for i in range(args.points)]
    points = [
        VectorPoint(
            chunk_id=chunk_ids[i],
            tenant_id=tenants[kb_of[i] % args.tenants],
            knowledge_base_id=f"kb-{kb_of[i]}",
            document_id=f"doc-{kb_of[i]}-{i // CHUNKS_PER_DOCUMENT}",
            vector=vectors[i].tolist(),
        )
        for i in range(args.points)
    ]

    with tempfile.TemporaryDirectory(prefix="bench-vectors-") as tmp:
        index = open_index(args.backend, Path(tmp))
        collection = f"{COLLECTION}-{uuid.uuid4().hex[:8]}"
        try:
            await index.ensure_collection(collection, args.dim)
            started = time.perf_counter()
            for start in range(0, len(points), BATCH_SIZE):
                await index.upsert(collection, points[start : start + BATCH_SIZE])
            insert_seconds = time.perf_counter() - started

            queries = make_vectors(rng, args.queries, args.dim, centres)
            scopes = []
            for _ in range(args.queries):
                tenant = int(rng.integers(0, args.tenants))
                own = [k for k in range(kb_count) if k % args.tenants == tenant]
                chosen = rng.choice(
                    own, size=int(rng.integers(1, min(MAX_KNOWLEDGE_BASES_PER_QUERY, len(own)) + 1))
                )
                scopes.append(Scope(tenants[tenant], tuple(sorted({f"kb-{k}" for k in chosen}))))
            truth = exact_top(vectors, kb_of, queries, scopes)

            before = await measure_queries(index, collection, queries, scopes, truth)
            optimize_seconds: float | None = None
            stall_ms: float | None = None
            after = before  # a server optimizes by itself; qdrant-client's local mode never does
            if isinstance(index, EdgeVectorIndex):
                started = time.perf_counter()
                _, stall = await longest_stall_while(asyncio.ensure_future(index.optimize(collection)))
                optimize_seconds = time.perf_counter() - started
                stall_ms = stall * 1000
                after = await measure_queries(index, collection, queries, scopes, truth)
        finally:
            await index.drop_collection(collection)
            await index.close()

    return {
        "backend": args.backend,
        "points": args.points,
        "dim": args.dim,
        "distribution": args.distribution,
        "tenants": args.tenants,
        "knowledge_bases": kb_count,
        "queries": args.queries,
        "insert_points_per_s": round(args.points / insert_seconds),
        "optimize_s": None if optimize_seconds is None else round(optimize_seconds, 1),
        "optimize_longest_loop_stall_ms": None if stall_ms is None else round(stall_ms, 1),
        "before_optimize": before,
        "after_optimize": after,
        "p50_ms": after["p50_ms"],
        "p95_ms": after["p95_ms"],
        "recall@10": after["recall@10"],
    }


def exact_top(
    vectors: np.ndarray, kb_of: np.ndarray, queries: np.ndarray, scopes: list[Scope]
) -> list[set[int]]:
    normalised = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    result = []
    for query, scope in zip(queries, scopes, strict=True):
        allowed = np.isin(kb_of, [int(k.removeprefix("kb-")) for k in scope.knowledge_base_ids])
        candidates = np.flatnonzero(allowed)
        scores = normalised[candidates] @ (query / np.linalg.norm(query))
        result.append({int(i) for i in candidates[np.argsort(-scores)[:LIMIT]]})
    return result


async def measure_queries(
    index: VectorIndex, collection: str, queries: np.ndarray, scopes: list[Scope], truth: list[set[int]]
) -> dict[str, float]:
    latencies, recalls = [], []
    for query, scope, expected in zip(queries, scopes, truth, strict=True):
        started = time.perf_counter()
        hits = await index.search(collection, query.tolist(), scope, LIMIT)
        latencies.append((time.perf_counter() - started) * 1000)
        found = {int(h.chunk_id.removeprefix("chunk-")) for h in hits}
        recalls.append(len(found & expected) / max(1, len(expected)))
    return {
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "recall@10": round(statistics.fmean(recalls), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["edge", "qdrant-local", "qdrant-server"], default="edge")
    parser.add_argument("--points", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--kbs-per-tenant", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--distribution", choices=["clustered", "uniform"], default="clustered")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    for phase in ("before_optimize", "after_optimize"):
        print(f"{phase}: {json.dumps(result[phase])}")
    print(
        f"insert {result['insert_points_per_s']} points/s; optimize {result['optimize_s']} s "
        f"(longest event-loop stall {result['optimize_longest_loop_stall_ms']} ms)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
