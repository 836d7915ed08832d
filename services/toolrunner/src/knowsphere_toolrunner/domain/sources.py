"""Citable sources of a turn and their numbers ``[[cN]]``.

The conversation sends the turn's sources so far with every tool call (``ToolContext.sources``). A
tool that finds a chunk or a page cites it through :class:`SourceBook`: a chunk already numbered this
turn keeps its number (matched by chunk id, handle or URL), a new one gets the next number after the
highest so far. Only the new ones go back in ``ExecuteToolResponse.sources``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from knowsphere.toolrunner.v1.toolrunner_enums import SourceKind

LABEL_PREFIX = "c"
_LABEL = re.compile(r"^\s*(?:\[\[)?\s*c(\d+)\s*(?:\]\])?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    """A citable source; field names follow the contract's ``Source``."""

    label: str = ""
    index: int = 0
    kind: SourceKind | None = None
    handle: str = ""
    chunk_id: str = ""
    document_id: str = ""
    file_name: str = ""
    knowledge_base_id: str = ""
    url: str = ""
    title: str = ""
    snippet: str = ""


def label_of(index: int) -> str:
    return f"{LABEL_PREFIX}{index}"


def index_of_label(text: str) -> int | None:
    """N of a label as the model may write it: ``c3`` or ``[[c3]]``; None when it is not one."""
    found = _LABEL.match(text)
    return int(found.group(1)) if found else None


def _keys(source: Source) -> list[tuple[str, str]]:
    keys = []
    if source.chunk_id:
        keys.append(("chunk", source.chunk_id))
    if source.handle:
        keys.append(("handle", source.handle))
    if source.url:
        keys.append(("url", source.url))
    return keys


class SourceBook:
    """The turn's sources so far, and the new ones one tool call adds."""

    def __init__(self, existing: Iterable[Source] = (), *, snippet_chars: int = 200) -> None:
        self._by_key: dict[tuple[str, str], Source] = {}
        self._by_index: dict[int, Source] = {}
        self._new: list[Source] = []
        self._snippet_chars = snippet_chars
        self._last = 0
        for source in existing:
            index = source.index or index_of_label(source.label) or 0
            if index > 0:  # a source without a number cannot be cited again by it
                self._remember(replace(source, index=index, label=label_of(index)))

    def _remember(self, source: Source) -> None:
        self._by_index.setdefault(source.index, source)
        self._last = max(self._last, source.index)
        for key in _keys(source):
            self._by_key.setdefault(key, source)

    def cite(self, source: Source) -> Source:
        """The numbered source: the one already numbered this turn for the same chunk/page, else a new
        one numbered after the last."""
        for key in _keys(source):
            known = self._by_key.get(key)
            if known is not None:
                return known
        index = self._last + 1
        numbered = replace(
            source, index=index, label=label_of(index), snippet=source.snippet[: self._snippet_chars]
        )
        self._remember(numbered)
        self._new.append(numbered)
        return numbered

    def resolve(self, label: str) -> Source | None:
        """The source a label names (``c3``, ``[[c3]]``), among this turn's; None when unknown."""
        index = index_of_label(label)
        return None if index is None else self._by_index.get(index)

    @property
    def new(self) -> list[Source]:
        """Sources this call added, in the order they were cited."""
        return list(self._new)
