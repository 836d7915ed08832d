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

``--chunking fit`` cuts each document with the ingestion chunker into chunks that fit the embedding
model's input window (``fitted_config``; the title as heading path, embedded as ``embedding_text``);
a query's ranked chunks collapse to unique documents (best rank first) before scoring. The default,
``whole``, indexes one chunk per document.

``--compare`` also runs ``bench/plain_hybrid.py`` (bm25s, the embedding model from its package, numpy)
on the same documents and queries, and prints plain vs ours per column with the margin (ours − plain).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import plain_hybrid
from beir_data import BeirDataset, load_beir

from knowsphere.modelhub.v1 import modelhub_pb2 as mh
from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_ingestion.domain.chunking import chunk_document, embedding_text, fitted_config
from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_retrieval.domain.metrics import mean_ndcg_at_k, mean_recall_at_k
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_stack import Stack, StackConfig

KB = "bench-kb"
IDENTITY = Identity("bench", "bench")
MODES = {"bm25": pb.SEARCH_MODE_BM25, "vector": pb.SEARCH_MODE_VECTOR, "hybrid": pb.SEARCH_MODE_HYBRID}
# modelhub model id -> the plain script's --model
PLAIN_MODELS = {"builtin-minilm-l6-v2": "minilm", "builtin-multilingual-e5-small": "e5"}


@dataclass
class Passages:
    """What is indexed, one entry per chunk (parallel lists)."""

    ids: list[str] = field(default_factory=list)
    document_ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # stored and BM25-indexed
    embedded: list[str] = field(default_factory=list)  # what the vector is made from
    headings: list[tuple[str, ...]] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    def add(
        self, id_: str, document_id: str, text: str, embedded: str, heading: tuple[str, ...], pos: int
    ) -> None:
        self.ids.append(id_)
        self.document_ids.append(document_id)
        self.texts.append(text)
        self.embedded.append(embedded)
        self.headings.append(heading)
        self.positions.append(pos)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _passages(data: BeirDataset, doc_ids: list[str], chunking: str, window: int) -> Passages:
    """One chunk per document (``whole``), or the ingestion chunker's chunks fitted to ``window`` tokens."""
    passages = Passages()
    config = fitted_config(window)
    for doc_id in doc_ids:
        doc = data.corpus[doc_id]
        if chunking == "whole":
            text = plain_hybrid.doc_text(doc)
            passages.add(doc_id, doc_id, text, text, (), 0)
            continue
        heading = (doc["title"],) if doc["title"] else ()
        blocks = [Block(kind="heading", text=doc["title"], heading_path=heading, level=1)] if heading else []
        for line in doc["text"].split("\n"):
            if line.strip():
                blocks.append(Block(kind="paragraph", text=line.strip(), heading_path=heading))
        for chunk in chunk_document(doc_id, ParsedDocument(blocks=blocks, title=doc["title"]), config):
            passages.add(
                chunk.id, doc_id, chunk.text, embedding_text(chunk), chunk.heading_path, chunk.position
            )
    return passages


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
    retrieval: Any, model: str, dim: int, passages: Passages, vectors: list[list[float]], batch: int
) -> float:
    started = time.perf_counter()
    for i in range(0, len(passages.ids), batch):
        chunks = [
            pb.Chunk(
                id=passages.ids[j],
                document_id=passages.document_ids[j],
                knowledge_base_id=KB,
                file_name=f"{passages.document_ids[j]}.txt",
                text=passages.texts[j],
                position=passages.positions[j],
                heading_path=passages.headings[j],
                embeddings=[pb.ChunkEmbedding(model_id=model, dimension=dim, values=vectors[j])],
            )
            for j in range(i, min(i + batch, len(passages.ids)))
        ]
        await retrieval.IndexChunks(pb.IndexChunksRequest(chunks=chunks), timeout=600)
    return time.perf_counter() - started


