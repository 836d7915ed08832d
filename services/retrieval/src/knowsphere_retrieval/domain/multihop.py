"""The second hop of doc_retrieval: bridge entities read from the first hop's passages.

A multi-hop question ("the university where X's advisor studied") names the first fact's subject but
not the second's: one query finds the passage about X and misses the one about the advisor. The
bridge (the advisor's name) is written in the first passage. This module finds such bridges with a
lexical extractor — no model — and turns them into follow-up queries; :mod:`.search` runs them
through the same recall and merges their hits under the first hop's.

What counts as a candidate bridge, each kind with a weight fixed on principle (how surely the kind
names a thing), not fitted to a benchmark:

- a *title* — the passage's heading, or its first line when that line is short and is not a sentence
  (documents and encyclopaedia paragraphs open with their subject): weight 2;
- a *quoted name* — "Blue Hawaii", “Kind of Blue” (with a capital: a quoted lower-case phrase is a
  gloss): weight 1.5;
- a *capitalised span* — words starting with a capital, joined by lower-case connectors (University
  of Oxford, Lord of the Rings) or numbers (Apollo 11): weight 1.5 for several words, 1 for one; a
  single word opening a sentence is kept only if the passages never write it in lower case (so
  "Despite" and "Born" are not names);
- a *number with a unit* (1,200 km, 25 %, 3 million): weight 0.5 — it bridges rarely;
- in Chinese, a noun by jieba's part-of-speech tags: names of people, places, organisations and
  other proper nouns (nr, ns, nt, nz) weight 1.5, other nouns of two characters or more weight 0.5,
  so a term mentioned often wins over one mentioned once.

A candidate scores the sum, over its mentions, of its kind's weight times the passage's weight
``1 / first-hop position`` (the best passage counts most). Candidates whose words the query already
holds are dropped; a one-word candidate inside a longer one (Nolan in Christopher Nolan) adds its
score to the longer one.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import jieba
import jieba.posseg

from knowsphere_retrieval.domain.analysis import CHINESE_STOP_WORDS, ENGLISH_STOP_WORDS
from knowsphere_retrieval.domain.fusion import FusedHit

TITLE_WEIGHT: Final = 2.0
QUOTED_WEIGHT: Final = 1.5
MULTI_WORD_WEIGHT: Final = 1.5
SINGLE_WORD_WEIGHT: Final = 1.0
MEASURE_WEIGHT: Final = 0.5
CHINESE_NAME_WEIGHT: Final = 1.5
CHINESE_NOUN_WEIGHT: Final = 0.5

MAX_SPAN_WORDS: Final = 6  # a capitalised span longer than this is a headline, not a name
MAX_CONNECTORS: Final = 2  # lower-case words in a row inside a name ("of the")
MAX_TITLE_WORDS: Final = 10
MAX_QUOTED_WORDS: Final = 8
MIN_CHINESE_CHARS: Final = 2

# Lower-case words that may join the capitalised words of one name.
_CONNECTORS: Final = frozenset("of the de del della da di du von van der la le & for on in y".split())  # noqa: SIM905
_CHINESE_NAME_TAGS: Final = frozenset({"nr", "ns", "nt", "nz", "nrt", "nrfg"})
_UNITS: Final = (
    "%|percent|per cent|km|kilometres|kilometers|miles?|m|metres|meters|feet|ft|kg|tonnes|tons|pounds|"
    "lb|°C|°F|million|billion|thousand|years?|days?|hours?|minutes?|seconds?|km/h|mph|MW|GW|kW|"
    "people|inhabitants|residents|episodes|seats|votes|copies|USD|EUR|dollars|euros|"
    "公里|千米|米|公斤|吨|万|亿|年|个|人|元|美元"
)
_MEASURE = re.compile(rf"(?<![\w.])([$€£¥]?\d[\d,]*(?:\.\d+)?\s?(?:{_UNITS}))(?![A-Za-z])")
_TOKEN = re.compile(r"[^\W_][\w'’\-]*|[.!?;:\n,()\[\]\"“”]")
_QUOTED = re.compile(r"[\"“”„«»]([^\"“”„«»\n]{2,80})[\"“”„«»]")
_PARENTHESES = re.compile(r"\s*\([^)]*\)")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = frozenset({".", "!", "?", ";", ":", "\n"})
_POSSESSIVE = re.compile(r"['’]s$")


@dataclass(frozen=True)
class Passage:
    """A first-hop passage: its text and the headings it sits under."""

    text: str
    headings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bridge:
    """A candidate bridge entity and its score."""

    text: str
    score: float


def follow_up_queries(query: str, bridges: Sequence[Bridge]) -> list[str]:
    """One follow-up per bridge: the question with the bridge added, so the question's other words
    still say what is asked about the bridge."""
    return [f"{query} {bridge.text}" for bridge in bridges]


class BridgeExtractor:
    """Lexical bridge extraction over English and Chinese passages; safe to share between threads."""

    def __init__(self) -> None:
        self._posseg: jieba.posseg.POSTokenizer | None = None
        self._lock = threading.Lock()

    def bridges(self, query: str, passages: Sequence[Passage], limit: int) -> list[Bridge]:
        """The best ``limit`` bridges named in ``passages`` (best first) that ``query`` does not name."""
        if limit <= 0 or not passages:
            return []
        lower_words = {w for p in passages for w in _WORD.findall(p.text) if w.islower()}
        scores: dict[str, float] = {}
        shown: dict[str, str] = {}  # normalised key -> how the candidate is written
        for position, passage in enumerate(passages, start=1):
            weight = 1.0 / position
            for text, kind_weight in self._candidates(passage, lower_words):
                key = _key(text)
                if not key:
                    continue
                scores[key] = scores.get(key, 0.0) + weight * kind_weight
                shown.setdefault(key, text)
        query_key = _key(query)
        query_words = set(query_key.split())
        kept = {
            key: score
            for key, score in scores.items()
            if not _named_by(key, query_key, query_words) and not _only_stop_words(key)
        }
        _fold_single_words(kept)
        ranked = sorted(kept.items(), key=lambda item: (-item[1], item[0]))
        return [Bridge(shown[key], round(score, 4)) for key, score in ranked[:limit]]

    def _candidates(self, passage: Passage, lower_words: set[str]) -> Iterator[tuple[str, float]]:
        for title in _titles(passage):
            yield title, TITLE_WEIGHT
        for match in _QUOTED.finditer(passage.text):
            quoted = match.group(1).strip(" ,.;:")
            # A quoted name has a capital (or is Chinese); a quoted lower-case phrase is a gloss.
            named = any(w[:1].isupper() for w in quoted.split()) or _HAN.search(quoted)
            if named and 0 < len(quoted.split()) <= MAX_QUOTED_WORDS:
                yield quoted, QUOTED_WEIGHT
        for span, words in _capitalised_spans(passage.text, lower_words):
            yield span, MULTI_WORD_WEIGHT if words > 1 else SINGLE_WORD_WEIGHT
        for match in _MEASURE.finditer(passage.text):
            yield match.group(1), MEASURE_WEIGHT
        if _HAN.search(passage.text):
            yield from self._chinese_nouns(passage.text)

    def _chinese_nouns(self, text: str) -> Iterator[tuple[str, float]]:
        for word, tag in self._segmenter().cut(text):
            if len(word) < MIN_CHINESE_CHARS or not _HAN.search(word) or word in CHINESE_STOP_WORDS:
                continue
            if tag in _CHINESE_NAME_TAGS:
                yield word, CHINESE_NAME_WEIGHT
            elif tag.startswith("n"):
                yield word, CHINESE_NOUN_WEIGHT

    def _segmenter(self) -> jieba.posseg.POSTokenizer:
        """jieba's tagger, its dictionary loaded once, on the first Chinese passage (about a second)."""
        if self._posseg is None:
            with self._lock:
                if self._posseg is None:
                    jieba.setLogLevel(logging.WARNING)
                    self._posseg = jieba.posseg.POSTokenizer(jieba.Tokenizer())
        return self._posseg


