"""Errors a parser raises, each with a machine code: the format is not one we read, or the file is not
what it claims to be.

The code is what a failed document shows (``Failure.code``); the message, which names the file and
the limit or the fault, is its reason. Callers branch on the code, never on the message.
"""

from __future__ import annotations

from enum import StrEnum


class ParseErrorCode(StrEnum):
    """Why a file could not be parsed; the closed set of codes a parse failure carries."""

    CORRUPT_FILE = "corrupt_file"
    """Damaged, truncated, or not the format its extension claims."""
    ENCRYPTED = "encrypted"
    """Readable only with a password."""
    EMPTY_DOCUMENT = "empty_document"
    """Well-formed but with nothing to index: no bytes, no pages, no rows, no visible text."""
    ARCHIVE_TOO_LARGE = "archive_too_large"
    """An Office (zip) file over the member, uncompressed-size, compression-ratio or XML-part-size limit
    (a zip or XML bomb)."""
    DOCUMENT_TOO_LARGE = "document_too_large"
    """Over a page or pixel limit."""
    DECOMPRESSION_BOMB = "decompression_bomb"
    """An image (or one frame of it) declaring more pixels than the limit: refused before decoding."""
    TOO_MANY_OCR_PAGES = "too_many_ocr_pages"
    """More pages or frames without a text layer than one document may have read by OCR."""
    PARSE_BUDGET_EXCEEDED = "parse_budget_exceeded"
    """The parse needed more CPU time, memory or wall-clock time, or produced more text, than its budget."""
    PARSER_CRASHED = "parser_crashed"
    """The process parsing the file died (a native library crashed, or the system killed it)."""
    UNSUPPORTED_FORMAT = "unsupported_format"
    """A format we do not read."""


class ParseError(ValueError):
    """The file could not be parsed; ``code`` says why, the message says it for a reader."""

    def __init__(self, message: str, *, code: ParseErrorCode) -> None:
        super().__init__(message)
        self.code = code


class UnsupportedFormat(ParseError):
    """The file's extension / content type is not one of the formats we parse."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=ParseErrorCode.UNSUPPORTED_FORMAT)
