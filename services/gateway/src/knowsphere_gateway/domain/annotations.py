"""An answer's sources in OpenAI's wire format: ``url_citation`` annotations beside ``[[cN]]`` markers.

The markers stay in the text. Each source an answer cites becomes one annotation, shaped like OpenAI's
``url_citation`` (``url``, ``title``, ``start_index`` and ``end_index`` of the marker in the content)
with KnowSphere's own keys added (``handle``, ``document_id``, ``chunk_id``, ``knowledge_base_id``,
``page``, ``file_name``), so an OpenAI client reads it and a citation-aware one finds the passage.

:class:`AnnotatedStream` turns a streamed answer into pieces: before the text that first cites a
source comes that source's annotation, once. A marker split across two deltas is held back until it
is whole, so its offsets are those of the content the client has put together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from knowsphere_contracts.events import CITATION_MARKER, Citation

_PARTIAL_MARKER = re.compile(r"\[(?:\[(?:c\d{0,4}(?:\])?)?)?$")
"""A tail that may still grow into a marker: ``[``, ``[[``, ``[[c``, ``[[c12``, ``[[c12]``."""
_LONGEST_PARTIAL = len("[[c9999]")

DocumentUrl = Callable[[Citation], str]
"""Where a client reads a source: its web address, or the document in this API."""


def located(source: Citation, url: DocumentUrl) -> Citation:
    """A source as the ``citations`` list of an answer carries it: ``url`` always set."""
    return source if source.url else source.model_copy(update={"url": url(source)})


def url_citation(source: Citation, url: DocumentUrl, start: int) -> dict[str, Any]:
    """The annotation of ``source`` whose marker starts at ``start`` in the content."""
    marker = f"[[{source.handle}]]"
    return {
        "type": "url_citation",
        "url_citation": {
            "url": source.url or url(source),
            "title": source.title or source.file_name or source.handle,
            "start_index": start,
            "end_index": start + len(marker),
            "handle": source.handle,
            "document_id": source.document_id,
            "chunk_id": source.chunk_id,
            "knowledge_base_id": source.knowledge_base_id,
            "page": source.page,
            "file_name": source.file_name,
        },
    }


def annotations_of(text: str, sources: Iterable[Citation], url: DocumentUrl) -> list[dict[str, Any]]:
    """One annotation per source ``text`` cites, at its first marker, in the order they are cited."""
    stream = AnnotatedStream(url)
    stream.add_sources(sources)
    pieces = [*stream.feed(text), *stream.flush()]
    return [annotation for piece in pieces for annotation in piece.annotations]


@dataclass(frozen=True)
class Piece:
    """What to send next: annotations (of the sources ``content`` cites first), then ``content``."""

    content: str
    annotations: list[dict[str, Any]] = field(default_factory=list)


class AnnotatedStream:
    """Follows a streamed answer: ``add_sources`` with the turn's numbered sources as they are
    announced, ``feed`` each text delta, ``flush`` at the end."""

    def __init__(self, url: DocumentUrl) -> None:
        self._url = url
        self._sources: dict[str, Citation] = {}
        self._announced: set[str] = set()
        self._held = ""
        self._offset = 0

    def add_sources(self, sources: Iterable[Citation]) -> None:
        for source in sources:
            self._sources.setdefault(source.handle, source)

    def feed(self, delta: str) -> list[Piece]:
        text = self._held + delta
        partial = _PARTIAL_MARKER.search(text[-_LONGEST_PARTIAL:]) if text else None
        cut = len(text) - len(partial.group(0)) if partial else len(text)
        self._held = text[cut:]
        return self._release(text[:cut])

    def flush(self) -> list[Piece]:
        text, self._held = self._held, ""
        return self._release(text)

    def _release(self, text: str) -> list[Piece]:
        if not text:
            return []
        annotations = []
        for match in CITATION_MARKER.finditer(text):
            handle = match.group(1)
            source = self._sources.get(handle)
            if source is None or handle in self._announced:
                continue
            self._announced.add(handle)
            annotations.append(url_citation(source, self._url, self._offset + match.start()))
        self._offset += len(text)
        return [Piece(text, annotations)]


__all__ = ["AnnotatedStream", "DocumentUrl", "Piece", "annotations_of", "located", "url_citation"]