async def _embed_cached(
    modelhub: Any, args: argparse.Namespace, name: str, texts: list[str]
) -> tuple[list[list[float]], float]:
    """Embed the corpus, or reuse vectors a previous run saved with ``--embedding-cache``."""
    # Whole documents keep the name that runs before --chunking saved them under.
    chunking = "" if args.chunking == "whole" else f"-{args.chunking}"
    cache = (
        Path(args.embedding_cache) / f"{name}-{args.model}{chunking}-{len(texts)}.json"
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
        if not text.strip():  # the service refuses an empty query; it finds nothing and counts as 0
            runs[query_id] = []
            continue
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
        # Chunks of one document collapse into it, at its best rank.
        runs[query_id] = list(dict.fromkeys(r.document_id for r in response.results))
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


@contextlib.asynccontextmanager
async def bench_services(args: argparse.Namespace) -> AsyncIterator[tuple[Any, Any, mh.Model]]:
    """modelhub and retrieval started as ``make up`` starts them, on fresh data in a temporary folder,
    with the bench's knowledge base configured for ``--model``; yields their stubs and the model record.
    Every query is embedded afresh (no query-vector cache), so latencies include the embedding."""
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as tmp:
        config = StackConfig.with_free_ports(
            data_dir=Path(tmp),
            services=["modelhub", "retrieval"],
            nats_enabled=False,
            temporal_enabled=False,
            extra_env={
                "OTEL_SDK_DISABLED": "true",
                "KS_RETRIEVAL_GRAPH_ENABLED": "false",
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
                    await retrieval.ConfigureKnowledgeBase(
                        pb.ConfigureKnowledgeBaseRequest(
                            knowledge_base_id=KB,
                            embedding_model_id=args.model,
                            embedding_dimension=model.parameters.embedding_dimension,
                        )
                    )
                    yield modelhub, retrieval, model


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
    plain_model = PLAIN_MODELS.get(args.model, "")
    if args.compare and not plain_model:
        raise SystemExit(
            f"--compare: no plain counterpart of --model {args.model} (known: {', '.join(PLAIN_MODELS)})"
        )
    print(f"{data.name}: {len(doc_ids)} documents, {len(data.queries)} queries", file=sys.stderr)

    async with bench_services(args) as (modelhub, retrieval, model):
        dim = model.parameters.embedding_dimension
        passages = _passages(data, doc_ids, args.chunking, model.parameters.context_window)
        print(f"  {args.chunking}: {len(passages.ids)} chunks", file=sys.stderr)
        vectors, embed_seconds = await _embed_cached(modelhub, args, data.name, passages.embedded)
        index_seconds = await _index(retrieval, args.model, dim, passages, vectors, 256)
        rerank_default = await modelhub.GetDefaultModel(mh.GetDefaultModelRequest(type=mh.MODEL_TYPE_RERANK))
        modes = ["bm25", "vector", "hybrid"]
        if rerank_default.default_model.source != mh.DEFAULT_MODEL_SOURCE_NONE:
            modes.append("hybrid+rerank")
        results: dict[str, dict[str, Any]] = {}
        for mode in modes:
            result = await _run_mode(retrieval, data, mode, mode == "hybrid+rerank", args.top_k)
            result["indexing_chunks_per_s"] = round(len(passages.ids) / index_seconds, 1)
            result["embedding_only_texts_per_s"] = round(len(passages.ids) / embed_seconds, 2)
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
            scale = await _scale(retrieval, data, args, dim, passages, vectors)
            print(json.dumps({"dataset": data.name, "scale": scale}), flush=True)
    compare = None
    if args.compare:
        # After the services stopped, so the plain side does not share the cores with them.
        compare = _compare(args, data, doc_ids, plain_model, results)
    return {
        "dataset": data.name,
        "documents": len(doc_ids),
        "chunking": args.chunking,
        "chunks": len(passages.ids),
        "queries": len(data.queries),
        "model": args.model,
        "settings": dict(item.split("=", 1) for item in args.env),
        "modes": {
            mode: {k: r[k] for k in ("ndcg@10", "recall@100", "p50_ms", "p95_ms", "embed_p50_ms")}
            for mode, r in results.items()
        },
        "indexing_chunks_per_s": round(len(passages.ids) / index_seconds, 1),
        "embedding_only_texts_per_s": round(len(passages.ids) / embed_seconds, 2),
        "scale": scale,
        "compare": compare,
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
    passages: Passages,
    vectors: list[list[float]],
) -> dict[str, Any]:
    rng = random.Random(7)
    extra = args.scale_to - len(passages.ids)
    distractors, extra_vectors = Passages(), []
    for n in range(extra):
        source = rng.randrange(len(passages.ids))
        noisy = [v + rng.gauss(0.0, 0.02) for v in vectors[source]]
        norm = sum(x * x for x in noisy) ** 0.5
        text = passages.texts[source]
        distractors.add(f"distractor-{n}", f"d-distractor-{n}", text, text, passages.headings[source], 0)
        extra_vectors.append([x / norm for x in noisy])
    seconds = await _index(retrieval, args.model, dim, distractors, extra_vectors, 256)
    result = await _run_mode(retrieval, data, "hybrid", False, args.top_k)
    return {
        "chunks": args.scale_to,
        "indexing_chunks_per_s": round(extra / seconds, 1),
        "hybrid_p50_ms": result["p50_ms"],
        "hybrid_p95_ms": result["p95_ms"],
        "embed_p50_ms": result["embed_p50_ms"],
        "hybrid_p95_ms_without_embedding": result["search_p95_ms_without_embedding"],
    }


def _service_setting(args: argparse.Namespace, name: str) -> str:
    """A retrieval setting as the bench's services run it: --env, else the environment, else the default."""
    key = f"KS_RETRIEVAL_{name.upper()}"
    given = dict(item.split("=", 1) for item in args.env)
    return given.get(key) or os.environ.get(key) or str(Settings.model_fields[name].default)


def _compare(
    args: argparse.Namespace,
    data: BeirDataset,
    doc_ids: list[str],
    plain_model: str,
    ours: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The plain script on the same documents and queries; per column plain, ours and ours − plain."""
    cache = plain_hybrid.cache_file(args.embedding_cache, data.name, plain_model, len(doc_ids))
    texts = [plain_hybrid.doc_text(data.corpus[d]) for d in doc_ids]
    plain = plain_hybrid.evaluate(
        plain_hybrid.plain_runs(doc_ids, texts, data.queries, plain_model, cache), data.qrels
    )
    fusion = _service_setting(args, "fusion")
    weights = (
        f"vector {_service_setting(args, 'vector_weight')}, bm25 {_service_setting(args, 'bm25_weight')}"
    )
    ours_by_column = {"bm25": ours["bm25"], "vector": ours["vector"], f"hybrid-{fusion}": ours["hybrid"]}
    print(f"plain: {plain_model}, whole documents; ours: {args.chunking}, hybrid = {fusion} ({weights})")
    print(f"{'column':<14} {'metric':<11} {'plain':>7} {'ours':>7} {'margin':>8}")
    columns: dict[str, Any] = {}
    for column in plain_hybrid.COLUMNS:
        mine = ours_by_column.get(column)
        columns[column] = {}
        for metric in ("ndcg@10", "recall@100"):
            theirs = plain[column][metric]
            ours_value = mine[metric] if mine else None
            margin = round(ours_value - theirs, 4) if ours_value is not None else None
            columns[column][metric] = {"plain": theirs, "ours": ours_value, "margin": margin}
            shown = (
                (f"{ours_value:7.4f}", f"{margin:+8.4f}") if margin is not None else ("      —", "       —")
            )
            print(f"{column:<14} {metric:<11} {theirs:7.4f} {shown[0]} {shown[1]}")
    return {
        "plain_model": plain_model,
        "ours_hybrid": {"fusion": fusion, "weights": weights},
        "columns": columns,
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
        "--chunking",
        choices=["whole", "fit"],
        default="whole",
        help="whole: one chunk per document; fit: ingestion's chunks fitted to the model's input window",
    )
    parser.add_argument(
        "--compare", action="store_true", help="also run bench/plain_hybrid.py on the same selection"
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
