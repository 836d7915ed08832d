"""Decoding of text-like uploads (TXT, CSV) whose encoding is not declared: UTF-8, GBK/GB18030, Big5."""

from __future__ import annotations

import unicodedata

from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode

# Tried in this order when charset-normalizer is not installed or has no answer. GB18030 is a superset
# of GBK, so GBK files decode through it.
FALLBACK_ENCODINGS: tuple[str, ...] = ("utf-8", "gb18030", "big5")
# A decoded text with more than this share of control / unassigned characters is treated as binary.
MAX_CONTROL_CHAR_SHARE = 0.05
CHINESE_ENCODINGS: tuple[str, ...] = ("gb18030", "big5")
# A Chinese decoding is accepted when at least this share of its non-ASCII characters is Chinese.
MIN_HAN_SHARE = 0.9
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_ALLOWED_CONTROLS = frozenset("\t\n\r\f\v")
_WITHOUT_ALLOWED_CONTROLS = str.maketrans("", "", "".join(_ALLOWED_CONTROLS))


def decode_text(data: bytes, file_name: str) -> tuple[str, str]:
    """Return (text, encoding name). Raises ParseError when the bytes are not text in a known encoding."""
    if data.startswith(_UTF8_BOM):
        return _checked(data[len(_UTF8_BOM) :].decode("utf-8", errors="strict"), file_name), "utf-8-sig"
    if b"\x00" in data and not data.startswith(_UTF16_BOMS):
        raise ParseError(
            f"{file_name} is not a text file: it contains NUL bytes (binary content)",
            code=ParseErrorCode.CORRUPT_FILE,
        )
    try:
        # Strict UTF-8 is the common case and decoding it is unambiguous.
        return _checked(data.decode("utf-8"), file_name), "utf-8"
    except UnicodeDecodeError:
        pass
    detected = _detect_with_charset_normalizer(data)
    if detected is not None:
        text, encoding = detected
        return _checked(text, file_name), encoding
    for encoding in FALLBACK_ENCODINGS:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if _control_share(text) <= MAX_CONTROL_CHAR_SHARE:
            return text, encoding
    raise ParseError(
        f"{file_name} is not text in a supported encoding (tried {', '.join(FALLBACK_ENCODINGS)})",
        code=ParseErrorCode.CORRUPT_FILE,
    )


def _detect_with_charset_normalizer(data: bytes) -> tuple[str, str] | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:
        return None
    # Short Chinese texts are often taken for Korean or Japanese by an open detection, so the Chinese
    # encodings are tried first and kept when they decode to Chinese.
    chinese = from_bytes(data, cp_isolation=list(CHINESE_ENCODINGS)).best()
    if chinese is not None and _han_share(str(chinese)) >= MIN_HAN_SHARE:
        return str(chinese), chinese.encoding
    best = from_bytes(data).best()
    if best is None:
        return None
    return str(best), best.encoding


def _han_share(text: str) -> float:
    """Share of CJK ideographs and CJK punctuation among the non-ASCII, non-space characters."""
    wide = [ch for ch in text if not ch.isascii() and not ch.isspace()]
    if not wide:
        return 0.0
    han = sum(
        1
        for ch in wide
        if "\u4e00" <= ch <= "\u9fff" or "\u3000" <= ch <= "\u303f" or "\uff00" <= ch <= "\uffef"
    )
    return han / len(wide)


def _checked(text: str, file_name: str) -> str:
    if _control_share(text) > MAX_CONTROL_CHAR_SHARE:
        raise ParseError(
            f"{file_name} is not a text file: too many control characters (binary content)",
            code=ParseErrorCode.CORRUPT_FILE,
        )
    return text


def _control_share(text: str) -> float:
    if not text:
        return 0.0
    if text.translate(_WITHOUT_ALLOWED_CONTROLS).isprintable():
        return 0.0  # the common case, decided in C: no control, unassigned or private-use character
    bad = sum(
        1 for ch in text if ch not in _ALLOWED_CONTROLS and unicodedata.category(ch) in ("Cc", "Cn", "Co")
    )
    return bad / len(text)
