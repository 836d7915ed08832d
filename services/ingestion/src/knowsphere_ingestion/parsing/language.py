"""A cheap language guess for a parsed document: Chinese when CJK characters are common, else English."""

from __future__ import annotations

# Share of CJK ideographs among letters above which a text is called Chinese.
MIN_CJK_SHARE_FOR_ZH = 0.2


def guess_language(text: str) -> str:
    """Return "zh", "en", or "" when the text has no letters."""
    cjk = latin = 0
    for ch in text:
        if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf":
            cjk += 1
        elif ch.isascii() and ch.isalpha():
            latin += 1
    letters = cjk + latin
    if letters == 0:
        return ""
    return "zh" if cjk / letters >= MIN_CJK_SHARE_FOR_ZH else "en"
