"""The labelled intent set (``eval/intents.jsonl``) that ``make eval-intent`` scores query understanding on.

It must cover every intent of the contract in both languages, with enough rows per intent for a
per-intent accuracy to mean something, and every row must be usable as written (see eval/README.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from knowsphere.conversation.v1.conversation_enums import Intent

INTENT_SET = Path(__file__).resolve().parents[1] / "eval" / "intents.jsonl"
MIN_ROWS = 150
MIN_PER_INTENT = 12
LANGUAGES = frozenset({"zh", "en"})
HISTORY_ROLES = frozenset({"user", "assistant"})
REQUIRED_FIELDS = {
    "id": str,
    "query": str,
    "intent": str,
    "language": str,
    "has_image": bool,
    "has_document": bool,
    "knowledge_base_selected": bool,
    "web_enabled": bool,
}
OPTIONAL_FIELDS = {"history": list, "note": str}
CJK = re.compile(r"[\u4e00-\u9fff]")


def _load() -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(INTENT_SET.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            pytest.fail(f"{INTENT_SET.name} line {number} is not JSON: {exc}")
        assert isinstance(row, dict), f"line {number} is not a JSON object"
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return _load()


def test_every_line_has_the_documented_fields_with_their_types(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        where = f"row {row.get('id', row)!r}"
        for name, kind in REQUIRED_FIELDS.items():
            assert isinstance(row.get(name), kind), f"{where}: {name} must be a {kind.__name__}"
        for name, kind in OPTIONAL_FIELDS.items():
            if name in row:
                assert isinstance(row[name], kind), f"{where}: {name} must be a {kind.__name__}"
        unknown = set(row) - REQUIRED_FIELDS.keys() - OPTIONAL_FIELDS.keys()
        assert not unknown, f"{where}: unknown fields {sorted(unknown)}"
        assert row["language"] in LANGUAGES, f"{where}: language must be one of {sorted(LANGUAGES)}"
        for turn in row.get("history", []):
            assert set(turn) == {"role", "content"}, f"{where}: a history turn has role and content"
            assert turn["role"] in HISTORY_ROLES, f"{where}: history role {turn['role']!r}"
            assert turn["content"].strip(), f"{where}: empty history turn"


def test_the_set_has_at_least_the_minimum_number_of_rows(rows: list[dict[str, Any]]) -> None:
    assert len(rows) >= MIN_ROWS


def test_every_label_is_an_intent_of_the_contract(rows: list[dict[str, Any]]) -> None:
    known = {intent.value for intent in Intent}
    assert {row["intent"] for row in rows} <= known


@pytest.mark.parametrize("intent", list(Intent), ids=lambda intent: intent.value)
def test_every_intent_has_enough_rows_in_both_languages(rows: list[dict[str, Any]], intent: Intent) -> None:
    labelled = [row for row in rows if row["intent"] == intent.value]
    assert len(labelled) >= MIN_PER_INTENT, f"{intent.value}: {len(labelled)} rows"
    assert {row["language"] for row in labelled} == LANGUAGES


def test_ids_are_unique(rows: list[dict[str, Any]]) -> None:
    repeated = [id_ for id_, n in Counter(row["id"] for row in rows).items() if n > 1]
    assert not repeated


def test_no_query_appears_twice(rows: list[dict[str, Any]]) -> None:
    normalised = Counter(" ".join(row["query"].split()).casefold() for row in rows)
    assert not [query for query, n in normalised.items() if n > 1]


def test_language_matches_the_query_text(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        if not row["query"].strip():
            continue
        has_cjk = bool(CJK.search(row["query"]))
        assert has_cjk == (row["language"] == "zh"), f"{row['id']}: language {row['language']!r}"


def test_rows_satisfy_their_label_definition(rows: list[dict[str, Any]]) -> None:
    """What the definitions in eval/README.md require of the message itself."""
    for row in rows:
        where = row["id"]
        if row["intent"] == Intent.IMAGE_ONLY.value:
            assert row["has_image"], f"{where}: image_only without an image"
        if row["intent"] == Intent.DOC_ONLY.value:
            assert row["has_document"], f"{where}: doc_only without an attached document"
        if row["intent"] == Intent.CLARIFICATION.value:
            assert any(turn["role"] == "assistant" for turn in row.get("history", [])), (
                f"{where}: clarification of an earlier answer needs that answer in history"
            )
        if not row["query"].strip():
            assert row["has_image"] or row["has_document"], f"{where}: empty query with nothing attached"


def test_the_rules_used_without_a_model_get_most_of_the_set_right() -> None:
    """Without a chat model the rules route the turn: they must get the obvious cases (attachments,
    greetings, web and summary cues) right, measured over the whole labelled set by the eval script."""
    script = Path(__file__).resolve().parents[1] / "eval" / "eval_intent.py"
    done = subprocess.run(
        [sys.executable, str(script), "--rules"], capture_output=True, text=True, check=True
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["method"] == "rules" and figures["rows"] >= 150
    assert figures["accuracy"] >= 0.75, figures["confusion"]
    assert figures["confusion"].get("image_only->image_only", 0) >= 12
    assert figures["confusion"].get("doc_only->doc_only", 0) >= 12
