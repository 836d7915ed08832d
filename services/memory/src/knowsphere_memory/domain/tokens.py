"""A token estimate for budgets, without a tokenizer (memory never sees the model's vocabulary).

CJK characters count one token each (tokenizers of the models we serve spend about one per
character); other text counts one token per :data:`CHARS_PER_TOKEN` characters, rounded up. The
estimate errs on the high side for English, so a budget computed with it is rarely exceeded.
"""

from __future__ import annotations

import math
import re

CHARS_PER_TOKEN = 4
"""Latin-script characters per token (OpenAI's rule of thumb for English)."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens a chat message costs beyond its text (role and separators)."""


_CJK = re.compile(
    "["
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\u3400-\u4dbf"  # extension A
    "\u3000-\u303f"  # CJK punctuation
    "\uff00-\uffef"  # full-width forms
    "\u3040-\u30ff"  # kana
    "\uac00-\ud7af"  # hangul
    "]"
)


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``."""
    if not text:
        return 0
    # Budgets are computed for every line of every turn's background: ASCII text skips the scan.
    cjk = 0 if text.isascii() else len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / CHARS_PER_TOKEN)
