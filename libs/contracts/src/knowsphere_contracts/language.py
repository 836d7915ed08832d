"""Which language a text is in, as far as the platform needs to know: does an embedding model read it.

Retrieval mutes the vector leg of a model that cannot read a query; ingestion gives a knowledge base in a
language its tenant's default model cannot read a built-in model that can."""

from __future__ import annotations

from collections.abc import Iterable


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x3040 <= code <= 0x30FF  # kana
        or 0xAC00 <= code <= 0xD7AF  # hangul
        or 0xF900 <= code <= 0xFAFF
    )


def cjk_share(text: str) -> float:
    """Share of CJK characters among the letters of ``text`` (0 when it has none)."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return 0.0
    return sum(1 for ch in letters if _is_cjk(ch)) / len(letters)


def detect_language(text: str, threshold: float = 0.3) -> str:
    """``zh`` when CJK characters make up at least ``threshold`` of the letters, else ``en``."""
    return "zh" if cjk_share(text) >= threshold else "en"


def model_reads(languages: Iterable[str], language: str) -> bool:
    """Whether a model documented for ``languages`` reads ``language``; unknown (empty) means yes."""
    known = [lang.lower() for lang in languages]
    if not known or "multi" in known or "*" in known:
        return True
    return language.lower() in known or any(k.split("-")[0] == language.lower() for k in known)
