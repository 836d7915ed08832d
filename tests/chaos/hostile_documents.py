"""Hostile documents for the abuse scenarios, built in memory and small enough to upload in a moment.

- a scanned PDF of 2,000 image-only pages: one small JPEG, one page content stream and one resource
  dictionary, referenced by every page, so the file is a few hundred kilobytes;
- a DOCX whose document.xml inflates to about 100 MB from a 2 MB archive (under the 200 MB and 100:1
  archive checks, over the 64 MiB limit per XML part);
- a TIFF whose first frame is 64 x 64 pixels and whose second declares 10,000 x 10,000 pixels of deflated
  zeros (100 MB once decoded, 100 KB on disk);
- a DOCX and an XLSX declaring an internal entity whose text is a marker, and an external entity naming
  a file that holds another marker;
- a PDF that is also a ZIP: a one-page PDF with a text layer, followed by one of those DOCX archives
  (with offsets that make it a valid ZIP as well).

These follow the generators of services/ingestion/tests/test_parse_budget.py, with markers of the
caller's choosing; the TIFF writer is theirs (services/ingestion/tests/tiff_frames.py).
"""

from __future__ import annotations

import io
import random
import sys
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import docx
import openpyxl
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "ingestion" / "tests"))
from tiff_frames import deflated_zeros, tiff

MIB = 1024 * 1024
SCANNED_PAGES = 2000
XML_BOMB_BYTES = 100 * MIB
TIFF_BOMB_SIDE = 10_000


# --- PDF ----------------------------------------------------------------------------------------------


def _pdf(objects: list[bytes], root: int) -> bytes:
    """A PDF of ``objects`` (object n is ``objects[n - 1]``) with a cross-reference table."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, root, xref)
    return bytes(out)


def _stream(dictionary: bytes, data: bytes) -> bytes:
    return b"<< " + dictionary + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def _scan_image() -> bytes:
    """A small grey JPEG of typed lines: what a page of a cheap scan looks like, shrunk."""
    image = Image.new("L", (300, 120), 255)
    draw = ImageDraw.Draw(image)
    for line in range(4):
        draw.text((10, 10 + line * 26), f"Scanned contract line {line}.", fill=0)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=60)
    return buffer.getvalue()


def scanned_pdf(pages: int = SCANNED_PAGES) -> bytes:
    """A PDF of ``pages`` pages, each only the same image, and no text layer."""
    jpeg = _scan_image()
    # 1 catalog, 2 page tree, 3 image, 4 content, 5 resources, 6.. pages
    kids = b" ".join(b"%d 0 R" % (6 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Count %d /Kids [%s] >>" % (pages, kids),
        _stream(
            b"/Type /XObject /Subtype /Image /Width 300 /Height 120 /ColorSpace /DeviceGray "
            b"/BitsPerComponent 8 /Filter /DCTDecode",
            jpeg,
        ),
        _stream(b"", b"q 612 0 0 245 0 500 cm /Im0 Do Q"),
        b"<< /XObject << /Im0 3 0 R >> >>",
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources 5 0 R /Contents 4 0 R >>"
    objects += [page] * pages
    return _pdf(objects, root=1)


def text_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text layer holds ``lines`` (Helvetica, no embedded font)."""
    shown = b"".join(
        b"BT /F1 12 Tf 72 %d Td (%s) Tj ET\n" % (720 - 18 * i, line.encode("ascii"))
        for i, line in enumerate(lines)
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Count 1 /Kids [3 0 R] >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        _stream(b"", shown),
    ]
    return _pdf(objects, root=1)


def pdf_zip_polyglot(pdf: bytes, archive: bytes) -> bytes:
    """``pdf`` followed by the members of ``archive`` as a ZIP whose offsets count the PDF in front: a
    PDF reader sees the PDF (the ZIP is trailing bytes after %%EOF), a ZIP reader the archive."""
    out = io.BytesIO(pdf)
    out.seek(0, io.SEEK_END)
    source = zipfile.ZipFile(io.BytesIO(archive))
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as appended:
        for item in source.infolist():
            appended.writestr(item.filename, source.read(item.filename))
    return out.getvalue()


# --- Office files -------------------------------------------------------------------------------------


def _docx_with_body(paragraphs: Iterator[bytes]) -> bytes:
    """A DOCX (python-docx's template) whose document.xml body is ``paragraphs``, streamed in."""
    template = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("x")
    document.save(template)
    source = zipfile.ZipFile(template)
    head, tail = source.read("word/document.xml").split(b"<w:body>", 1)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                archive.writestr(item.filename, source.read(item.filename))
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(head + b"<w:body>")
            for chunk in paragraphs:
                part.write(chunk)
            part.write(tail)
    return out.getvalue()


def xml_bomb_docx(size: int = XML_BOMB_BYTES) -> bytes:
    """A DOCX whose document.xml inflates to ``size`` bytes at about 50:1. One paragraph in eight
    carries a random number, so that deflate cannot compress it past the 100:1 ratio check."""
    rng = random.Random(7)
    same = b"<w:p><w:r><w:t>The same clause applies to every item listed in the schedule.</w:t></w:r></w:p>"
    block = b"".join(
        b"<w:p><w:r><w:t>Clause %d applies.</w:t></w:r></w:p>" % rng.randrange(10**12) if i % 8 == 0 else same
        for i in range(12_000)
    )
    return _docx_with_body(iter([block] * (size // len(block))))


def docx_with_text(text: str) -> bytes:
    buffer = io.BytesIO()
    document = docx.Document()
    document.add_paragraph(text)
    document.save(buffer)
    return buffer.getvalue()


def xlsx_with_text(text: str) -> bytes:
    buffer = io.BytesIO()
    workbook = openpyxl.Workbook()
    workbook.active["A1"] = text  # type: ignore[index]
    workbook.save(buffer)
    return buffer.getvalue()


def with_entities(data: bytes, part: str, visible: str, internal_marker: str, external_file: Path) -> bytes:
    """``data`` (an Office file) whose XML part ``part`` declares an internal entity holding
    ``internal_marker`` and an external one naming ``external_file``, both referenced after ``visible``."""
    doctype = (
        f'<!DOCTYPE root [<!ENTITY secret "{internal_marker}">'
        f'<!ENTITY file SYSTEM "{external_file.as_uri()}">]>'
    )
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename == part:
                text = content.decode("utf-8")
                if text.startswith("<?xml"):
                    text = text[text.index("?>") + 2 :]
                text = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' + doctype + text.lstrip()
                assert visible in text, f"{visible!r} not in {part}"
                content = text.replace(visible, f"{visible} &secret; &file;").encode("utf-8")
            archive.writestr(item.filename, content)
    return out.getvalue()


# --- TIFF ---------------------------------------------------------------------------------------------


def tiff_with_bomb_frame(side: int = TIFF_BOMB_SIDE) -> bytes:
    """A TIFF whose second frame declares ``side`` x ``side`` pixels that really decode (zeros)."""
    first = (64, 64, zlib.compress(bytes([255]) * 64 * 64))
    return tiff([first, (side, side, deflated_zeros(side * side))])
