"""grep_chunks: RE2 regular expressions over chunk text, in linear time and under a time budget.

The engine is RE2 (``google-re2``): matching time grows linearly with the text whatever the pattern,
so a pattern such as ``(a+)+$`` cannot backtrack catastrophically. The price is RE2 syntax: no
backreferences, lookaround or possessive quantifiers; such a pattern is refused with a
:class:`GrepPatternError` that says which construct is unsupported.

:func:`plan_grep` validates a request against :class:`GrepLimits` once; a store streams the chunks of a
scope through a :class:`GrepScan` page by page (in a worker thread). The scan stops at ``max_matches``
(reporting truncation when there are more) or when the time budget is spent (reporting a partial
result). Offsets are in Unicode code points, not UTF-8 bytes.

:func:`required_literal` extracts a substring every match must contain, so a store can pre-filter
candidate chunks in SQL; it errs on the side of returning nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import re2

from knowsphere_retrieval.domain.ports import GrepMatch, GrepPlan, GrepResult


@dataclass(frozen=True)
class GrepLimits:
    """Server limits of grep_chunks (the ``grep_*`` settings)."""

    max_pattern_length: int = 512  # characters
    max_matches: int = 200  # cap of a request's max_matches, and its default (0)
    context_chars: int = 80  # default characters of context on each side
    max_context_chars: int = 1000  # cap of a request's context_chars
    time_budget_seconds: float = 2.0  # whole scan, SQL reads included
    page_size: int = 256  # chunks read from the store per page
    regex_max_memory_bytes: int = 8 << 20  # RE2's automaton budget; a bigger pattern fails to compile


class GrepPatternError(ValueError):
    """The pattern is empty, too long, or not valid RE2 syntax; the message says which and why."""


class GrepCandidate(NamedTuple):
    """A chunk to scan, with the fields a match reports (a tuple: stores build one per chunk read)."""

    chunk_id: str
    knowledge_base_id: str
    document_id: str
    file_name: str
    position: int
    page: int
    heading_path: tuple[str, ...]
    text: str


# RE2 error fragments and what they mean to a user who wrote a Perl/Python-style pattern.
_UNSUPPORTED_HINTS = (
    (re.compile(r"invalid escape sequence: \\[1-9]"), "backreferences (\\1 …) are not supported"),
    (
        re.compile(r"invalid perl operator: \(\?P(=|$)"),
        "named backreferences ((?P=name)) are not supported",
    ),
    (re.compile(r"invalid perl operator: \(\?<?[=!]"), "lookahead and lookbehind are not supported"),
    (
        re.compile(r"bad repetition operator: [*+?]\+"),
        "possessive quantifiers (*+, ++, ?+) are not supported",
    ),
    (re.compile(r"invalid perl operator: \(\?>"), "atomic groups are not supported"),
    (re.compile(r"pattern too large"), "the pattern needs more memory than the limit (simplify it)"),
)


def plan_grep(
    pattern: str,
    *,
    ignore_case: bool = False,
    context_chars: int = 0,
    max_matches: int = 0,
    limits: GrepLimits | None = None,
) -> GrepPlan:
    """Validate a grep request and compile its pattern.

    ``context_chars`` and ``max_matches`` of 0 mean the server default; larger values than the limits
    are capped (as the API documents). Raises :class:`GrepPatternError` (a ``ValueError``) for a bad
    pattern and ``ValueError`` naming the field for a negative number.
    """
    limits = limits or GrepLimits()
    if context_chars < 0:
        raise ValueError(f"context_chars must not be negative (got {context_chars})")
    if max_matches < 0:
        raise ValueError(f"max_matches must not be negative (got {max_matches})")
    regex = compile_pattern(pattern, ignore_case=ignore_case, limits=limits)
    literal = required_literal(pattern)
    if ignore_case and not _caseless(literal):
        literal = ""  # a case-insensitive match may spell the literal otherwise
    return GrepPlan(
        pattern=pattern,
        ignore_case=ignore_case,
        context_chars=min(context_chars or limits.context_chars, limits.max_context_chars),
        max_matches=min(max_matches or limits.max_matches, limits.max_matches),
        time_budget_seconds=limits.time_budget_seconds,
        page_size=limits.page_size,
        required_literal=literal,
        regex=regex,
    )


def compile_pattern(pattern: str, *, ignore_case: bool, limits: GrepLimits) -> Any:
    """Compile ``pattern`` with RE2 or raise :class:`GrepPatternError` naming the problem."""
    if not pattern:
        raise GrepPatternError("pattern must not be empty")
    if len(pattern) > limits.max_pattern_length:
        raise GrepPatternError(
            f"pattern is {len(pattern)} characters long; the limit is {limits.max_pattern_length}"
        )
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.max_mem = limits.regex_max_memory_bytes
    options.log_errors = False  # the error travels in the exception, not on stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = _error_text(exc)
        hint = next((text for regex, text in _UNSUPPORTED_HINTS if regex.search(reason)), "")
        detail = f"{reason}; {hint}" if hint else reason
        raise GrepPatternError(
            f"pattern {pattern!r} is not a valid RE2 regular expression: {detail}"
        ) from exc


def _error_text(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else str(exc)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class GrepScan:
    """Accumulates matches over chunks fed in reading order, page by page; not thread-safe.

    The deadline starts when the scan is created, so time spent reading pages counts too.
    """

    def __init__(self, plan: GrepPlan, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._plan = plan
        self._clock = clock
        self._deadline = clock() + plan.time_budget_seconds
        self._matches: list[GrepMatch] = []
        self._truncated = False
        self._timed_out = False
        self._scanned = 0

    @property
    def done(self) -> bool:
        """True once more chunks would change nothing (enough matches) or may not be read (time)."""
        return self._truncated or self._timed_out

    def out_of_time(self) -> bool:
        """Whether the budget is spent; marks the result partial if so. Call only while work remains."""
        if not self._timed_out and self._clock() >= self._deadline:
            self._timed_out = True
        return self._timed_out

    def scan(self, candidates: Iterable[GrepCandidate]) -> None:
        plan = self._plan
        for candidate in candidates:
            if self.done or self.out_of_time():
                return
            self._scanned += 1
            text = candidate.text
            for found in plan.regex.finditer(text):
                if len(self._matches) >= plan.max_matches:
                    self._truncated = True
                    return
                start, end = found.start(), found.end()
                self._matches.append(
                    GrepMatch(
                        chunk_id=candidate.chunk_id,
                        document_id=candidate.document_id,
                        start=start,
                        end=end,
                        match=text[start:end],
                        before=text[max(0, start - plan.context_chars) : start],
                        after=text[end : end + plan.context_chars],
                        knowledge_base_id=candidate.knowledge_base_id,
                        file_name=candidate.file_name,
                        position=candidate.position,
                        page=candidate.page,
                        heading_path=candidate.heading_path,
                    )
                )
                # A chunk with very many matches must not outlive the budget either.
                if self.out_of_time():
                    return

    def result(self) -> GrepResult:
        return GrepResult(
            matches=list(self._matches),
            truncated=self._truncated,
            timed_out=self._timed_out,
            scanned_chunk_count=self._scanned,
        )


def grep_texts(plan: GrepPlan, candidates: Iterable[GrepCandidate]) -> GrepResult:
    """Scan candidates already in memory (tests, small in-memory stores)."""
    scan = GrepScan(plan)
    scan.scan(candidates)
    return scan.result()


# --- required literal -----------------------------------------------------------------------------

_PUNCTUATION_ESCAPES = frozenset(r"""\.+*?()|[]{}^$-/#&~!@%=:;"'<>,_`""")
_CLASS_ESCAPES = frozenset("dDwWsSbBAzntrfva")  # one character, no argument
_REPEAT = re.compile(r"\{\d+(,\d*)?\}")


