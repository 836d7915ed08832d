"""The asker background: profile, interests and frequently consulted documents as one text block.

It is placed in this turn's context and given to query rewriting to resolve references ("our
department", "that policy"); it is never the question. Rebuilt every turn from what the store holds,
within a token budget: profile first (who is asking), then interests, then documents, each section
newest or most cited first, stopping at the first entry that would pass the budget. What the result
lists is exactly what the text says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from knowsphere_memory.domain.records import FrequentDocumentRecord, MemoryItemRecord
from knowsphere_memory.domain.tokens import estimate_tokens

SUPPORTED_LANGUAGES = ("en", "zh")

_TEXT = {
    "en": {
        "header": "About the person asking (use it to resolve references; it is not the question):",
        "profile": "Profile:",
        "interests": "Interests:",
        "documents": "Frequently consulted documents:",
        "hits": "cited {n} times",
    },
    "zh": {
        "header": "提问者背景（用于理解指代，不是问题本身）：",
        "profile": "画像：",
        "interests": "兴趣：",
        "documents": "常查资料：",
        "hits": "被引用 {n} 次",
    },
}


@dataclass(frozen=True)
class Background:
    profile: list[MemoryItemRecord]
    interests: list[MemoryItemRecord]
    frequent_documents: list[FrequentDocumentRecord]
    rendered: str
    tokens: int


def language_of(tag: str, default: str) -> str:
    """``en`` or ``zh`` for a BCP-47 tag or Accept-Language value (``zh-CN``, ``zh-Hans;q=0.9``);
    ``default`` when it is empty or neither."""
    primary = tag.split(",")[0].split(";")[0].strip().lower().split("-")[0].split("_")[0]
    if primary in SUPPORTED_LANGUAGES:
        return primary
    return default if default in SUPPORTED_LANGUAGES else SUPPORTED_LANGUAGES[0]


def _document_line(document: FrequentDocumentRecord, hits_text: str) -> str:
    name = document.file_name or document.document_id
    return f"- {name} ({hits_text.format(n=document.hit_count)})"


def build_background(
    profile: Sequence[MemoryItemRecord],
    interests: Sequence[MemoryItemRecord],
    documents: Sequence[FrequentDocumentRecord],
    *,
    language: str,
    token_budget: int,
) -> Background:
    """The background of ``language`` (``en``/``zh``) within ``token_budget`` estimated tokens; empty
    (``rendered == ""``) when there is nothing to say or not even the first entry fits."""
    text = _TEXT[language]
    lines = [text["header"]]
    used = estimate_tokens(text["header"])
    kept: dict[str, list[object]] = {"profile": [], "interests": [], "documents": []}
    full = False

    sections: list[tuple[str, list[tuple[object, str]]]] = [
        ("profile", [(item, f"- {item.content}") for item in profile]),
        ("interests", [(item, f"- {item.content}") for item in interests]),
        ("documents", [(doc, _document_line(doc, text["hits"])) for doc in documents]),
    ]
    for name, entries in sections:
        if full or not entries:
            continue
        title_cost = estimate_tokens(text[name]) + 1
        first_cost = estimate_tokens(entries[0][1]) + 1
        if used + title_cost + first_cost > token_budget:
            full = True
            continue
        lines.append(text[name])
        used += title_cost
        for record, line in entries:
            cost = estimate_tokens(line) + 1
            if used + cost > token_budget:
                full = True
                break
            lines.append(line)
            used += cost
            kept[name].append(record)

    if not any(kept.values()):
        return Background([], [], [], "", 0)
    rendered = "\n".join(lines)
    return Background(
        profile=[r for r in kept["profile"] if isinstance(r, MemoryItemRecord)],
        interests=[r for r in kept["interests"] if isinstance(r, MemoryItemRecord)],
        frequent_documents=[r for r in kept["documents"] if isinstance(r, FrequentDocumentRecord)],
        rendered=rendered,
        tokens=used,
    )
