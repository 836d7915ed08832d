"""Citations: ``[[cN]]`` right after a fact, N numbering this turn's sources.

:class:`CitationFilter` sits between the model's text deltas and the client. It passes text through
as it comes, holds back only what could still become a citation (``[``, ``[[c1`` …, at most
:data:`MAX_HOLD` characters), and drops a complete citation whose handle names no source of this
turn — counting it — so a reader never sees a broken link. A previous turn's handles are not sources
of this turn: the filter knows only the handles it is given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CITATION = re.compile(r"\[\[(c\d{1,4})\]\]")
"""A complete citation; group 1 is its handle."""
_PARTIAL = re.compile(r"\[(?:\[(?:c\d{0,4}(?:\])?)?)?$")
"""A tail that may still grow into a citation: ``[``, ``[[``, ``[[c``, ``[[c12``, ``[[c12]``."""
MAX_HOLD = len("[[c9999]")


class CitationFilter:
    """Streams text with unknown citations removed; ``removed`` counts them."""

    def __init__(self, handles: Iterable[str]) -> None:
        self._handles = frozenset(handles)
        self._held = ""
        self.removed = 0

    def feed(self, delta: str) -> str:
        """The part of ``held + delta`` that can be shown now."""
        text = self._held + delta
        partial = _PARTIAL.search(text[-MAX_HOLD:]) if text else None
        cut = len(text) - len(partial.group(0)) if partial else len(text)
        self._held = text[cut:]
        return self._clean(text[:cut])

    def flush(self) -> str:
        """What is held back at the end of the stream (an unfinished ``[[c`` is plain text)."""
        text, self._held = self._held, ""
        return self._clean(text)

    def _clean(self, text: str) -> str:
        def keep(match: re.Match[str]) -> str:
            handle = match.group(1)
            if handle in self._handles:
                return match.group(0)
            self.removed += 1
            return ""

        return CITATION.sub(keep, text)


def renumber_citations(text: str, renamed: dict[str, str]) -> str:
    """``text`` with each ``[[cN]]`` renamed by ``renamed``; a citation naming no source is dropped."""
    return CITATION.sub(lambda m: f"[[{renamed[m.group(1)]}]]" if m.group(1) in renamed else "", text)


def cited_handles(text: str) -> set[str]:
    """The handles a (cleaned) answer cites."""
    return set(CITATION.findall(text))


__all__ = ["CITATION", "CitationFilter", "cited_handles", "renumber_citations"]