def required_literal(pattern: str) -> str:
    """The longest substring every match of ``pattern`` must contain (case-sensitively), or "".

    Conservative by construction: only runs of plain characters outside groups count, a character
    made optional by ``?``, ``*`` or ``{…}`` is dropped, and anything not understood (top-level
    alternation, inline flags, ``\\Q``, hex or property escapes, stray braces) gives "".
    """
    runs: list[str] = []
    current: list[str] = []
    depth = 0
    i, n = 0, len(pattern)

    def flush() -> None:
        if current and depth == 0:
            runs.append("".join(current))
        current.clear()

    while i < n:
        ch = pattern[i]
        if ch == "\\":
            if i + 1 >= n:
                return ""
            nxt = pattern[i + 1]
            if nxt in _PUNCTUATION_ESCAPES:
                if depth == 0:
                    current.append(nxt)
                i += 2
                continue
            if nxt in _CLASS_ESCAPES:
                flush()
                i += 2
                continue
            return ""  # \x, \p, \Q, octal, \C …: not worth interpreting
        if ch == "[":
            flush()
            end = _class_end(pattern, i)
            if end < 0:
                return ""
            i = end + 1
            continue
        if ch == "(":
            if pattern.startswith("(?", i) and not pattern.startswith(("(?:", "(?P<"), i):
                return ""  # inline flags such as (?i) change what the literal means
            flush()
            depth += 1
            i += 1
            continue
        if ch == ")":
            flush()
            depth -= 1
            if depth < 0:
                return ""
            i += 1
            continue
        if ch == "|":
            if depth == 0:
                return ""
            i += 1
            continue
        if ch in "*?":
            if current:
                current.pop()  # the quantified character may be absent
            flush()
            i += 1
            continue
        if ch == "{":
            repeat = _REPEAT.match(pattern, i)
            if repeat is None:
                return ""
            if current:
                current.pop()
            flush()
            i = repeat.end()
            continue
        if ch == "+":
            flush()  # the character stays required, but what follows need not be adjacent to it
            i += 1
            continue
        if ch in ".^$":
            flush()
            i += 1
            continue
        if depth == 0:
            current.append(ch)
        i += 1
    flush()
    return max(runs, key=len, default="")


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the character class opened at ``start``, or -1."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if pattern.startswith("[:", i):
            close = pattern.find(":]", i + 2)
            if close < 0:
                return -1
            i = close + 2
            continue
        if ch == "]":
            return i
        i += 1
    return -1


def _caseless(text: str) -> bool:
    """True when no character of ``text`` has another case (CJK, digits, punctuation)."""
    return all(ch.lower() == ch and ch.upper() == ch for ch in text)
