"""Resuming a turn without showing anything twice.

A turn whose replica died is redelivered and resumes from its last checkpoint: the node that was
running runs again. What that node had already published before the crash — its ``tool_started``,
the first part of an answer being streamed — must not reach the client a second time. :class:`Replay`
knows the turn's published events and lets through only what is new: events it has not seen, and of
the re-streamed answer only the text beyond what was already shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowsphere_contracts.events import ChatTurnEvent, TurnEventKind


def _key(kind: TurnEventKind, fields: dict[str, Any]) -> tuple[Any, ...] | None:
    if kind in (TurnEventKind.STARTED, TurnEventKind.INTENT):
        return (kind,)
    if kind in (TurnEventKind.TOOL_STARTED, TurnEventKind.TOOL_FINISHED):
        return (kind, fields.get("tool_call_id"))
    if kind is TurnEventKind.HANDOFF:
        return (kind, fields.get("to_agent_id"), fields.get("reason"), fields.get("tool_call_id"))
    if kind is TurnEventKind.SOURCES:
        return (
            kind,
            tuple(c.handle if hasattr(c, "handle") else c["handle"] for c in fields.get("citations", [])),
        )
    return None


class Replay:
    """``previous``: the turn's published events; ``kept_text``: the answer text its checkpoint holds
    (written by nodes that finished, so they will not run again)."""

    def __init__(self, previous: Sequence[ChatTurnEvent] = (), kept_text: str = "") -> None:
        self._seen = {
            key for e in previous if (key := _key(e.kind, e.model_dump(exclude={"kind"}))) is not None
        }
        shown = "".join(e.text or "" for e in previous if e.kind is TurnEventKind.TEXT_DELTA)
        self._unseen_shown = shown[len(kept_text) :] if shown.startswith(kept_text) else ""
        self.next_sequence = max((e.sequence for e in previous), default=-1) + 1
        self.answered = any(e.is_final for e in previous)

    def admit(self, kind: TurnEventKind, fields: dict[str, Any]) -> dict[str, Any] | None:
        """The fields to publish for this event, or None when the client has already seen it."""
        key = _key(kind, fields)
        if key is not None:
            if key in self._seen:
                return None
            self._seen.add(key)
            return fields
        if kind is TurnEventKind.TEXT_DELTA and self._unseen_shown:
            text = fields.get("text") or ""
            overlap = 0
            while (
                overlap < min(len(text), len(self._unseen_shown))
                and text[overlap] == self._unseen_shown[overlap]
            ):
                overlap += 1
            # Only a re-stream that repeats what was shown is trimmed; once it differs, it is new text.
            self._unseen_shown = self._unseen_shown[overlap:] if overlap == len(text) else ""
            rest = text[overlap:]
            return {**fields, "text": rest} if rest else None
        return fields


__all__ = ["Replay"]
