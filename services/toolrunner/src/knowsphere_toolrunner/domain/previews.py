"""Short views of a large tool result, cut only at safe boundaries.

A view never passes a piece of a JSON document off as the whole: a JSON array shows its first items
whole and says how many there are; an object shows its entries whole where they fit and describes the
rest (``<array of 40 items>``); text is cut at a paragraph, sentence or word boundary. Every view that
leaves something out says so.
"""

from __future__ import annotations

import json
from typing import Any

# Where a text may be cut, best first: paragraph, line, sentence end (Latin and CJK), clause, word.
_BOUNDARIES = ("\n\n", "\n", ". ", "。", "！", "？", "! ", "? ", "；", "; ", "，", ", ", " ")
# A cut is taken only if it keeps at least this share of the allowed length (else the next boundary).
_MIN_KEEP_SHARE = 0.5
# Texts longer than this are described (``<text of N characters>``) in a one-level view.
SHALLOW_TEXT_CHARS = 120
LEFT_OUT_NOTE = "[a view, not the whole result: parts shown as <…> or counted as left out are not included]"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def cut_text(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``, ending at the best boundary that keeps at least half."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    for boundary in _BOUNDARIES:
        at = head.rfind(boundary)
        if at >= limit * _MIN_KEEP_SHARE:
            return head[: at + len(boundary)].rstrip()
    return head


def describe(value: Any) -> str:
    """A one-phrase description of a JSON value too large to show."""
    if isinstance(value, list):
        return f"<array of {len(value)} items>"
    if isinstance(value, dict):
        keys = ", ".join(list(value)[:8])
        more = ", …" if len(value) > 8 else ""
        return f"<object with keys {keys}{more}>"
    if isinstance(value, str):
        return f"<text of {len(value)} characters>"
    return _compact(value)


def _shallow(value: Any) -> str:
    """One level of a value with long texts and nested containers described, e.g.
    ``{"source": "c1", "text": <text of 100000 characters>}``."""
    if isinstance(value, dict):
        inner = ", ".join(f"{_compact(k)}: {_leaf(v)}" for k, v in value.items())
        return f"{{{inner}}}"
    if isinstance(value, list):
        return f"[{', '.join(_leaf(v) for v in value)}]"
    return _leaf(value)


def _leaf(value: Any) -> str:
    if isinstance(value, str) and len(value) > SHALLOW_TEXT_CHARS:
        return describe(value)
    if isinstance(value, (dict, list)):
        return describe(value)
    return _compact(value)


def _line(value: Any, room: int) -> str:
    """``value`` whole if it fits in ``room``, else one level of it, else a description."""
    whole = _compact(value)
    if len(whole) <= room:
        return whole
    shallow = _shallow(value)
    return shallow if len(shallow) <= room else describe(value)


def _items(items: list[Any], lines: list[str], used: int, limit: int, indent: str) -> tuple[int, int, bool]:
    """Adds the items that fit as lines; returns (characters used, items shown, all shown whole)."""
    shown = 0
    whole = True
    for item in items:
        text = _line(item, limit - used - len(indent) - 1)
        if shown and text.startswith("<"):
            break  # only a description fits now: stop rather than list descriptions
        line = indent + text
        if used + len(line) + 1 > limit:
            break
        whole = whole and text == _compact(item)
        lines.append(line)
        used += len(line) + 1
        shown += 1
    return used, shown, whole and shown == len(items)


def _array_view(items: list[Any], limit: int) -> str:
    lines = [f"JSON array of {len(items)} items."]
    _, shown, whole = _items(items, lines, len(lines[0]), limit, "")
    if shown < len(items):
        lines.append(f"[{shown} of {len(items)} items shown; the rest are left out]")
    if not whole:
        lines.append(LEFT_OUT_NOTE)
    return "\n".join(lines)


def _object_view(entries: dict[str, Any], limit: int) -> str:
    lines = [f"JSON object with {len(entries)} keys."]
    used = len(lines[0])
    complete = True
    for key, value in entries.items():
        whole = f"{_compact(key)}: {_compact(value)}"
        if used + len(whole) + 1 <= limit:
            lines.append(whole)
            used += len(whole) + 1
            continue
        complete = False
        line = f"{_compact(key)}: {describe(value)}"
        if used + len(line) + 1 > limit:
            lines.append("[further keys left out]")
            break
        lines.append(line)
        used += len(line) + 1
        if isinstance(value, list):
            used, shown, _ = _items(value, lines, used, limit, "  - ")
            if 0 < shown < len(value):
                lines.append(f"  [{shown} of {len(value)} items shown]")
    if not complete:
        lines.append(LEFT_OUT_NOTE)
    return "\n".join(lines)


def view(value: Any, text: str, limit: int) -> str:
    """A view of a result of at most about ``limit`` characters that says what it leaves out."""
    if isinstance(value, list):
        return _array_view(value, limit)
    if isinstance(value, dict):
        return _object_view(value, limit)
    shown = cut_text(text, limit)
    if len(shown) < len(text):
        note = f"[first {len(shown)} of {len(text)} characters, cut at a boundary; the rest is left out]"
        return f"{shown}\n{note}"
    return shown
