"""Answers as WeCom shows them: plain text with numbered footnotes instead of ``[[cN]]`` markers,
within WeCom's byte limits, and the AI bot's answers in progress (its streamed messages).

- :func:`plain_answer` — the answer with each cited source as ``[n]`` (numbered in the order they are
  first cited; a marker naming no source of the turn is dropped), then a footnote per source with its
  document name (or web title) and page.
- :func:`progress_text` — the same for an answer still being written: a marker cut at the end of the
  text so far is held back, so what the user sees never shows half a marker.
- :func:`utf8_parts` / :func:`utf8_truncate` — WeCom counts message length in UTF-8 bytes (2,048 for an
  application's text message, 20,480 for a bot's streamed message): text is split at a line break where
  it can be, never inside a character.
- :class:`StreamRegistry` — the AI bot's streams, by tenant, application and stream id, each kept
  ``ttl_seconds`` (WeCom polls a stream for six minutes at most) and at most ``max_streams`` of them:
  when full, finished streams give way first, and a new stream is refused rather than an unfinished
  one dropped.
- :func:`wecom_identity` — who a WeCom user is to the services: a user of the tenant of their own per
  application, so each WeCom user has their own sessions and memory.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from knowsphere_contracts.events import CITATION_MARKER, Citation
from knowsphere_runtime.identity import MAX_ID_LENGTH, Identity, IdentityError

ELLIPSIS: Final = "…"
_PARTIAL_MARKER = re.compile(r"\[(?:\[(?:c\d{0,4}(?:\])?)?)?$")
"""A tail that may still grow into a marker: ``[``, ``[[``, ``[[c``, ``[[c12``, ``[[c12]``."""
WECOM_USER_PREFIX: Final = "wecom"


def _numbering(text: str, sources: Iterable[Citation]) -> tuple[dict[str, int], dict[str, Citation]]:
    known = {source.handle: source for source in sources}
    numbers: dict[str, int] = {}
    for match in CITATION_MARKER.finditer(text):
        handle = match.group(1)
        if handle not in numbers and (not known or handle in known):
            numbers[handle] = len(numbers) + 1
    return numbers, known


def _numbered(text: str, numbers: dict[str, int]) -> str:
    def replace(match: re.Match[str]) -> str:
        number = numbers.get(match.group(1))
        return f"[{number}]" if number is not None else ""

    return CITATION_MARKER.sub(replace, text)


def footnote(number: int, source: Citation) -> str:
    """``[1] handbook.pdf, p. 4``; a web source by its title and address."""
    name = source.file_name or source.title or source.url or source.document_id or source.handle
    where = f", p. {source.page}" if source.page else ""
    link = f" {source.url}" if source.url and source.url != name else ""
    return f"[{number}] {name}{where}{link}"


def plain_answer(text: str, sources: Iterable[Citation], heading: str) -> str:
    """The final answer for WeCom: ``[n]`` for each cited source, footnotes under ``heading``."""
    numbers, known = _numbering(text, sources)
    numbers = {handle: n for handle, n in numbers.items() if handle in known}
    numbers = {handle: i + 1 for i, handle in enumerate(numbers)}
    body = _numbered(text, numbers).rstrip()
    if not numbers:
        return body
    notes = "\n".join(footnote(n, known[handle]) for handle, n in numbers.items())
    return f"{body}\n\n{heading}\n{notes}"


def progress_text(text: str, sources: Iterable[Citation] = ()) -> str:
    """An answer still being written, markers as ``[n]`` and a marker cut at the end held back."""
    partial = _PARTIAL_MARKER.search(text)
    whole = text[: partial.start()] if partial else text
    numbers, _ = _numbering(whole, sources)
    return _numbered(whole, numbers)


def utf8_truncate(text: str, max_bytes: int) -> str:
    """``text`` cut to ``max_bytes`` UTF-8 bytes (ending with ``…`` when cut), never inside a character."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(ELLIPSIS.encode("utf-8"))
    return data[: max(room, 0)].decode("utf-8", errors="ignore") + ELLIPSIS


def utf8_parts(text: str, max_bytes: int, max_parts: int) -> list[str]:
    """``text`` in at most ``max_parts`` pieces of at most ``max_bytes`` UTF-8 bytes each, cut at a line
    break where one falls in the second half of a piece; the last piece ends with ``…`` when the text
    did not fit."""
    parts: list[str] = []
    rest = text
    while rest and len(parts) < max_parts:
        data = rest.encode("utf-8")
        if len(data) <= max_bytes:
            parts.append(rest)
            rest = ""
            break
        piece = data[:max_bytes].decode("utf-8", errors="ignore")
        cut = piece.rfind("\n")
        if cut >= len(piece) // 2:
            piece = piece[: cut + 1]
        parts.append(piece.rstrip("\n"))
        rest = rest[len(piece) :].lstrip("\n")
    if rest and parts:
        parts[-1] = utf8_truncate(parts[-1] + rest, max_bytes)
    return [part for part in parts if part]


def wecom_identity(tenant_id: str, application_id: str, wecom_user_id: str) -> Identity:
    """``wecom:<application id>:<WeCom user id>`` in the application's tenant; a user id that an
    identity cannot carry (WeCom allows letters, digits, ``_ - @ .``) is replaced by its hash."""
    plain = f"{WECOM_USER_PREFIX}:{application_id}:{wecom_user_id}"
    try:
        return Identity(tenant_id=tenant_id, user_id=plain)
    except IdentityError:
        digest = hashlib.sha256(wecom_user_id.encode("utf-8")).hexdigest()[:32]
        hashed = f"{WECOM_USER_PREFIX}:{application_id}:h{digest}"[:MAX_ID_LENGTH]
        return Identity(tenant_id=tenant_id, user_id=hashed)


# --- the AI bot's streams -------------------------------------------------------------------------


@dataclass
class AnswerStream:
    """One answer streamed to an AI bot: the text so far (with markers) until it is finished, then the
    whole answer as WeCom shows it."""

    stream_id: str
    expires_at: float
    text: str = ""
    sources: list[Citation] = field(default_factory=list)
    final: str | None = None

    @property
    def finished(self) -> bool:
        return self.final is not None

    def content(self, max_bytes: int) -> str:
        shown = self.final if self.final is not None else progress_text(self.text, self.sources)
        return utf8_truncate(shown, max_bytes)

    def finish(self, content: str) -> None:
        self.final = content


StreamKey = tuple[str, str, str]
"""(tenant id, application id, stream id): a stream is found only under its own application."""


class StreamRegistry:
    """The AI bot streams of this gateway process, bounded in time and number."""

    def __init__(
        self, ttl_seconds: float, max_streams: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl_seconds
        self._max = max_streams
        self._clock = clock
        self._streams: OrderedDict[StreamKey, AnswerStream] = OrderedDict()

    def __len__(self) -> int:
        self._drop_expired()
        return len(self._streams)

    def _drop_expired(self) -> None:
        now = self._clock()
        for key in [key for key, stream in self._streams.items() if stream.expires_at <= now]:
            del self._streams[key]

    def open(self, tenant_id: str, application_id: str, stream_id: str) -> AnswerStream | None:
        """A new stream (or the one already open under that key); None when the registry is full of
        unfinished streams."""
        key = (tenant_id, application_id, stream_id)
        existing = self.get(tenant_id, application_id, stream_id)
        if existing is not None:
            return existing
        if len(self._streams) >= self._max:
            finished = next((k for k, stream in self._streams.items() if stream.finished), None)
            if finished is None:
                return None
            del self._streams[finished]
        stream = AnswerStream(stream_id=stream_id, expires_at=self._clock() + self._ttl)
        self._streams[key] = stream
        return stream

    def get(self, tenant_id: str, application_id: str, stream_id: str) -> AnswerStream | None:
        self._drop_expired()
        return self._streams.get((tenant_id, application_id, stream_id))


__all__ = [
    "AnswerStream",
    "StreamRegistry",
    "footnote",
    "plain_answer",
    "progress_text",
    "utf8_parts",
    "utf8_truncate",
    "wecom_identity",
]
