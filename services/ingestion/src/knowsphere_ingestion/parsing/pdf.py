"""PDF parser (pypdfium2): the text layer page by page, paragraphs rebuilt from lines, OCR for scanned pages.

PDFium maps CID fonts through their ToUnicode tables, so Chinese comes out as text, not ``(cid:123)``.
Each page's characters are grouped into lines (PDFium's own line breaks) and lines into paragraphs by
geometry: a paragraph ends at a larger vertical gap, a change of character size, an indented line or a
short last line. Wrapped lines are joined with a space, Chinese lines without one, and a word hyphenated
at a line end is rejoined. Paragraphs set in characters clearly larger than the body text are headings,
their level given by their size; below those come one-line bold paragraphs and numbered ones ("2.1. Data")
set in another font than the body, their level given by the numbering depth. Tables are not detected:
their cells come out as lines of text.

PDFium is not thread-safe, so every call into it holds one module lock; OCR runs outside it.

A page whose text layer has fewer than ``MIN_TEXT_CHARS_PER_PAGE`` usable characters is treated as
scanned: it is rendered and read by OCR (see ``ocr.py``). Every page's text layer is read first, so a
document with more scanned pages than ``ParseLimits.max_ocr_pages`` is refused before OCR starts. Without
an OCR engine the page keeps whatever text it has and its number is listed in
``metadata["ocr_missing_pages"]``.
"""

from __future__ import annotations

import ctypes
import re
import statistics
import threading
from collections import Counter
from dataclasses import dataclass, field

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw
from PIL import Image

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing import ocr
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.limits import ParseLimits, setting

# A document with more pages than this is refused before any page is read.
DEFAULT_MAX_PAGES = 2000
# A page with fewer usable text-layer characters than this (whitespace aside) is OCR'd.
MIN_TEXT_CHARS_PER_PAGE = 20
# Resolution at which scanned pages are rendered for OCR, and the longest side of the rendered image
# (an A4 page at 200 dpi is 2339 pixels; larger pages are rendered at a lower resolution).
OCR_DPI = 200
MAX_OCR_RENDER_SIDE = 2500
# A paragraph whose characters are this much taller than the body text is a heading ...
MIN_HEADING_SIZE_RATIO = 1.15
# ... provided it is short.
MAX_HEADING_CHARS = 200
MAX_HEADING_LEVEL = 6
MAX_STYLED_HEADING_CHARS = 100
# Line-joining geometry, in multiples of the line's character height.
MAX_LINE_GAP = 0.9  # a larger vertical gap between two lines starts a new paragraph
MIN_INDENT = 0.8  # a line starting this much right of the paragraph's left edge starts a new one
MIN_SHORT_LINE = 2.5  # a line ending this much left of the next line's end is a paragraph's last line
MAX_CJK_SPACE_GAP = 0.5  # a space PDFium inserted between two CJK characters closer than this is dropped
MAX_SIZE_CHANGE = 0.15  # lines whose character heights differ by more than this share do not join
BOLD_WEIGHTS = range(600, 1000)  # PDFium font weights of a bold font (some fonts report nonsense above)
# A one-line paragraph in bold (or, when numbered like "2.1.", in another font than the body) is a heading.
_NUMBERED_HEADING = re.compile(r"^(\d{1,2}(?:\.\d{1,2})*)\.?\s+[^\W\d_]")
_BOLD_FONT_NAME = re.compile(r"bold|black|heavy|medi|demi|semibold|-bd|\bbd\b", re.IGNORECASE)

# PDFium is not thread-safe, not even across documents: every call into it holds this lock. OCR, the slow
# part, runs outside it.
_PDFIUM_LOCK = threading.Lock()
_ERROR_MESSAGES = {
    pdfium_raw.FPDF_ERR_FILE: "cannot be read",
    pdfium_raw.FPDF_ERR_FORMAT: "is not a valid PDF file (corrupt or truncated)",
    pdfium_raw.FPDF_ERR_SECURITY: "uses an unsupported security handler",
}
_SENTENCE_END = re.compile(r"[.!?。！？:：;；]$")
_UNUSABLE = {"\ufffd", "\ufffe", "\uffff"}
# Metadata titles that name a file or an identifier rather than the document.
_JUNK_TITLE = re.compile(
    r"^(?:untitled|doi:|microsoft (?:word|powerpoint) - )|\.(?:docx?|pdf|dvi|tex|indd|rtf|pptx?)$",
    re.IGNORECASE,
)


