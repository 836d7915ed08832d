"""Explicit memory statements in a user's own message: "记住：…" / "remember: …" and "忘记…" / "forget …".

Long-term memory is written only when the user says so, in so many words, at the start of their own
message (no background extraction). The conversation calls :func:`parse_remember` on the user's
message before it calls ``Remember``, and :func:`parse_forget` before it deletes items. Both take the
message's role: text of any other role (a tool result, a retrieved document, the assistant's answer)
never yields a statement, even when it contains "记住：…", so a document cannot plant a memory.

Accepted forms (case-insensitive, full-width or ASCII punctuation, optional separator after the verb):

- remember: ``记住``, ``请记住``, ``帮我记住``, ``请帮我记住``, ``麻烦记住``, ``记一下``, ``帮我记一下``,
  ``请记下``, ``帮我记下``; ``remember:``, ``remember that …``, ``please remember …`` (optionally with
  ``that``), ``remember this: …``.
- forget: ``忘记``, ``忘掉``, ``请忘记``, ``请忘掉``, ``帮我忘掉``, ``不要再记住``;
  ``forget:``, ``forget that …``, ``forget about …``, ``please forget …``, ``forget …`` ("forget it" and
  the like name nothing and yield nothing).

"记住了吗？", "remember when …?" and the like are questions, not statements: a remainder that ends with
a question mark, or that starts with "了", yields nothing. One statement may hold several items, one
per line or separated by ";"/"；" (at most ``max_items``).

:func:`normalise` is the comparison key: saying the same thing twice (different case, width, spacing or
final punctuation) updates the stored item instead of adding another.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from knowsphere.memory.v1.memory_enums import MemoryItemKind

USER_ROLE = "user"
DEFAULT_MAX_ITEMS = 10
"""Items one statement may hold (the service's ``remember_max_items`` default)."""
DEFAULT_MAX_CHARS = 500
"""Characters of one item (the service's ``memory_item_max_chars`` default)."""
MIN_FORGET_MATCH_CHARS = 2
"""A forget target shorter than this only deletes an item equal to it, never one containing it."""

_SEP = r"[\s:：,，、-]*"
_REMEMBER = re.compile(
    r"^(?:"
    r"(?:请|麻烦)?(?:你)?(?:帮我)?(?:记住|记一下|记下来|记下)"
    r"|(?:please\s+)?remember(?:\s+this)?(?=\s*[:：])"
    r"|(?:please\s+)?remember\s+that\b"
    r"|please\s+remember\b"
    r")" + _SEP + r"(?P<body>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_FORGET = re.compile(
    r"^(?:"
    r"(?:请|麻烦)?(?:你)?(?:帮我)?(?:忘记|忘掉)"
    r"|(?:请)?不要再记住"
    r"|(?:please\s+)?forget(?=\s*[:：])"
    r"|(?:please\s+)?forget\s+that\b"
    r"|please\s+forget\b"
    r"|forget\s+about\b"
    r"|forget\b"
    r")" + _SEP + r"(?P<body>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_ITEM_SPLIT = re.compile(r"[\n;；]+")
_BULLET = re.compile(r"^\s*(?:[-*•·]|\d+[.)、])\s*")
_TRAILING = "。.!！~～ \t"
_QUOTES = "\"'“”‘’「」『』"
_QUESTION = ("?", "？")
_NOT_A_TARGET = frozenset({"it", "this", "that", "them", "这个", "那个", "它"})

# Order matters: "I'm interested in …" is an interest before "I'm …" is a profile.
_INTEREST = re.compile(
    r"^(?:我(?:比较|很|一直|最近|主要)?(?:关注|关心|感兴趣|喜欢|想了解|在研究|在学习|研究|偏好)"
    r"|我对.+(?:感兴趣|有兴趣)"
    r"|i(?:'m| am) (?:interested in|into|curious about|following|researching|studying)"
    r"|i (?:care about|follow|like|love|prefer|focus on|want to learn|track)"
    r"|my (?:interests?|focus) (?:is|are)\b)",
    re.IGNORECASE,
)
_PROFILE = re.compile(
    r"^(?:我(?:是|叫|在|负责|的(?:职位|岗位|角色|部门|名字|团队|工作))"
    r"|i(?:'m| am) (?:a|an|the|in|on|from|working|responsible)\b"
    r"|i work (?:in|at|for|as|on)\b"
    r"|my (?:name|role|job|title|team|department|position) (?:is|are)\b"
    r"|i(?:'m| am) [a-z]+ (?:at|in|of)\b)",
    re.IGNORECASE,
)


class MemoryTextTooLong(ValueError):
    """An item of an explicit statement is over the limit; the message names the limit."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"a memory item is {length} characters; the limit is {limit}")
        self.length = length
        self.limit = limit


@dataclass(frozen=True)
class StatedItem:
    """One item of a "remember" statement, ready for ``Remember`` (``NewMemoryItem``)."""

    kind: MemoryItemKind
    content: str


@dataclass(frozen=True)
class ForgetTarget:
    """What a "forget" statement asks to delete: items whose normalised content matches ``normalised``."""

    content: str
    normalised: str


def normalise(text: str) -> str:
    """The comparison key of a memory item: NFKC, case-folded, spaces collapsed, outer quotes and final
    punctuation dropped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = " ".join(folded.split())
    folded = folded.strip(_QUOTES + " ").rstrip(_TRAILING).strip(_QUOTES + " ")
    return folded


def classify(content: str) -> MemoryItemKind:
    """Profile (who the user is), interest (what they care about) or fact (anything else)."""
    text = unicodedata.normalize("NFKC", content).strip()
    if _INTEREST.match(text):
        return MemoryItemKind.INTEREST
    if _PROFILE.match(text):
        return MemoryItemKind.PROFILE
    return MemoryItemKind.FACT


def _body(pattern: re.Pattern[str], role: str, text: str) -> str | None:
    if role != USER_ROLE:
        return None
    match = pattern.match(unicodedata.normalize("NFKC", text).strip())
    if match is None:
        return None
    body = match.group("body").strip()
    if not body or body.endswith(_QUESTION) or body.startswith("了"):
        return None
    return body


def _says_something(piece: str) -> bool:
    """At least one letter or digit (CJK characters count): punctuation alone is not an item."""
    return any(ch.isalnum() for ch in piece)


def _clean(piece: str) -> str:
    return _BULLET.sub("", piece).strip().strip(_QUOTES).rstrip(_TRAILING).strip()


T = TypeVar("T")


def _unique(values: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    seen: set[Hashable] = set()
    out: list[T] = []
    for value in values:
        k = key(value)
        if k not in seen:
            seen.add(k)
            out.append(value)
    return out


def parse_remember(
    role: str,
    text: str,
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[StatedItem]:
    """The items of an explicit "remember" statement in ``text`` — only when ``role`` is ``"user"`` and
    the message starts with an accepted form; otherwise ``[]`` (nothing is written).

    Raises :class:`MemoryTextTooLong` when an item is longer than ``max_chars`` (nothing is kept: the
    caller tells the user the limit). Items beyond ``max_items`` are dropped; repeated items count once.
    """
    body = _body(_REMEMBER, role, text)
    if body is None:
        return []
    pieces = [_clean(piece) for piece in _ITEM_SPLIT.split(body)]
    pieces = [piece for piece in pieces if _says_something(piece)]
    for piece in pieces:
        if len(piece) > max_chars:
            raise MemoryTextTooLong(len(piece), max_chars)
    items = [StatedItem(classify(piece), piece) for piece in pieces]
    return _unique(items, lambda item: (item.kind, normalise(item.content)))[:max_items]


def parse_forget(role: str, text: str) -> ForgetTarget | None:
    """What an explicit "forget" statement asks to delete, or None (not a statement, or not the user's)."""
    body = _body(_FORGET, role, text)
    if body is None:
        return None
    content = _clean(body)
    key = normalise(content)
    if not _says_something(key) or key in _NOT_A_TARGET:
        return None
    return ForgetTarget(content, key)


def matching_items(target: ForgetTarget, items: Sequence[T], content_of: Callable[[T], str]) -> list[T]:
    """The items a forget target deletes: those whose normalised content equals the target; when none
    does, those whose normalised content contains it (a target of at least
    :data:`MIN_FORGET_MATCH_CHARS` characters). ``content_of(item)`` gives an item's content."""
    keyed = [(normalise(content_of(item)), item) for item in items]
    equal = [item for key, item in keyed if key == target.normalised]
    if equal or len(target.normalised) < MIN_FORGET_MATCH_CHARS:
        return equal
    return [item for key, item in keyed if target.normalised in key]
