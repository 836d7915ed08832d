"""Multi-hop retrieval with and without the second hop, through the real retrieval API.

    make bench-multihop DATASET=../shared/data/hotpotqa-100

Starts modelhub and retrieval as ``make bench-retrieval`` does, indexes a BEIR-layout folder whose
qrels mark *every* passage a question needs (HotpotQA: both supporting paragraphs), then runs each
question twice, one hop and two hops (``SearchOptions.second_hop``), alternating so both see the same
machine load. Reports per variant: the share of questions with *all* their judged passages in the top
10 (the figure multi-hop needs: one passage of two does not answer), mean per-passage recall@10,
nDCG@10, p50/p95 latency, and how many follow-up queries the second hop ran. The last line is one
JSON object.

Hybrid search without rerank or expansion, so the figures show the hops alone; ``--rerank`` adds
rerank when a rerank model is configured, ``--env KEY=VALUE`` sets any retrieval setting (the second
hop's limits: ``KS_RETRIEVAL_SECOND_HOP_*``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from beir_data import BeirDataset, load_beir
from bench_retrieval import KB, _embed_cached, _index, _passages, _pct, bench_services

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_retrieval.domain.metrics import mean_ndcg_at_k, mean_recall_at_k

CUTOFF = 10
VARIANTS = {"one_hop": False, "two_hops": True}


def all_supporting_recall(runs: dict[str, list[str]], qrels: dict[str, dict[str, int]], k: int) -> float:
    """Share of questions whose judged passages are *all* in the top ``k``."""
    found = [set(qrels[q]) <= set(runs.get(q, [])[:k]) for q in qrels]
    return sum(found) / len(found) if found else 0.0


async def _search(retrieval: Any, text: str, second_hop: bool, rerank: bool) -> tuple[list[str], float, int]:
    options = pb.SearchOptions(
        mode=pb.SEARCH_MODE_HYBRID,
        rerank_enabled=rerank,
        expansion_enabled=False,
        include_parent=False,
        second_hop=second_hop,
    )
    started = time.perf_counter()
    response = await retrieval.Search(
        pb.SearchRequest(query=text, knowledge_base_ids=[KB], top_k=CUTOFF, options=options), timeout=120
    )
    milliseconds = (time.perf_counter() - started) * 1000
    if second_hop and not response.stats.second_hop:
        raise RuntimeError("the second hop was asked for and did not run")
    documents = [r.document_id for r in response.results]
    return documents, milliseconds, len(response.stats.second_hop_queries)


async def _run(retrieval: Any, data: BeirDataset, rerank: bool) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, list[str]]] = {name: {} for name in VARIANTS}
    latencies: dict[str, list[float]] = {name: [] for name in VARIANTS}
    follow_ups: list[int] = []
    first = next(iter(data.queries.values()))
    for second_hop in VARIANTS.values():  # warm both paths (jieba, caches) before timing
        await _search(retrieval, first, second_hop, rerank)
    for query_id, text in data.queries.items():
        for name, second_hop in VARIANTS.items():
            documents, milliseconds, queries = await _search(retrieval, text, second_hop, rerank)
            runs[name][query_id] = documents
            latencies[name].append(milliseconds)
            if second_hop:
                follow_ups.append(queries)
    results: dict[str, dict[str, Any]] = {}
    for name in VARIANTS:
        results[name] = {
            "all_supporting_recall@10": round(all_supporting_recall(runs[name], data.qrels, CUTOFF), 4),
            "passage_recall@10": round(mean_recall_at_k(runs[name], data.qrels, CUTOFF), 4),
            "ndcg@10": round(mean_ndcg_at_k(runs[name], data.qrels, CUTOFF), 4),
            "p50_ms": round(_pct(latencies[name], 0.5), 2),
            "p95_ms": round(_pct(latencies[name], 0.95), 2),
        }
    results["two_hops"]["follow_up_queries_mean"] = (
        round(statistics.fmean(follow_ups), 2) if follow_ups else 0
    )
    return results


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    data = load_beir(Path(args.dataset), args.split)
    if args.queries:
        kept = list(data.queries)[: args.queries]
        data = BeirDataset(
            data.name, data.corpus, {q: data.queries[q] for q in kept}, {q: data.qrels[q] for q in kept}
        )
    doc_ids = list(data.corpus)
    passages = _passages(data, doc_ids, args.chunking, 0)  # one chunk per passage: title and text
    print(f"{data.name}: {len(doc_ids)} passages, {len(data.queries)} questions", file=sys.stderr)
    async with bench_services(args) as (modelhub, retrieval, model):
        dim = model.parameters.embedding_dimension
        vectors, _ = await _embed_cached(modelhub, args, data.name, passages.embedded)
        await _index(retrieval, args.model, dim, passages, vectors, 256)
        results = await _run(retrieval, data, args.rerank)
    for name, result in results.items():
        print(json.dumps({"dataset": data.name, "variant": name, **result}), flush=True)
    one, two = results["one_hop"], results["two_hops"]
    return {
        "dataset": data.name,
        "passages": len(doc_ids),
        "questions": len(data.queries),
        "model": args.model,
        "rerank": args.rerank,
        "settings": dict(item.split("=", 1) for item in args.env),
        "variants": results,
        "all_supporting_recall@10_gain": round(
            two["all_supporting_recall@10"] - one["all_supporting_recall@10"], 4
        ),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dataset", required=True, help="folder in BEIR layout, qrels = every needed passage"
    )
    parser.add_argument("--model", default="builtin-minilm-l6-v2", help="modelhub embedding model id")
    parser.add_argument("--batch", type=int, default=32, help="texts per Embed call")
    parser.add_argument("--queries", type=int, default=0, help="run only the first N questions")
    parser.add_argument("--split", default="test", help="query split: test, or train where there is one")
    parser.add_argument("--rerank", action="store_true", help="rerank too (needs a rerank model)")
    parser.add_argument(
        "--embedding-cache", default="", help="folder to save / reuse corpus vectors between runs"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra retrieval setting, e.g. KS_RETRIEVAL_SECOND_HOP_QUERIES=2 (repeatable)",
    )
    parser.set_defaults(chunking="whole")  # what the shared helpers index and name the cache by
    args = parser.parse_args()
    summary = asyncio.run(bench(args))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
