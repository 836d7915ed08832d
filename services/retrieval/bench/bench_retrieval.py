"""Retrieval quality and speed on any BEIR-layout folder, through the real retrieval API.

    make bench-retrieval DATASET=../shared/data/beir-scifact

Starts modelhub and retrieval with the same launcher as ``make up`` (fresh data in a temporary
folder, free ports), configures a fresh knowledge base, embeds the corpus through modelhub's
Embed (timed alone: the embedding-only throughput), indexes it through IndexChunks, then runs every
judged query through Search once per mode. Prints one JSON line per mode (bm25, vector, hybrid, and
hybrid+rerank when a rerank model is configured) with nDCG@10, Recall@100, p50/p95 latency (query
embedding reported apart), and a last line summarising everything.

``--scale-to N`` adds distractor chunks (corpus texts with perturbed copies of their vectors) until
the knowledge base holds N chunks, and reports hybrid latency at that size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from beir_data import BeirDataset, load_beir

from knowsphere.modelhub.v1 import modelhub_pb2 as mh
from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_retrieval.domain.metrics import mean_ndcg_at_k, mean_recall_at_k
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_stack import Stack, StackConfig

KB = "bench-kb"
IDENTITY = Identity("bench", "bench")
MODES = {"bm25": pb.SEARCH_MODE_BM25, "vector": pb.SEARCH_MODE_VECTOR, "hybrid": pb.SEARCH_MODE_HYBRID}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _doc_text(doc: dict[str, str]) -> str:
    return f"{doc['title']}\n{doc['text']}".strip() if doc["title"] else doc["text"]


async def _embed_all(
    modelhub: Any, model: str, texts: list[str], batch: int
) -> tuple[list[list[float]], float]:
    vectors: list[list[float]] = []
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        response = await modelhub.Embed(
            mh.EmbedRequest(
                model_id=model, texts=texts[i : i + batch], input_type=mh.EMBED_INPUT_TYPE_DOCUMENT
            ),
            timeout=600,
        )
        vectors.extend(list(e.values) for e in response.embeddings)
        done = min(i + batch, len(texts))
        if done % (batch * 20) == 0 or done == len(texts):
            rate = done / (time.perf_counter() - started)
            print(f"  embedded {done}/{len(texts)} ({rate:.1f} texts/s)", file=sys.stderr, flush=True)
    return vectors, time.perf_counter() - started


async def _index(
    retrieval: Any,
    model: str,
    dim: int,
    ids: list[str],
    texts: list[str],
    vectors: list[list[float]],
    batch: int,
    document_prefix: str = "",
) -> float:
    started = time.perf_counter()
    for i in range(0, len(ids), batch):
        chunks = [
            pb.Chunk(
                id=ids[j],
                document_id=f"{document_prefix}{ids[j]}",
                knowledge_base_id=KB,
                file_name=f"{ids[j]}.txt",
                text=texts[j],
                position=0,
                embeddings=[pb.ChunkEmbedding(model_id=model, dimension=dim, values=vectors[j])],
            )
            for j in range(i, min(i + batch, len(ids)))
        ]
        await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=chunks), timeout=600)
    return time.perf_counter() - started


async def _embed_cached(
    modelhub: Any, args: argparse.Namespace, name: str, texts: list[str]
) -> tuple[list[list[float]], float]:
    """Embed the corpus, or reuse vectors a previous run saved with ``--embedding-cache``."""
    cache = (
        Path(args.embedding_cache) / f"{name}-{args.model}-{len(texts)}.json"
        if args.embedding_cache
        else None
    )
    if cache is not None and cache.exists():
        saved = json.loads(cache.read_text())
        print(f"  reusing embeddings from {cache}", file=sys.stderr)
        return saved["vectors"], saved["seconds"]
    vectors, seconds = await _embed_all(modelhub, args.model, texts, args.batch)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"vectors": vectors, "seconds": seconds}))
    return vectors, seconds


async def _run_mode(
    retrieval: Any,
    data: BeirDataset,
    mode: str,
    rerank: bool,
    top_k: int,
    weights: tuple[float, float] | None = None,
) -> dict[str, Any]:
    runs: dict[str, list[str]] = {}
    latencies: list[float] = []
    embeds: list[float] = []
    weights_used: list[float] = []
    for query_id, text in data.queries.items():
        options = pb.SearchOptions(
            mode=MODES["hybrid" if mode.startswith("hybrid") else mode],  # type: ignore[arg-type]
            rerank_enabled=rerank,
            expansion_enabled=False,
            include_parent=False,
        )
        if weights is not None:
            options.vector_weight, options.bm25_weight = weights
        started = time.perf_counter()
        response = await retrieval.Search(
            pb.SearchRequest(query=text, knowledge_base_ids=[KB], top_k=top_k, options=options), timeout=120
        )
        latencies.append((time.perf_counter() - started) * 1000)
        embeds.append(response.stats.embed_duration.ToNanoseconds() / 1e6)
        weights_used.append(response.stats.vector_weight_used)
        runs[query_id] = [r.document_id for r in response.results]
    return {
        "mode": mode,
        "ndcg@10": round(mean_ndcg_at_k(runs, data.qrels, 10), 4),
        "recall@100": round(mean_recall_at_k(runs, data.qrels, 100), 4),
        "p50_ms": round(_pct(latencies, 0.5), 2),
        "p95_ms": round(_pct(latencies, 0.95), 2),
        "embed_p50_ms": round(_pct(embeds, 0.5), 2),
        "search_p95_ms_without_embedding": round(
            _pct([a - b for a, b in zip(latencies, embeds, strict=True)], 0.95), 2
        ),
        "queries": len(runs),
        "vector_weight_used_mean": round(statistics.fmean(weights_used), 3) if weights_used else 0.0,
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    data = load_beir(Path(args.dataset), args.split)
    doc_ids = list(data.corpus)
    if args.limit_docs:
        judged = {d for docs in data.qrels.values() for d in docs}
        doc_ids = [d for d in doc_ids if d in judged] + [d for d in doc_ids if d not in judged]
        doc_ids = doc_ids[: args.limit_docs]
    if args.queries:
        kept = list(data.queries)[: args.queries]
        data = BeirDataset(
            data.name, data.corpus, {q: data.queries[q] for q in kept}, {q: data.qrels[q] for q in kept}
        )
    texts = [_doc_text(data.corpus[d]) for d in doc_ids]
    print(f"{data.name}: {len(doc_ids)} documents, {len(data.queries)} queries", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="ks-bench-") as tmp:
        config = StackConfig.with_free_ports(
            data_dir=Path(tmp),
            services=["modelhub", "retrieval"],
            nats_enabled=False,
            temporal_enabled=False,
            extra_env={
                "OTEL_SDK_DISABLED": "true",
                "KS_RETRIEVAL_GRAPH_ENABLED": "false",
                # Every query is embedded afresh in every mode, so latencies include it.
                "KS_RETRIEVAL_QUERY_VECTOR_CACHE_SIZE": "0",
                **dict(item.split("=", 1) for item in args.env),
            },
        )
        with Stack(config) as stack:
            stack.sign_as_local_client()
            async with (
                open_channel(
                    stack.grpc_addr("modelhub"), services=[CONTRACTS["modelhub"].descriptor]
                ) as m_chan,
                open_channel(
                    stack.grpc_addr("retrieval"), services=[CONTRACTS["retrieval"].descriptor]
                ) as r_chan,
            ):
                modelhub = CONTRACTS["modelhub"].stub(m_chan)
                retrieval = CONTRACTS["retrieval"].stub(r_chan)
                with bound_identity(IDENTITY):
                    model = (await modelhub.GetModel(mh.GetModelRequest(model_id=args.model))).model
                    dim = model.parameters.embedding_dimension
                    await retrieval.ConfigureKnowledgeBase(
                        pb.ConfigureKnowledgeBaseRequest(
                            knowledge_base_id=KB, embedding_model_id=args.model, embedding_dimension=dim
                        )
                    )
                    vectors, embed_seconds = await _embed_cached(modelhub, args, data.name, texts)
                    index_seconds = await _index(retrieval, args.model, dim, doc_ids, texts, vectors, 256)
                    rerank_default = await modelhub.GetDefaultModel(
                        mh.GetDefaultModelRequest(type=mh.MODEL_TYPE_RERANK)
                    )
                    modes = ["bm25", "vector", "hybrid"]
                    if rerank_default.default_model.source != mh.DEFAULT_MODEL_SOURCE_NONE:
                        modes.append("hybrid+rerank")
                    results: dict[str, dict[str, Any]] = {}
                    for mode in modes:
                        result = await _run_mode(retrieval, data, mode, mode == "hybrid+rerank", args.top_k)
                        result["indexing_chunks_per_s"] = round(len(doc_ids) / index_seconds, 1)
                        result["embedding_only_texts_per_s"] = round(len(doc_ids) / embed_seconds, 2)
                        results[mode] = result
                        print(json.dumps({"dataset": data.name, **result}), flush=True)
                    for pair in args.weights:
                        vector_weight, bm25_weight = (float(x) for x in pair.split(":"))
                        result = await _run_mode(
                            retrieval, data, "hybrid", False, args.top_k, (vector_weight, bm25_weight)
                        )
                        result["mode"] = f"hybrid[vector={vector_weight},bm25={bm25_weight}]"
                        results[result["mode"]] = result
                        print(json.dumps({"dataset": data.name, **result}), flush=True)
                    scale: dict[str, Any] | None = None
                    if args.scale_to and args.scale_to > len(doc_ids):
                        scale = await _scale(retrieval, data, args, dim, doc_ids, texts, vectors)
                        print(json.dumps({"dataset": data.name, "scale": scale}), flush=True)
    return {
        "dataset": data.name,
        "documents": len(doc_ids),
        "queries": len(data.queries),
        "model": args.model,
        "settings": dict(item.split("=", 1) for item in args.env),
        "modes": {
            mode: {k: r[k] for k in ("ndcg@10", "recall@100", "p50_ms", "p95_ms", "embed_p50_ms")}
            for mode, r in results.items()
        },
        "indexing_chunks_per_s": round(len(doc_ids) / index_seconds, 1),
        "embedding_only_texts_per_s": round(len(doc_ids) / embed_seconds, 2),
        "scale": scale,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }


async def _scale(
    retrieval: Any,
    data: BeirDataset,
    args: argparse.Namespace,
    dim: int,
    doc_ids: list[str],
    texts: list[str],
    vectors: list[list[float]],
) -> dict[str, Any]:
    rng = random.Random(7)
    extra = args.scale_to - len(doc_ids)
    ids, extra_texts, extra_vectors = [], [], []
    for n in range(extra):
        source = rng.randrange(len(doc_ids))
        noisy = [v + rng.gauss(0.0, 0.02) for v in vectors[source]]
        norm = sum(x * x for x in noisy) ** 0.5
        ids.append(f"distractor-{n}")
        extra_texts.append(texts[source])
        extra_vectors.append([x / norm for x in noisy])
    seconds = await _index(retrieval, args.model, dim, ids, extra_texts, extra_vectors, 256, "d-")
    result = await _run_mode(retrieval, data, "hybrid", False, args.top_k)
    return {
        "chunks": args.scale_to,
        "indexing_chunks_per_s": round(extra / seconds, 1),
        "hybrid_p50_ms": result["p50_ms"],
        "hybrid_p95_ms": result["p95_ms"],
        "embed_p50_ms": result["embed_p50_ms"],
        "hybrid_p95_ms_without_embedding": result["search_p95_ms_without_embedding"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", required=True, help="folder in BEIR layout")
    parser.add_argument("--model", default="builtin-minilm-l6-v2", help="modelhub embedding model id")
    parser.add_argument("--batch", type=int, default=32, help="texts per Embed call")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument(
        "--limit-docs", type=int, default=0, help="index only this many documents (judged first)"
    )
    parser.add_argument("--queries", type=int, default=0, help="run only the first N judged queries")
    parser.add_argument(
        "--scale-to", type=int, default=0, help="add distractors up to N chunks, report latency"
    )
    parser.add_argument(
        "--split", default="test", help="query split: test, or train where the dataset has one"
    )
    parser.add_argument(
        "--weights", action="append", default=[], metavar="V:B", help="also run hybrid with these leg weights"
    )
    parser.add_argument(
        "--embedding-cache", default="", help="folder to save / reuse corpus vectors between runs"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra service setting, e.g. KS_RETRIEVAL_FUSION=convex (repeatable)",
    )
    args = parser.parse_args()
    summary = asyncio.run(bench(args))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
