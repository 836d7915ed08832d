"""Reading a dataset in BEIR layout (corpus.jsonl, queries.jsonl, qrels.tsv) for the benchmarks."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BeirDataset:
    name: str
    corpus: dict[str, dict[str, str]]  # id -> {"title", "text"}
    queries: dict[str, str]  # id -> text, only the queries that have judgements
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance}


def load_jsonl(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return dict(qrels)


def load_beir(folder: Path, split: str = "test") -> BeirDataset:
    """Load a BEIR folder; raise ``FileNotFoundError`` naming the missing file.

    ``split`` "train" reads ``queries_train.jsonl`` / ``qrels_train.tsv`` where a dataset has them
    (for tuning without touching the test queries).
    """
    suffix = "" if split == "test" else f"_{split}"
    queries_file, qrels_file = f"queries{suffix}.jsonl", f"qrels{suffix}.tsv"
    for name in ("corpus.jsonl", queries_file, qrels_file):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} not found: a BEIR folder needs corpus.jsonl, queries.jsonl, qrels.tsv"
            )
    corpus = {
        str(row["_id"]): {"title": row.get("title") or "", "text": row.get("text") or ""}
        for row in load_jsonl(folder / "corpus.jsonl")
    }
    judged = load_qrels(folder / qrels_file)
    qrels = {q: {d: r for d, r in docs.items() if r > 0} for q, docs in judged.items()}
    all_queries = {str(row["_id"]): row["text"] for row in load_jsonl(folder / queries_file)}
    queries = {q: all_queries[q] for q in qrels if q in all_queries and qrels[q]}
    return BeirDataset(folder.name, corpus, queries, {q: qrels[q] for q in queries})