@dataclass
class _Line:
    text: str
    left: float
    bottom: float
    right: float
    top: float
    size: float  # typical character height (loose box) in points
    font: str  # the font most of its characters are set in
    bold: bool


@dataclass
class _Paragraph:
    page: int
    lines: list[_Line] = field(default_factory=list)
    ocr: bool = False
    ocr_text: str = ""

    @property
    def left(self) -> float:
        return min(line.left for line in self.lines)

    @property
    def right(self) -> float:
        return max(line.right for line in self.lines)

    @property
    def size(self) -> float:
        return statistics.median(line.size for line in self.lines) if self.lines else 0.0

    @property
    def text(self) -> str:
        if self.ocr:
            return self.ocr_text
        joined = ""
        for line in self.lines:
            joined = _join_lines(joined, line.text)
        return joined.strip()


def parse_pdf(
    data: bytes, file_name: str, limits: ParseLimits | None = None, *, max_pages: int = DEFAULT_MAX_PAGES
) -> ParsedDocument:
    limits = ParseLimits() if limits is None else limits
    with _PDFIUM_LOCK:
        document = _open(data, file_name)
        page_count = len(document)
        metadata_title = _metadata_title(document)
    try:
        if page_count > max_pages:
            raise ParseError(
                f"{file_name} has {page_count} pages, over the limit of {max_pages} pages",
                code=ParseErrorCode.DOCUMENT_TOO_LARGE,
            )
        if page_count == 0:
            raise ParseError(f"{file_name} has no pages", code=ParseErrorCode.EMPTY_DOCUMENT)
        # Every page's text layer first: how many pages need OCR is known (and refused when over the
        # limit) before the first one is read by OCR.
        page_lines: list[list[_Line]] = []
        for index in range(page_count):
            with _PDFIUM_LOCK:
                page_lines.append(_read_lines(document, index, file_name))
        scanned = [i for i, lines in enumerate(page_lines) if _usable_chars(lines) < MIN_TEXT_CHARS_PER_PAGE]
        can_ocr = bool(scanned) and ocr.ocr_available()
        if can_ocr and len(scanned) > limits.max_ocr_pages:
            raise ParseError(
                f"{file_name} has {len(scanned)} pages without a text layer to read by OCR, over the limit "
                f"of {limits.max_ocr_pages} pages per document ({setting('max_ocr_pages')})",
                code=ParseErrorCode.TOO_MANY_OCR_PAGES,
            )
        paragraphs: list[_Paragraph] = []
        ocr_pages: list[int] = []
        ocr_missing: list[int] = []
        for index, lines in enumerate(page_lines):
            page_number = index + 1
            if _usable_chars(lines) >= MIN_TEXT_CHARS_PER_PAGE:
                paragraphs.extend(_paragraphs(lines, page_number))
                continue
            recognised = None
            if can_ocr:
                with _PDFIUM_LOCK:
                    scan = _render(document, index, file_name)
                recognised = _recognise(scan, file_name, limits)
            if recognised is None:
                ocr_missing.append(page_number)
                paragraphs.extend(_paragraphs(lines, page_number))
                continue
            ocr_pages.append(page_number)
            # The OCR of the whole page also reads the few characters of its text layer.
            if _visible_chars("".join(recognised)) >= _usable_chars(lines):
                paragraphs.extend(_Paragraph(page_number, ocr=True, ocr_text=text) for text in recognised)
            else:
                paragraphs.extend(_paragraphs(lines, page_number))
    finally:
        with _PDFIUM_LOCK:
            document.close()

    blocks = _blocks(paragraphs)
    title = metadata_title or next(
        (block.text for block in blocks if block.kind == "heading" and block.page == 1), ""
    )
    text = "\n".join(block.text for block in blocks)
    metadata = {"format": "pdf"}
    if ocr_pages:
        metadata["ocr_pages"] = ",".join(map(str, ocr_pages))
    if ocr_missing:
        metadata["ocr_missing_pages"] = ",".join(map(str, ocr_missing))
    return ParsedDocument(
        blocks=blocks,
        title=title,
        page_count=page_count,
        language=guess_language(text),
        metadata=metadata,
    )


