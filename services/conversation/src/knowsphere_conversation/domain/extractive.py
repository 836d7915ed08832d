"""An answer without a chat model: the most relevant sentences of the top passages, each cited.

Sentences are scored by how many of the question's terms they contain (words for Latin scripts,
character bigrams for Chinese), weighted by the rank of their passage; the best few are quoted in
passage order with the ``[[cN]]`` of their passage. Nothing is invented: every sentence is copied from
a passage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_SENTENCE = re.compile(r"[^。！？!?\n.]+(?:[。！？!?]|\.(?=\s|$)|$)", re.MULTILINE)
_WORD = re.compile(r"[a-z0-9]+", re.IGNORECASE)
_HAN = re.compile(r"[\u4e00-\u9fff]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "is",
        "are",
        "was",
        "were",
        "be",
        "what",
        "which",
        "who",
        "how",
        "why",
        "when",
        "where",
        "does",
        "do",
        "did",
        "with",
        "by",
        "from",
        "at",
        "as",
        "that",
        "this",
        "it",
        "its",
        "about",
        "can",
        "could",
        "should",
        "would",
    ]
)


@dataclass(frozen=True)
class Passage:
    handle: str
    text: str


def _terms(text: str) -> set[str]:
    terms = {w.lower() for w in _WORD.findall(text) if w.lower() not in _STOP and len(w) > 1}
    for run in _HAN.findall(text):
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
        if len(run) == 1:
            terms.add(run)
    return terms


def extract_answer(question: str, passages: Sequence[Passage], *, max_sentences: int, max_chars: int) -> str:
    """Up to ``max_sentences`` sentences (about ``max_chars`` characters), each followed by its
    passage's citation; empty when no passage shares a term with the question."""
    wanted = _terms(question)
    scored: list[tuple[float, int, int, str, str]] = []
    for rank, passage in enumerate(passages):
        for position, match in enumerate(_SENTENCE.finditer(passage.text)):
            sentence = " ".join(match.group(0).split())
            if len(sentence) < 8:
                continue
            overlap = len(wanted & _terms(sentence))
            if overlap:
                scored.append((overlap / (1 + 0.25 * rank), rank, position, sentence, passage.handle))
    if not scored and passages:
        # No shared term (e.g. a paraphrase): the opening of the best passage still says what matched.
        first = next(_SENTENCE.finditer(passages[0].text), None)
        if first is not None:
            scored.append((0.0, 0, 0, " ".join(first.group(0).split()), passages[0].handle))
    best = sorted(scored, key=lambda item: -item[0])[:max_sentences]
    lines: list[str] = []
    used = 0
    for _, _, _, sentence, handle in sorted(best, key=lambda item: (item[1], item[2])):
        if lines and used + len(sentence) > max_chars:
            break
        lines.append(f"{sentence} [[{handle}]]")
        used += len(sentence)
    return "\n".join(f"- {line}" for line in lines)


__all__ = ["Passage", "extract_answer"]
