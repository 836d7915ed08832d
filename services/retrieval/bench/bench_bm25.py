"""BM25 alone on a BEIR-layout dataset, through the embedded tantivy index: quality and latency.

Indexes ``corpus.jsonl`` (title + text) into a fresh ``TantivyLexicalIndex`` in a temporary
directory, runs every query of ``qrels.tsv`` (the test split) and prints one JSON line per analysis
mode with nDCG@10 and Recall@100 (BEIR's way, ``knowsphere_retrieval.domain.metrics``), query
latency p50/p95 and indexing throughput. On a Chinese dataset it runs twice: jieba segmentation
(the product's analysis) and character bigrams, for comparison. The last line is one JSON object
with every mode.

    .venv/bin/python services/retrieval/bench/bench_bm25.py --dataset ../shared/data/beir-scifact
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from beir_data import load_jsonl, load_qrels

from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.domain.analysis import AnalysisConfig, Analyzer, CjkMode
from knowsphere_retrieval.domain.metrics import mean_ndcg_at_k, mean_recall_at_k
from knowsphere_retrieval.domain.ports import LexicalDoc, Scope

TENANT = "bench"
KNOWLEDGE_BASE = "bench"
BATCH_SIZE = 1000
NDCG_AT = 10
RECALL_AT = 100
CJK_SHARE_FOR_CHINESE = 0.3  # a corpus whose sample is at least this share Han is treated as Chinese


def is_chinese(corpus: list[dict[str, str]]) -> bool:
    sample = "".join(doc.get("text", "") for doc in corpus[:200])
    han = sum(1 for ch in sample if "\u4e00" <= ch <= "\u9fff")
    return bool(sample) and han / len(sample) >= CJK_SHARE_FOR_CHINESE


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


async def run_mode(
    corpus: list[dict[str, str]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    cjk_mode: CjkMode,
    title_boost: float,
) -> dict[str, float]:
    analyzer = Analyzer(AnalysisConfig(cjk_mode=cjk_mode))
    analyzer.warm_up()  # jieba's dictionary loads once per process, not per indexing run
    with tempfile.TemporaryDirectory(prefix="bench-bm25-") as data_dir:
        index = TantivyLexicalIndex(data_dir, analyzer=analyzer, title_boost=title_boost)
        try:
            started = time.perf_counter()
            for i in range(0, len(corpus), BATCH_SIZE):
                await index.upsert(
                    [
                        LexicalDoc(
                            chunk_id=doc["_id"],
                            tenant_id=TENANT,
                            knowledge_base_id=KNOWLEDGE_BASE,
                            document_id=doc["_id"],
                            text=doc.get("text", ""),
                            title=doc.get("title", ""),
                        )
                        for doc in corpus[i : i + BATCH_SIZE]
                    ]
                )
            index_seconds = time.perf_counter() - started
            scope = Scope(tenant_id=TENANT, knowledge_base_ids=(KNOWLEDGE_BASE,))
            runs: dict[str, list[str]] = {}
            latencies_ms: list[float] = []
            for query_id in qrels:
                started = time.perf_counter()
                hits = await index.search(queries[query_id], scope, RECALL_AT)
                latencies_ms.append((time.perf_counter() - started) * 1000)
                runs[query_id] = [hit.chunk_id for hit in hits]
        finally:
            await index.close()
    return {
        "ndcg@10": round(mean_ndcg_at_k(runs, qrels, NDCG_AT), 4),
        "recall@100": round(mean_recall_at_k(runs, qrels, RECALL_AT), 4),
        "p50_ms": round(statistics.median(latencies_ms), 3),
        "p95_ms": round(percentile(latencies_ms, 95), 3),
        "index_docs_per_s": round(len(corpus) / index_seconds, 1),
        "queries": len(qrels),
        "docs": len(corpus),
    }


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, required=True, help="a folder in BEIR layout")
    parser.add_argument("--title-boost", type=float, default=None, help="default: the index's default")
    args = parser.parse_args(argv)
    dataset: Path = args.dataset
    for name in ("corpus.jsonl", "queries.jsonl", "qrels.tsv"):
        if not (dataset / name).is_file():
            parser.error(f"--dataset {dataset}: {name} not found (BEIR layout expected)")
    corpus = load_jsonl(dataset / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in load_jsonl(dataset / "queries.jsonl")}
    qrels = load_qrels(dataset / "qrels.tsv")
    missing = [q for q in qrels if q not in queries]
    if missing:
        parser.error(f"--dataset {dataset}: {len(missing)} qrels queries missing from queries.jsonl")
    modes: list[tuple[str, CjkMode]] = [("bm25", "words")]
    if is_chinese(corpus):
        modes = [("bm25-jieba", "words"), ("bm25-bigram", "bigrams")]
    title_boost = args.title_boost
    if title_boost is None:
        from knowsphere_retrieval.adapters.lexical_tantivy import DEFAULT_TITLE_BOOST

        title_boost = DEFAULT_TITLE_BOOST
    results: dict[str, dict[str, float]] = {}
    for mode, cjk_mode in modes:
        results[mode] = await run_mode(corpus, queries, qrels, cjk_mode, title_boost)
        print(json.dumps({"mode": mode, **results[mode]}), flush=True)
    print(
        json.dumps(
            {"dataset": dataset.name, "backend": "tantivy", "title_boost": title_boost, "modes": results}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
