"""Parsing of uploaded files into a ParsedDocument, dispatched by file extension or content type.

This package reads the text-like formats (TXT, Markdown, HTML, CSV), Office OOXML (DOCX, PPTX, XLSX), PDF
(text layer, OCR for scanned pages) and images (OCR). Audio is not parsed here: it is transcribed by a
remote speech model elsewhere in the workflow.

Every parse works within :class:`ParseLimits` (pages to OCR, XML part size, image pixels, characters of
text); the worker runs each one in a child process with a CPU, memory and wall-clock budget besides
(:mod:`knowsphere_ingestion.parsing.budget`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath

from knowsphere_ingestion.domain.document import ParsedDocument
from knowsphere_ingestion.parsing.csv import parse_csv
from knowsphere_ingestion.parsing.docx import parse_docx
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode, UnsupportedFormat
from knowsphere_ingestion.parsing.html import parse_html
from knowsphere_ingestion.parsing.image import parse_image
from knowsphere_ingestion.parsing.limits import ParseLimits, setting
from knowsphere_ingestion.parsing.markdown import parse_markdown
from knowsphere_ingestion.parsing.pdf import parse_pdf
from knowsphere_ingestion.parsing.pptx import parse_pptx
from knowsphere_ingestion.parsing.text import parse_text
from knowsphere_ingestion.parsing.xlsx import parse_xlsx

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "ParseError",
    "ParseErrorCode",
    "ParseLimits",
    "UnsupportedFormat",
    "parse",
]

Parser = Callable[[bytes, str, ParseLimits], ParsedDocument]


def _within_output_limit(parser: Callable[[bytes, str], ParsedDocument]) -> Parser:
    """A parser of a text-like format, whose only limit is the output's size (checked by ``parse``)."""

    def parse_text_like(data: bytes, file_name: str, limits: ParseLimits) -> ParsedDocument:
        return parser(data, file_name)

    return parse_text_like


_TEXT, _MARKDOWN = _within_output_limit(parse_text), _within_output_limit(parse_markdown)
_HTML, _CSV = _within_output_limit(parse_html), _within_output_limit(parse_csv)
_BY_EXTENSION: dict[str, Parser] = {
    ".txt": _TEXT,
    ".text": _TEXT,
    ".md": _MARKDOWN,
    ".markdown": _MARKDOWN,
    ".html": _HTML,
    ".htm": _HTML,
    ".csv": _CSV,
    ".docx": parse_docx,
    ".pptx": parse_pptx,
    ".xlsx": parse_xlsx,
    ".pdf": parse_pdf,
    ".png": parse_image,
    ".jpg": parse_image,
    ".jpeg": parse_image,
    ".bmp": parse_image,
    ".tif": parse_image,
    ".tiff": parse_image,
    ".webp": parse_image,
}
_BY_CONTENT_TYPE: dict[str, Parser] = {
    "text/plain": _TEXT,
    "text/markdown": _MARKDOWN,
    "text/x-markdown": _MARKDOWN,
    "text/html": _HTML,
    "application/xhtml+xml": _HTML,
    "text/csv": _CSV,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": parse_docx,
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": parse_pptx,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": parse_xlsx,
    "application/pdf": parse_pdf,
    "application/x-pdf": parse_pdf,
    "image/png": parse_image,
    "image/jpeg": parse_image,
    "image/bmp": parse_image,
    "image/x-ms-bmp": parse_image,
    "image/tiff": parse_image,
    "image/webp": parse_image,
}
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(sorted(_BY_EXTENSION))


def parse(
    data: bytes, file_name: str, content_type: str = "", limits: ParseLimits | None = None
) -> ParsedDocument:
    """Parse an uploaded file. The extension decides the format; the content type is used without one.

    Raises UnsupportedFormat (a ParseError) for a format we do not read and ParseError for empty,
    encrypted, corrupt or oversized content, or content over one of ``limits`` (the defaults of
    :class:`ParseLimits` when not given); ``error.code`` says which.
    """
    limits = ParseLimits() if limits is None else limits
    extension = PurePath(file_name).suffix.lower()
    media_type = content_type.split(";", 1)[0].strip().lower()
    parser = _BY_EXTENSION.get(extension) if extension else _BY_CONTENT_TYPE.get(media_type)
    if parser is None:
        shown = extension or media_type or "(none)"
        raise UnsupportedFormat(
            f"{file_name}: unsupported format {shown!r}; "
            f"supported extensions: {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    if not data.strip():
        raise ParseError(f"{file_name} is empty", code=ParseErrorCode.EMPTY_DOCUMENT)
    parsed = parser(data, file_name, limits)
    characters = sum(len(block.text) for block in parsed.blocks)
    if characters > limits.max_output_chars:
        raise ParseError(
            f"{file_name} parses to {characters} characters of text, over the limit of "
            f"{limits.max_output_chars} characters ({setting('max_output_chars')})",
            code=ParseErrorCode.PARSE_BUDGET_EXCEEDED,
        )
    return parsed
