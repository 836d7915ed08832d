"""Text analysis shared by every lexical (BM25) backend: text in, index or query terms out.

Both backends index and query the terms this module produces — the embedded tantivy index and
OpenSearch receive them whitespace-joined and only split on whitespace — so Chinese and English
behave identically on both, and this module is the one place that decides what a term is.

- Text is NFKC-normalised (full-width letters and digits become ASCII) and lower-cased.
- Chinese (Han) runs are segmented with jieba; each word longer than two characters is emitted whole
  *and* with every shorter word of the dictionary it contains (上海交通大学 → 上海, 交通, 大学,
  上海交通大学), which is jieba's search mode widened to all lengths. Domain terms from a user
  dictionary (terms in settings, or a jieba user-dictionary file) are kept whole the same way.
  ``cjk_mode="bigrams"`` replaces segmentation by overlapping character bigrams (for comparison).
- Other words are split on anything that is not a letter or digit, stop words are removed and
  alphabetic words are Snowball-stemmed (running, runs → run).
- Identifiers — a run of letters and digits joined by ``-``, ``_`` or ``.`` (``XJ-2000-B``,
  ``ERR_CONN_RESET``, ``v2.3.1``) or mixing letters and digits (``A1B2C3``, ``E0420``,
  ``0x80070005``) — are emitted whole (lower-cased, never stemmed) as well as by their parts.

A short, keyword-style query (at most ``lookup_query_max_words`` words after stop words, such as
``XJ-2000-B``, ``E0420 error`` or ``ERR_CONN_RESET 怎么解决``) additionally reports its *required
identifiers* (``AnalysedQuery.identifiers``): the backends return only chunks containing at least
one of them, and fall back to the plain query when no chunk in scope does, so ``XJ-2000-B`` does not
return a chunk about ``XJ-2000-C``. In a sentence an identifier is one term among others: requiring
it there cost BEIR SciFact 0.012 nDCG@10 and 0.037 Recall@100 (relevant abstracts that name the
gene differently).

Constructing an :class:`Analyzer` loads jieba's bundled dictionary (and the user dictionary file,
if one is given) lazily, the first time Chinese text is seen; after that analysis does no I/O.
Changing anything here changes the terms: indexes built before must be rebuilt.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import jieba
import Stemmer

CjkMode = Literal["words", "bigrams"]

DEFAULT_STEM_LANGUAGE = "english"
# Terms longer than this are dropped (base64 blobs, hashes of pasted binaries): they never match a
# query and OpenSearch's whitespace tokenizer would split them (its max_token_length is 255).
DEFAULT_MAX_TERM_CHARS = 100
# Shortest Chinese word emitted as a sub-word of a longer one.
MIN_CJK_SUBWORD_CHARS = 2
# A query of at most this many words (after stop words) is a lookup: its identifiers are required.
DEFAULT_LOOKUP_QUERY_MAX_WORDS = 3
# A query keeps its first this many distinct terms: OpenSearch refuses a query of more than 1,024
# clauses (indices.query.bool.max_clause_count), and each term is matched on text and on title.
DEFAULT_MAX_QUERY_TERMS = 256

# A common English stop-word list (articles, pronouns, auxiliaries, prepositions, conjunctions).
# The word lists are kept as text: they read and review better than a literal of 200 strings.
ENGLISH_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905
)

# Chinese function words and question words that carry no topic.
CHINESE_STOP_WORDS = frozenset(
    """
    的 了 着 过 是 在 和 与 及 或 而 且 也 都 就 又 还 并 则 即 之 其 此 这 那 这个 那个 这些 那些
    我 你 他 她 它 我们 你们 他们 她们 它们 个 吗 呢 吧 啊 呀 哦 么 哪 哪个 哪些 什么 怎么 怎样
    如何 为什么 为何 多少 几 被 把 给 对 于 从 向 以 为 由 将 让 等 等等 中 上 下 有 没有 不 没 很
    """.split()  # noqa: SIM905
)

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
_ALNUM = rf"[^\W_{_HAN}]"  # a letter or digit of any script except Han
_TOKEN = re.compile(rf"(?P<han>[{_HAN}]+)|(?P<word>{_ALNUM}+(?:[-_.]{_ALNUM}+)*)")
_PART_SEPARATORS = re.compile(r"[-_.]")
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class AnalysisConfig:
    """How text becomes terms; the same configuration must index and query."""

    user_terms: tuple[str, ...] = ()  # domain terms kept whole (and segmented), e.g. 知识球平台, C++
    # A user dictionary file in jieba's format: "term [freq] [tag]" per line; a line starting with
    # "#" is a comment.
    user_dictionary: Path | None = None
    cjk_mode: CjkMode = "words"
    jieba_hmm: bool = True  # let jieba join out-of-vocabulary words (names) with its HMM
    stem_language: str = DEFAULT_STEM_LANGUAGE
    max_term_chars: int = DEFAULT_MAX_TERM_CHARS
    lookup_query_max_words: int = DEFAULT_LOOKUP_QUERY_MAX_WORDS
    max_query_terms: int = DEFAULT_MAX_QUERY_TERMS


@dataclass(frozen=True)
class AnalysedQuery:
    terms: tuple[str, ...]  # unique, in order of first appearance
    # Exact identifiers of a lookup query; a hit must contain one of them when any chunk does.
    identifiers: tuple[str, ...]


WORD_TERMS_CACHE_SIZE = 100_000
"""Distinct words whose terms an analyzer keeps (a word's terms never change)."""


class _Term(NamedTuple):
    text: str
    identifier: bool = False  # an exact identifier (part number, error code, version)
    word: bool = True  # one per word of the text; False for the parts and sub-words of a word


class Analyzer:
    """Turns text into index terms and queries into query terms; safe to share between threads."""

    def __init__(self, config: AnalysisConfig | None = None) -> None:
        self.config = config or AnalysisConfig()
        for name in ("max_term_chars", "max_query_terms"):
            if getattr(self.config, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self.config, name)}")
        # PyStemmer's stemmers are not thread-safe: one per thread.
        self._local = threading.local()
        Stemmer.Stemmer(self.config.stem_language)  # fail now on an unknown language
        self._jieba: jieba.Tokenizer | None = None
        self._jieba_lock = threading.Lock()
        entries: list[tuple[str, int | None, str | None]] = [(t, None, None) for t in self.config.user_terms]
        if self.config.user_dictionary is not None:
            entries += read_user_dictionary(self.config.user_dictionary)
        self._user_entries = entries
        self._user_pattern = _user_term_pattern(tuple(term for term, _, _ in entries))
        # A text repeats its words: each distinct one is split and stemmed once (bounded; thread-safe).
        self._word_terms_of = functools.lru_cache(maxsize=WORD_TERMS_CACHE_SIZE)(self._word_terms)

    def warm_up(self) -> None:
        """Load jieba's dictionary now (about a second) rather than on the first Chinese text."""
        self._segmenter()

    def index_terms(self, text: str) -> list[str]:
        """Every term of ``text``, repeated as often as it occurs (term frequency matters)."""
        return [term.text for term in self._terms(text)]

    def query_terms(self, text: str) -> list[str]:
        """The distinct terms of a query, in order of first appearance."""
        return list(self.analyse_query(text).terms)

    def analyse_query(self, text: str) -> AnalysedQuery:
        terms: dict[str, None] = {}
        identifiers: dict[str, None] = {}
        words = 0
        for term in self._terms(text):
            terms.setdefault(term.text)
            words += term.word
            if term.identifier:
                identifiers.setdefault(term.text)
        lookup = words <= self.config.lookup_query_max_words
        return AnalysedQuery(
            terms=tuple(terms)[: self.config.max_query_terms],
            identifiers=tuple(identifiers) if lookup else (),
        )

    # --- internals ------------------------------------------------------------------------------

    def _terms(self, text: str) -> Iterator[_Term]:
        normalised = _POSSESSIVE.sub("", unicodedata.normalize("NFKC", text).lower())
        limit = self.config.max_term_chars
        if self._user_pattern is not None:
            for match in self._user_pattern.finditer(normalised):
                term = _WHITESPACE.sub("_", match.group())  # a term never contains whitespace
                if len(term) <= limit:
                    yield _Term(term, word=False)
        for match in _TOKEN.finditer(normalised):
            han = match.group("han")
            terms = self._han_terms(han) if han else self._word_terms_of(match.group("word"))
            yield from (term for term in terms if len(term.text) <= limit)

    def _word_terms(self, token: str) -> tuple[_Term, ...]:
        parts = _PART_SEPARATORS.split(token)
        has_digit = any(ch.isdigit() for ch in token)
        has_letter = any(ch.isalpha() for ch in token)
        whole = len(parts) > 1 or (has_digit and has_letter)
        terms: list[_Term] = []
        if whole:
            terms.append(
                _Term(token, _is_identifier(token, parts, has_digit=has_digit, has_letter=has_letter))
            )
            if len(parts) == 1:
                return tuple(terms)  # A1B2C3, E0420: its letter and digit runs are not words of their own
        for part in parts:
            if part in ENGLISH_STOP_WORDS:
                continue
            stemmed = self._stemmer().stemWord(part) if part.isalpha() else part
            terms.append(_Term(stemmed, word=not whole))
        return tuple(terms)

    def _han_terms(self, run: str) -> Iterator[_Term]:
        if self.config.cjk_mode == "bigrams":
            if len(run) == 1:
                yield _Term(run)
            for i in range(len(run) - 1):
                yield _Term(run[i : i + 2])
            return
        tokenizer = self._segmenter()
        for word in tokenizer.cut(run, HMM=self.config.jieba_hmm):
            if word in CHINESE_STOP_WORDS:
                continue
            for sub in _dictionary_subwords(tokenizer, word):
                yield _Term(sub, word=False)
            yield _Term(word)

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer: Stemmer.Stemmer | None = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = Stemmer.Stemmer(self.config.stem_language)
            self._local.stemmer = stemmer
        return stemmer

    def _segmenter(self) -> jieba.Tokenizer:
        if self._jieba is not None:
            return self._jieba
        with self._jieba_lock:
            if self._jieba is None:
                jieba.setLogLevel(logging.WARNING)  # jieba logs its dictionary loading at INFO
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                for term, freq, tag in self._user_entries:
                    tokenizer.add_word(unicodedata.normalize("NFKC", term).lower(), freq, tag)
                self._jieba = tokenizer
        return self._jieba