def _titles(passage: Passage) -> Iterator[str]:
    candidates = list(passage.headings[-1:])
    first_line, newline, _ = passage.text.strip().partition("\n")
    # A short first line that does not end a sentence is the passage's title.
    if (
        newline
        and len(first_line.split()) <= MAX_TITLE_WORDS
        and not first_line.rstrip().endswith((".", "。"))
    ):
        candidates.append(first_line)
    for title in candidates:
        cleaned = _PARENTHESES.sub("", title).strip(" :：-")  # "Blue Velvet (film)" -> "Blue Velvet"
        if cleaned:
            yield cleaned


def _capitalised_spans(text: str, lower_words: set[str]) -> Iterator[tuple[str, int]]:
    """Runs of capitalised words (with connectors and numbers inside), and their word counts."""
    tokens = [m.group() for m in _TOKEN.finditer(text)]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _capitalised(token):
            i += 1
            continue
        sentence_start = i == 0 or tokens[i - 1] in _SENTENCE_END
        span = [token]
        j = i + 1
        while j < len(tokens) and len(span) < MAX_SPAN_WORDS:
            word = tokens[j]
            if _capitalised(word) or (word.isdigit() and _capitalised(span[-1])):
                span.append(word)
                j += 1
                continue
            # Connectors join only when a capitalised word follows them (Lord of the Rings).
            end = j
            while end < len(tokens) and end - j < MAX_CONNECTORS and tokens[end] in _CONNECTORS:
                end += 1
            if end == j or end >= len(tokens) or not _capitalised(tokens[end]):
                break
            span.extend(tokens[j:end])
            j = end
        i = j
        while span and span[0].lower() in ENGLISH_STOP_WORDS:
            span, sentence_start = span[1:], False
        while span and span[-1].lower() in ENGLISH_STOP_WORDS | _CONNECTORS:
            span = span[:-1]
        if not span:
            continue
        # A lone word opening a sentence is a name only if the passages never write it in lower case.
        if len(span) == 1 and sentence_start and span[0].lower() in lower_words:
            continue
        yield " ".join(_POSSESSIVE.sub("", w) for w in span), len(span)


