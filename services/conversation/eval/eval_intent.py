"""Query understanding alone, over the labelled intent set: accuracy and a confusion matrix.

Each row of ``intents.jsonl`` (query, earlier turns, attachments) goes through the same intent
decision the conversation graph makes — modelhub's ``Decide`` with the tenant's default chat model,
or the model named with ``--model-id`` — against a running modelhub (``make up`` starts one; its
address is ``--modelhub``). With no chat model configured, or with ``--rules``, the rules the graph
falls back to decide instead, and the output says so.

Usage: ``make eval-intent`` (``EVAL_ARGS="--modelhub 127.0.0.1:7416 --tenant local"``).
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from knowsphere.conversation.v1.conversation_enums import Intent
from knowsphere_clients import ModelHubClient
from knowsphere_clients.errors import ServiceError
from knowsphere_clients.modelhub import is_model_missing
from knowsphere_conversation.domain.graph import decide_intent
from knowsphere_conversation.domain.intents import rule_intent
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel

SET = Path(__file__).resolve().parent / "intents.jsonl"
LABELS = [intent.value for intent in Intent]


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def classify(rows: list[dict[str, Any]], args: argparse.Namespace) -> tuple[list[str], str]:
    """The predicted intent of every row, and how they were decided (logprobs / json / rules)."""

    def by_rules() -> list[str]:
        return [
            rule_intent(
                r["query"],
                has_image=r["has_image"],
                has_document=r.get("has_document", False),
                has_history=bool(r.get("history")),
            ).value
            for r in rows
        ]

    if args.rules:
        return by_rules(), "rules"
    predicted: list[str] = []
    methods: Counter[str] = Counter()
    async with open_channel(args.modelhub) as channel:
        models = ModelHubClient(channel)
        with bound_identity(Identity(args.tenant, args.user)):
            for row in rows:
                history = [(turn["role"], turn["content"]) for turn in row.get("history", [])]
                try:
                    intent, method, _ = await decide_intent(
                        models,
                        args.model_id,
                        history,
                        row["query"],
                        has_image=row["has_image"],
                        has_document=row.get("has_document", False),
                    )
                except ServiceError as error:
                    if is_model_missing(error):
                        print("no chat model configured: the rules decide", file=sys.stderr)
                        return by_rules(), "rules (no chat model configured)"
                    print(f"{row['id']}: {error}", file=sys.stderr)
                    intent, method = Intent.KB_SEARCH, "failed"
                predicted.append(intent.value)
                methods[method] += 1
    return predicted, ", ".join(f"{m} {n}" for m, n in methods.most_common())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--set", type=Path, default=SET, help="the labelled set (JSON lines)")
    parser.add_argument("--modelhub", default="127.0.0.1:7416", help="modelhub's gRPC address")
    parser.add_argument("--tenant", default="local")
    parser.add_argument("--user", default="local")
    parser.add_argument("--model-id", default="", help="empty: the tenant's default chat model")
    parser.add_argument("--rules", action="store_true", help="decide by the rules only (no model)")
    args = parser.parse_args()
    rows = load(args.set)
    started = time.perf_counter()
    predicted, method = asyncio.run(classify(rows, args))
    seconds = time.perf_counter() - started
    expected = [r["intent"] for r in rows]
    confusion = Counter(zip(expected, predicted, strict=True))
    correct = sum(e == p for e, p in zip(expected, predicted, strict=True))
    per_language = {
        language: round(
            sum(r["intent"] == p for r, p in zip(rows, predicted, strict=True) if r["language"] == language)
            / max(1, sum(r["language"] == language for r in rows)),
            4,
        )
        for language in ("zh", "en")
    }
    width = max(len(label) for label in LABELS)
    print(
        f"{'expected / predicted':>{width}}  " + " ".join(f"{label[:8]:>8}" for label in LABELS),
        file=sys.stderr,
    )
    for label in LABELS:
        cells = " ".join(f"{confusion[(label, other)]:>8}" for other in LABELS)
        print(f"{label:>{width}}  {cells}", file=sys.stderr)
    print(
        f"accuracy {correct}/{len(rows)} = {correct / len(rows):.1%} by {method} in {seconds:.1f} s",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                "rows": len(rows),
                "correct": correct,
                "accuracy": round(correct / len(rows), 4),
                "accuracy_by_language": per_language,
                "method": method,
                "seconds": round(seconds, 2),
                "confusion": {f"{e}->{p}": n for (e, p), n in sorted(confusion.items())},
            },
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    main()
