"""Finding the JSON values in a model's reply, however the model wrapped or broke them.

Tolerates ``<think>`` blocks, code fences, prose around the JSON, trailing commas, ``//`` and ``/* */``
comments and Python-style literals. A value cut off mid-JSON (or broken by a stray bracket) is closed
after the last inner value that parses, so the complete items before the cut are kept.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from typing import Any, Final

_THINK_BLOCK: Final = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE: Final = re.compile(r"```[A-Za-z0-9_-]*")
_SCAN_CHARS: Final = re.compile(r"[{}\[\]\"'\\]")
_MAX_JSON_STARTS: Final = 1000  # brackets tried as the start of a value, bounding work on prose
_SALVAGE_ATTEMPTS: Final = 50


def json_values(raw: str) -> list[Any]:
    """Every top-level JSON object or array in ``raw`` that can be read, in order."""
    text = _FENCE.sub("", _THINK_BLOCK.sub("", raw))
    values: list[Any] = []
    position = 0
    for _ in range(_MAX_JSON_STARTS):
        start = _next_opening(text, position)
        if start < 0:
            break
        end, state, closings = _scan(text, start)
        value = _load(text[start:end]) if state == "closed" else _salvage(text, start, closings)
        if value is _UNREADABLE:
            # Not JSON from here (prose such as "{name}", or a broken item): try the next bracket,
            # which may be an intact inner list or object.
            position = start + 1
            continue
        if isinstance(value, dict | list):
            values.append(value)
        if state == "truncated":
            break
        position = end
    return values


def _next_opening(text: str, position: int) -> int:
    starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
    return min(starts, default=-1)


# A point right after a nested value closed, with the closers of the brackets still open there.
_Closing = tuple[int, str]


def _scan(text: str, start: int) -> tuple[int, str, list[_Closing]]:
    """End of the bracketed value at ``start``; "closed", "truncated" or "mismatched"; inner closings."""
    stack: list[str] = []
    quote = ""
    escaped_until = -1  # index of the character a backslash escapes
    closings: list[_Closing] = []
    for match in _SCAN_CHARS.finditer(text, start):
        i, char = match.start(), match.group()
        if quote:
            if i == escaped_until:
                continue
            if char == "\\":
                escaped_until = i + 1
            elif char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if stack[-1] != char:
                return i, "mismatched", closings
            stack.pop()
            if not stack:
                return i + 1, "closed", closings
            closings.append((i + 1, "".join(reversed(stack))))
    return len(text), "truncated", closings


class _Unreadable:
    pass


_UNREADABLE: Final = _Unreadable()


def _load(candidate: str) -> Any:
    try:
        return json.loads(candidate, strict=False)
    except ValueError:
        pass
    cleaned = _strip_comments_and_trailing_commas(candidate)
    try:
        return json.loads(cleaned, strict=False)
    except ValueError:
        pass
    try:
        # Python-style output: single quotes, True/None.
        return ast.literal_eval(cleaned)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return ast.literal_eval(_python_literals(cleaned))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _UNREADABLE


def _salvage(text: str, start: int, closings: list[_Closing]) -> Any:
    """A value cut off (or broken by a stray bracket): close it after the last inner value that parses."""
    for end, closers in reversed(closings[-_SALVAGE_ATTEMPTS:]):
        value = _load(text[start:end] + closers)
        if value is not _UNREADABLE:
            return value
    return _UNREADABLE


def _outside_strings(text: str) -> Iterator[tuple[int, str, bool]]:
    """(index, char, inside a string literal) for each character of ``text``."""
    quote = ""
    escaped = False
    for i, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
                yield i, char, True
                continue
            yield i, char, True
            continue
        if char in "\"'":
            quote = char
            yield i, char, True
            continue
        yield i, char, False


def _strip_comments_and_trailing_commas(text: str) -> str:
    kept: list[str] = []
    inside = [False] * len(text)
    for i, _, in_string in _outside_strings(text):
        inside[i] = in_string
    i = 0
    while i < len(text):
        char = text[i]
        if not inside[i]:
            if text.startswith("//", i):
                newline = text.find("\n", i)
                i = len(text) if newline < 0 else newline
                continue
            if text.startswith("/*", i):
                close = text.find("*/", i + 2)
                i = len(text) if close < 0 else close + 2
                continue
            if char == ",":
                j = i + 1
                while j < len(text) and text[j].isspace():
                    j += 1
                if j < len(text) and text[j] in "}]" and not inside[j]:
                    i += 1
                    continue
        kept.append(char)
        i += 1
    return "".join(kept)


def _python_literals(text: str) -> str:
    """JSON's true/false/null outside strings as Python's True/False/None, for ``ast.literal_eval``."""
    inside = [in_string for _, _, in_string in _outside_strings(text)]
    out: list[str] = []
    for match in re.finditer(r"\b(true|false|null)\b|.", text, re.DOTALL):
        word = match.group(1)
        if word and not inside[match.start()]:
            out.append({"true": "True", "false": "False", "null": "None"}[word])
        else:
            out.append(match.group(0))
    return "".join(out)
