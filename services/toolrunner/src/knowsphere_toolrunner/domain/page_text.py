"""The readable text of a fetched page: HTML to its main article (trafilatura, without menus, ads and
footers), PDF to the text of its pages (pypdfium2), plain text as it is.

CPU-bound and synchronous: callers run it off the event loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import pypdfium2 as pdfium
import trafilatura
from lxml import etree
from lxml import html as lxml_html

_WHITESPACE_RUN = re.compile(r"[ \t\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")
_INVISIBLE_TAGS = ("script", "style", "noscript", "template", "head", "nav", "footer")
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "application/json"})
PDF_MAGIC = b"%PDF-"


class PageKind(StrEnum):
    HTML = "html"
    PDF = "pdf"
    TEXT = "text"


@dataclass(frozen=True)
class PageText:
    kind: PageKind
    title: str
    text: str
    pages: int = 0
    """PDF pages read (0 for other kinds)."""
    pages_total: int = 0


class UnreadablePage(Exception):
    """The content is of a kind web_fetch does not read, or broken; the message says which."""


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def page_text(content: bytes, content_type: str, encoding: str, *, max_pdf_pages: int) -> PageText:
    kind = media_type(content_type)
    if kind in PDF_TYPES or content.startswith(PDF_MAGIC):
        return pdf_text(content, max_pages=max_pdf_pages)
    if kind in HTML_TYPES or (not kind and content.lstrip()[:1] == b"<"):
        return html_text(content)
    if kind in TEXT_TYPES or kind.startswith("text/"):
        return PageText(PageKind.TEXT, "", _tidy(content.decode(encoding or "utf-8", errors="replace")))
    raise UnreadablePage(f"the page is {kind or 'of no stated type'}, which web_fetch cannot read")


def html_text(content: bytes) -> PageText:
    try:
        page = lxml_html.fromstring(content)
    except (etree.ParserError, ValueError) as error:
        raise UnreadablePage("the page is not readable HTML") from error
    title = _tidy(page.findtext(".//title") or "")
    extracted = trafilatura.bare_extraction(
        content,
        with_metadata=True,
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        favor_precision=True,
    )
    article = ""
    if extracted is not None:
        title = _tidy(getattr(extracted, "title", "") or "") or title
        article = getattr(extracted, "text", "") or ""
    if not article:
        # A page too small or too odd for an article: its visible text, so it never reads as empty.
        for element in list(page.iter(*_INVISIBLE_TAGS)):
            element.drop_tree()
        article = page.text_content()
    return PageText(PageKind.HTML, title, _tidy(article))


def pdf_text(content: bytes, *, max_pages: int) -> PageText:
    try:
        document = pdfium.PdfDocument(content)
    except pdfium.PdfiumError as error:
        raise UnreadablePage("the PDF cannot be opened (broken or encrypted)") from error
    try:
        title = _tidy(str(document.get_metadata_dict().get("Title", "")))
        total = len(document)
        texts = []
        for index in range(min(total, max_pages)):
            page = document[index]
            textpage = page.get_textpage()
            try:
                texts.append(textpage.get_text_bounded())
            finally:
                textpage.close()
                page.close()
    finally:
        document.close()
    return PageText(
        PageKind.PDF, title, _tidy("\n\n".join(texts)), pages=min(total, max_pages), pages_total=total
    )


def _tidy(text: str) -> str:
    lines = [_WHITESPACE_RUN.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
