"""Parsing of uploaded files into a ParsedDocument, dispatched by file extension or content type.

This package reads the text-like formats (TXT, Markdown, HTML, CSV), Office OOXML (DOCX, PPTX, XLSX), PDF
(text layer, OCR for scanned pages) and images (OCR). Audio is not parsed here: it is transcribed by a
remote speech model elsewhere in the workflow.
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
from knowsphere_ingestion.parsing.markdown import parse_markdown
from knowsphere_ingestion.parsing.pdf import parse_pdf
from knowsphere_ingestion.parsing.pptx import parse_pptx
from knowsphere_ingestion.parsing.text import parse_text
from knowsphere_ingestion.parsing.xlsx import parse_xlsx

__all__ = ["SUPPORTED_EXTENSIONS", "ParseError", "ParseErrorCode", "UnsupportedFormat", "parse"]

Parser = Callable[[bytes, str], ParsedDocument]

_BY_EXTENSION: dict[str, Parser] = {
    ".txt": parse_text,
    ".text": parse_text,
    ".md": parse_markdown,
    ".markdown": parse_markdown,
    ".html": parse_html,
    ".htm": parse_html,
    ".csv": parse_csv,
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
    "text/plain": parse_text,
    "text/markdown": parse_markdown,
    "text/x-markdown": parse_markdown,
    "text/html": parse_html,
    "application/xhtml+xml": parse_html,
    "text/csv": parse_csv,
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


def parse(data: bytes, file_name: str, content_type: str = "") -> ParsedDocument:
    """Parse an uploaded file. The extension decides the format; the content type is used without one.

    Raises UnsupportedFormat (a ParseError) for a format we do not read and ParseError for empty,
    encrypted, corrupt or oversized content; ``error.code`` says which.
    """
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
    return parser(data, file_name)