def _page(document: pdfium.PdfDocument, index: int, file_name: str) -> pdfium.PdfPage:
    try:
        return document[index]
    except pdfium.PdfiumError as exc:
        raise ParseError(
            f"{file_name}: page {index + 1} cannot be read: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc


def _read_lines(document: pdfium.PdfDocument, index: int, file_name: str) -> list[_Line]:
    """A page's text lines."""
    page = _page(document, index, file_name)
    try:
        return _page_lines(page)
    finally:
        page.close()


def _render(document: pdfium.PdfDocument, index: int, file_name: str) -> Image.Image:
    """A page rendered for OCR, its longer side at most ``MAX_OCR_RENDER_SIDE`` pixels."""
    page = _page(document, index, file_name)
    try:
        width, height = page.get_size()
        scale = min(OCR_DPI / 72, MAX_OCR_RENDER_SIDE / max(width, height, 1))
        bitmap = page.render(scale=scale)
        try:
            return bitmap.to_pil().copy()  # the copy owns its pixels once the bitmap is closed
        finally:
            bitmap.close()
    finally:
        page.close()


def _open(data: bytes, file_name: str) -> pdfium.PdfDocument:
    if b"%PDF-" not in data[:1024]:
        raise ParseError(f"{file_name} is not a PDF file: no %PDF- header", code=ParseErrorCode.CORRUPT_FILE)
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code == pdfium_raw.FPDF_ERR_PASSWORD:
            raise ParseError(
                f"{file_name} is encrypted and cannot be opened without a password",
                code=ParseErrorCode.ENCRYPTED,
            ) from exc
        reason = _ERROR_MESSAGES.get(code or -1, f"cannot be opened ({exc})")
        raise ParseError(f"{file_name} {reason}", code=ParseErrorCode.CORRUPT_FILE) from exc


def _metadata_title(document: pdfium.PdfDocument) -> str:
    try:
        title = " ".join(document.get_metadata_value("Title").split())
    except (pdfium.PdfiumError, KeyError, UnicodeDecodeError):
        return ""
    return "" if _JUNK_TITLE.search(title) else title


def _page_lines(page: pdfium.PdfPage) -> list[_Line]:
    """The page's text lines in PDFium's reading order, with their boxes in PDF points (y upwards)."""
    textpage = page.get_textpage()
    try:
        lines: list[_Line] = []
        chars: list[_Char] = []
        name = ctypes.create_string_buffer(256)
        flags = ctypes.c_int()
        for index in range(textpage.count_chars()):
            ch = chr(pdfium_raw.FPDFText_GetUnicode(textpage, index))
            if ch in "\r\n":
                _flush(chars, lines)
                continue
            if ch == "\x00" or (ch < " " and ch != "\t"):
                continue
            generated = bool(pdfium_raw.FPDFText_IsGenerated(textpage, index))
            font = ""
            bold = False
            if not ch.isspace():
                pdfium_raw.FPDFText_GetFontInfo(textpage, index, name, len(name), ctypes.byref(flags))
                font = name.value.decode("latin-1")
                weight = pdfium_raw.FPDFText_GetFontWeight(textpage, index)
                bold = weight in BOLD_WEIGHTS or bool(_BOLD_FONT_NAME.search(font))
            chars.append(_Char(ch, generated, textpage.get_charbox(index, loose=True), font, bold))
        _flush(chars, lines)
        return lines
    finally:
        textpage.close()


@dataclass(frozen=True)
class _Char:
    ch: str
    generated: bool  # a space or line break PDFium inferred from the layout
    box: tuple[float, float, float, float]  # left, bottom, right, top
    font: str
    bold: bool


def _flush(chars: list[_Char], lines: list[_Line]) -> None:
    """Turn the collected characters into a line (dropping justification spaces inside Chinese text)."""
    visible = [char for char in chars if not char.ch.isspace()]
    if not visible:
        chars.clear()
        return
    size = statistics.median(char.box[3] - char.box[1] for char in visible)
    text = []
    for position, char in enumerate(chars):
        if char.ch.isspace() and char.generated and 0 < position < len(chars) - 1:
            before, after = chars[position - 1], chars[position + 1]
            gap = after.box[0] - before.box[2]
            if ocr.is_cjk(before.ch) and ocr.is_cjk(after.ch) and gap < MAX_CJK_SPACE_GAP * size:
                continue
        text.append(" " if char.ch.isspace() else char.ch)
    lines.append(
        _Line(
            text=" ".join("".join(text).split()),
            left=min(char.box[0] for char in visible),
            bottom=min(char.box[1] for char in visible),
            right=max(char.box[2] for char in visible),
            top=max(char.box[3] for char in visible),
            size=size,
            font=Counter(char.font for char in visible).most_common(1)[0][0],
            bold=all(char.bold for char in visible),
        )
    )
    chars.clear()


def _usable_chars(lines: list[_Line]) -> int:
    return sum(1 for line in lines for ch in line.text if not ch.isspace() and ch not in _UNUSABLE)


def _paragraphs(lines: list[_Line], page: int) -> list[_Paragraph]:
    paragraphs: list[_Paragraph] = []
    body_size = _body_size(lines)
    for line in lines:
        if not line.text.strip():
            continue
        if paragraphs and _continues(paragraphs[-1], line, lines, body_size):
            paragraphs[-1].lines.append(line)
        else:
            paragraphs.append(_Paragraph(page, [line]))
    return paragraphs


def _body_size(lines: list[_Line]) -> float:
    """The character height most of the text is set in."""
    weights: Counter[float] = Counter()
    for line in lines:
        weights[round(line.size * 2) / 2] += len(line.text)
    return weights.most_common(1)[0][0] if weights else 0.0


def _column_right(line: _Line, lines: list[_Line]) -> float:
    """Where lines starting at the same left edge as ``line`` usually end: its column's right margin."""
    rights = sorted(other.right for other in lines if abs(other.left - line.left) <= 2 * line.size)
    return rights[(len(rights) - 1) * 3 // 4] if rights else line.right


def _continues(paragraph: _Paragraph, line: _Line, lines: list[_Line], body_size: float) -> bool:
    """Whether ``line`` wraps on from the paragraph's last line rather than starting a new paragraph."""
    previous = paragraph.lines[-1]
    size = max(previous.size, line.size)
    if size <= 0 or abs(previous.size - line.size) > MAX_SIZE_CHANGE * size:
        return False
    if previous.bold != line.bold or (previous.font != line.font and _NUMBERED_HEADING.match(line.text)):
        return False
    gap = previous.bottom - line.top
    if size >= body_size * MIN_HEADING_SIZE_RATIO:
        # Large (heading) lines are often centred: only the spacing tells whether they belong together.
        return -0.5 * size <= gap <= MAX_LINE_GAP * size
    column_right = _column_right(previous, lines)
    # The next line's first word would have fitted at the end of this one: this one was not wrapped.
    first = line.text.split()[0]
    needed = size if ocr.is_cjk(first[0]) else (len(first) * 0.5 + 1) * size
    if column_right - previous.right > needed:
        return False
    if gap > MAX_LINE_GAP * size or gap < -0.5 * size:  # a blank, or a jump up (next column)
        return False
    left = paragraph.left
    if line.left > left + MIN_INDENT * size:  # indented first line
        return False
    # A line may start left of a single indented first line, but not far left of an established edge.
    if len(paragraph.lines) > 1 and line.left < left - MIN_INDENT * size:
        return False
    if line.left < left - 6 * size:
        return False
    # The previous line stopped well short of this one: it ended its paragraph.
    if line.right - previous.right > MIN_SHORT_LINE * size:
        return False
    ended = bool(_SENTENCE_END.search(previous.text))
    return not (
        ended and len(paragraph.lines) > 1 and previous.right < paragraph.right - MIN_SHORT_LINE * size
    )


def _join_lines(text: str, line: str) -> str:
    """Append a wrapped line: no space between Chinese characters, hyphenated words rejoined."""
    line = line.strip()
    if not text:
        return line
    if not line:
        return text
    if text[-1] in "\ufffe\u00ad\u2010":  # soft hyphen PDFium reports at a line end
        return text[:-1] + line
    if text[-1] == "-" and len(text) > 1 and text[-2].isalpha() and line[0].islower():
        return text + line
    if ocr.is_cjk(text[-1]) and ocr.is_cjk(line[0]):
        return text + line
    return text + " " + line


def _blocks(paragraphs: list[_Paragraph]) -> list[Block]:
    """Classify paragraphs as headings or body text and build heading paths."""
    text_paragraphs = [paragraph for paragraph in paragraphs if not paragraph.ocr]
    body_size = _body_size([line for paragraph in text_paragraphs for line in paragraph.lines])

    def is_heading(paragraph: _Paragraph) -> bool:
        text = paragraph.text
        return (
            not paragraph.ocr
            and body_size > 0
            and paragraph.size >= body_size * MIN_HEADING_SIZE_RATIO
            and 0 < len(text) <= MAX_HEADING_CHARS
            and any(ch.isalpha() for ch in text)
        )

    body_font = Counter(
        line.font for paragraph in text_paragraphs for line in paragraph.lines for _ in line.text
    ).most_common(1)
    body = body_font[0][0] if body_font else ""

    def styled_heading_depth(paragraph: _Paragraph) -> int:
        """1 + the numbering depth of a one-line bold (or numbered, other-font) heading; 0 otherwise."""
        if paragraph.ocr or len(paragraph.lines) != 1:
            return 0
        line = paragraph.lines[0]
        text = line.text
        if (
            len(text) > MAX_STYLED_HEADING_CHARS
            or text[-1] in ".,;:。，；："
            or not any(c.isalpha() for c in text)
        ):
            return 0
        numbered = _NUMBERED_HEADING.match(text)
        if not (line.bold or (numbered and line.font != body)):
            return 0
        return numbered.group(1).count(".") + 1 if numbered else 1

    heading_sizes = sorted({round(p.size * 2) / 2 for p in text_paragraphs if is_heading(p)}, reverse=True)
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []
    for paragraph in paragraphs:
        text = paragraph.text
        if not text:
            continue
        if is_heading(paragraph):
            level = min(heading_sizes.index(round(paragraph.size * 2) / 2) + 1, MAX_HEADING_LEVEL)
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, text))
            path = tuple(title for _, title in headings)
            blocks.append(
                Block(kind="heading", text=text, heading_path=path, page=paragraph.page, level=level)
            )
        elif depth := styled_heading_depth(paragraph):
            level = min(len(heading_sizes) + depth, MAX_HEADING_LEVEL)
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, text))
            path = tuple(title for _, title in headings)
            blocks.append(
                Block(kind="heading", text=text, heading_path=path, page=paragraph.page, level=level)
            )
        else:
            path = tuple(title for _, title in headings)
            blocks.append(Block(kind="paragraph", text=text, heading_path=path, page=paragraph.page))
    return blocks


def _recognise(image: Image.Image, file_name: str, limits: ParseLimits) -> list[str] | None:
    """The paragraphs OCR reads on a rendered page, or None when OCR is not available here."""
    try:
        return ocr.paragraphs(ocr.recognize(image))
    except ocr.OcrUnavailable:
        return None
    except Image.DecompressionBombError as exc:  # a rendering is at most MAX_OCR_RENDER_SIDE² pixels
        raise ParseError(
            f"{file_name}: a page rendered for OCR has {image.width}x{image.height} pixels, over the limit "
            f"of {limits.max_image_pixels} pixels ({setting('max_image_pixels')})",
            code=ParseErrorCode.DECOMPRESSION_BOMB,
        ) from exc


def _visible_chars(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())