def _capitalised(token: str) -> bool:
    return token[:1].isupper() and token not in _SENTENCE_END


def _key(text: str) -> str:
    """Case, width, possessives and punctuation folded: how candidates and the query are compared."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return " ".join(_POSSESSIVE.sub("", w) for w in _WORD.findall(folded))


def _named_by(key: str, query_key: str, query_words: set[str]) -> bool:
    """Whether the query already names the candidate (every content word of it, or the Chinese term)."""
    if _HAN.search(key):
        return key.replace(" ", "") in query_key.replace(" ", "")
    words = [w for w in key.split() if w not in ENGLISH_STOP_WORDS]
    return all(w in query_words for w in words)


def _only_stop_words(key: str) -> bool:
    return all(w in ENGLISH_STOP_WORDS or w in CHINESE_STOP_WORDS for w in key.split())


def _fold_single_words(scores: dict[str, float]) -> None:
    """A one-word candidate that is part of a longer one adds its score to the best such one."""
    longer = [key for key in scores if " " in key]
    for key in [k for k in scores if " " not in k]:
        holders = [other for other in longer if key in other.split()]
        if holders:
            best = max(holders, key=lambda other: (scores[other], other))
            scores[best] += scores.pop(key)


def merge_hops(
    first: Sequence[FusedHit],
    follow_ups: Iterable[Sequence[FusedHit]],
    *,
    keep: int,
    follow_up_weight: float,
    rrf_k: int,
) -> list[FusedHit]:
    """The first hop's hits with the follow-ups' merged in by rank, the first hop dominant.

    The first ``keep`` hits of the first hop (the passages the bridges were read from) keep their
    places. The rest are ordered by weighted reciprocal rank: weight 1 in the first hop,
    ``follow_up_weight`` in each follow-up (whose lists leave out the kept hits, which they repeat).
    Each hit keeps its first-hop scores where it has them; its ``score`` becomes the merged one.
    """
    kept = list(first[:keep])
    kept_ids = {hit.chunk_id for hit in kept}
    combined: dict[str, float] = {}
    hits: dict[str, FusedHit] = {}
    lists: list[tuple[float, Sequence[FusedHit]]] = [(1.0, first[keep:])]
    lists += [(follow_up_weight, hop) for hop in follow_ups]
    for weight, hop in lists:
        rank = 0
        for hit in hop:
            if hit.chunk_id in kept_ids:
                continue
            rank += 1
            combined[hit.chunk_id] = combined.get(hit.chunk_id, 0.0) + weight / (rrf_k + rank)
            hits.setdefault(hit.chunk_id, hit)
    rest = sorted(hits.values(), key=lambda h: (-combined[h.chunk_id], h.chunk_id))
    # Scores stay ordered: a kept hit scores above every merged one.
    top = max(combined.values(), default=0.0)
    for position, hit in enumerate(kept):
        hit.score = top + (len(kept) - position) / (rrf_k + 1)
    for hit in rest:
        hit.score = combined[hit.chunk_id]
    return kept + rest