def read_user_dictionary(path: Path) -> list[tuple[str, int | None, str | None]]:
    """(term, frequency, tag) per line of a jieba-format user dictionary."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise ValueError(f"user_dictionary {path} cannot be read: {exc.strerror or exc}") from exc
    entries: list[tuple[str, int | None, str | None]] = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 3 or (len(fields) > 1 and not fields[1].isdigit()):
            raise ValueError(
                f"user_dictionary {path} line {number}: expected 'term [freq] [tag]', got {line!r}"
            )
        freq = int(fields[1]) if len(fields) > 1 else None
        entries.append((fields[0], freq, fields[2] if len(fields) > 2 else None))
    return entries


def _is_identifier(token: str, parts: list[str], *, has_digit: bool, has_letter: bool) -> bool:
    """Whether a query must match ``token`` exactly: codes and part numbers, not words or numbers."""
    if "_" in token:
        return True
    if not has_digit or _PLAIN_NUMBER.fullmatch(token):
        return False  # state-of-the-art, 2000, 3.5
    return has_letter or len(parts) > 2  # XJ-2000-B, E0420, v2.3.1, 2024-01-05 — but not 10-20


def _dictionary_subwords(tokenizer: jieba.Tokenizer, word: str) -> Iterator[str]:
    """Every shorter dictionary word inside ``word`` (jieba's search mode stops at three characters)."""
    n = len(word)
    for size in range(MIN_CJK_SUBWORD_CHARS, n):
        for start in range(n - size + 1):
            sub = word[start : start + size]
            if tokenizer.FREQ.get(sub):  # prefixes of longer words are stored with frequency 0
                yield sub


def _user_term_pattern(user_terms: tuple[str, ...]) -> re.Pattern[str] | None:
    """Domain terms that are not pure Chinese (C++, Node.js) and so would be split by the tokenizer."""
    phrases = sorted(
        {
            t
            for t in (
                _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", term).strip().lower())
                for term in user_terms
            )
            if t and not re.fullmatch(rf"[{_HAN}]+", t)
        },
        key=len,
        reverse=True,
    )
    if not phrases:
        return None
    # \b-like guards on the sides that are letters or digits, so "c++" does not match inside "abc++".
    escaped = (re.escape(p).replace(r"\ ", r"\s+") for p in phrases)
    return re.compile("|".join(rf"(?<!{_ALNUM}){p}(?!{_ALNUM})" for p in escaped))


@functools.cache
def default_analyzer() -> Analyzer:
    """The analyzer with default settings, built once (jieba's dictionary loads on first Chinese)."""
    return Analyzer()


def index_terms(text: str) -> list[str]:
    """``default_analyzer().index_terms(text)``."""
    return default_analyzer().index_terms(text)


def query_terms(text: str) -> list[str]:
    """``default_analyzer().query_terms(text)``."""
    return default_analyzer().query_terms(text)
