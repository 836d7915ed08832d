"""A token estimate for budgets, without a tokenizer (memory never sees the model's vocabulary).

CJK characters count one token each (tokenizers of the models we serve spend about one per
character); other text counts one token per :data:`CHARS_PER_TOKEN` characters, rounded up. The
estimate errs on the high side for English, so a budget computed with it is rarely exceeded.
"""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 4
"""Latin-script characters per token (OpenAI's rule of thumb for English)."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat message costs beyond its text (role and separators)."""


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x3000 <= code <= 0x303F  # CJK punctuation
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x3040 <= code <= 0x30FF  # kana
        or 0xAC00 <= code <= 0xD7AF  # hangul
    )


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``."""
    if not text:
        return 0
    cjk = sum(1 for ch in text if _is_cjk(ch))
    return cjk + math.ceil((len(text) - cjk) / CHARS_PER_TOKEN)
