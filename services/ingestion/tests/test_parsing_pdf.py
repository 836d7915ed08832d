"""Parsing of PDF files and images: text layer, Chinese CID fonts, headings, OCR of scans, broken input.

The real files come from ../shared/data/office-docs (the ``shared_data`` fixture skips without it). OCR is
slow (about 5 s per scanned page on two cores), so each OCR case runs once, in a module-scoped fixture.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from knowsphere_ingestion.domain.document import ParsedDocument
from knowsphere_ingestion.parsing import ParseError, ParseErrorCode, parse
from knowsphere_ingestion.parsing import ocr as ocr_module
from knowsphere_ingestion.parsing.image import MAX_IMAGE_PIXELS
from knowsphere_ingestion.parsing.pdf import parse_pdf

needs_ocr = pytest.mark.skipif(
    not ocr_module.ocr_available(), reason="OCR engine rapidocr-onnxruntime missing"
)


@pytest.fixture(scope="module")
def office_docs(shared_data: Path) -> Path:
    return shared_data / "office-docs"


def _parse(folder: Path, relative: str) -> ParsedDocument:
    path = folder / relative
    if not path.is_file():
        pytest.skip(f"evaluation file {path} is absent")
    return parse(path.read_bytes(), path.name)


def _squash(text: str) -> str:
    return "".join(text.split())


def _pdf_bytes(document: pdfium.PdfDocument) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


# --- text layer ------------------------------------------------------------------------------------


def test_langchain_paper_title_pages_and_wrapped_sentence(office_docs: Path) -> None:
    doc = _parse(office_docs, "chatchat/langchain.pdf")
    assert doc.page_count == 8
    assert doc.title == (
        "Creating Large Language Model Applications Utilizing LangChain: A Primer on Developing LLM Apps Fast"
    )
    # The sentence is wrapped over four lines in the PDF: it comes back as one paragraph on page 3.
    sentence = (
        "A large language model (LLM) is a subtype of artificial intelligence model that generates text "
        "with human-like proficiency."
    )
    block = next(b for b in doc.blocks if sentence in b.text)
    assert block.kind == "paragraph"
    assert block.page == 3
    assert doc.language == "en"
    assert doc.metadata == {"format": "pdf"}  # a born-digital PDF needs no OCR


def test_markitdown_bold_heading_and_paragraph(office_docs: Path) -> None:
    doc = _parse(office_docs, "markitdown/test.pdf")
    assert doc.page_count == 1
    assert (doc.blocks[0].kind, doc.blocks[0].text, doc.blocks[0].page) == ("heading", "1 Introduction", 1)
    paragraph = doc.blocks[1]
    assert paragraph.heading_path == ("1 Introduction",)
    assert paragraph.text.startswith(
        "Large language models (LLMs) are becoming a crucial building block in developing powerful agents "
        "that utilize LLMs for reasoning, tool usage, and adapting to new observations"
    )


def test_mineru_two_column_paper_sections_and_hyphenation(office_docs: Path) -> None:
    doc = _parse(office_docs, "mineru/demo1.pdf")
    assert doc.page_count == 13
    # The metadata title is a DOI, so the largest line of page 1 is taken instead.
    assert doc.title == "The response of flow duration curves to afforestation"
    section = next(
        b for b in doc.blocks if b.kind == "heading" and b.text == "2.1. Characterisation of flow regime"
    )
    assert section.page == 3
    assert section.heading_path[-2:] == ("2. Methods", "2.1. Characterisation of flow regime")
    assert {b.text for b in doc.blocks if b.kind == "heading"} >= {"4. Results", "6. Summary and conclusions"}
    # "estab-" / "lishment" at a line end are joined back into one word.
    intro = next(b for b in doc.blocks if b.text.startswith("Widespread afforestation"))
    assert intro.page == 2
    assert "through plantation establishment on non-forested land" in intro.text
    assert intro.heading_path[-1] == "1. Introduction"


def test_traditional_chinese_cid_font_without_spaces(office_docs: Path) -> None:
    doc = _parse(office_docs, "pdftools/chinese.pdf")
    assert doc.language == "zh"
    assert doc.title == "風險因素"
    assert "(cid:" not in doc.text and "\ufffd" not in doc.text
    # The first sentence wraps twice and carries a justification gap: it comes back whole, without spaces.
    first = next(b for b in doc.blocks if b.text.startswith("本集團現金客戶"))
    assert first.text.startswith(
        "本集團現金客戶須於交易日後兩個營業日（「T+2」）內結算其交易金額。倘若客戶（現金客戶或保證金客戶）"
        "無法結算交易金額"
    )
    assert first.heading_path == ("風險因素", "信貸風險")
    assert [b.text for b in doc.blocks if b.kind == "heading"] == ["風險因素", "信貸風險", "保證金融資風險"]


def test_simplified_chinese_cid_font(office_docs: Path) -> None:
    doc = _parse(office_docs, "unstructured/simplified_chinese.pdf")
    assert doc.page_count == 1
    assert doc.language == "zh"
    assert "中华人民共和国国务院侨务办公室" in doc.text
    assert "责任编辑：李 战 吕肖剑 李 艺 杜小陆 沈凤玲" in doc.text
    assert "美术编辑：李海燕" in doc.text
    assert all(block.page == 1 for block in doc.blocks)


# --- OCR -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ocr_test_pdf(office_docs: Path) -> ParsedDocument:
    return _parse(office_docs, "chatchat/ocr_test.pdf")


@pytest.fixture(scope="module")
def small_ocr_two_pages(office_docs: Path) -> ParsedDocument:
    """Pages 2 and 3 of the scanned book (OCR of all 8 pages takes about 35 s, too long for this suite)."""
    path = office_docs / "mineru/small_ocr.pdf"
    if not path.is_file():
        pytest.skip(f"evaluation file {path} is absent")
    source = pdfium.PdfDocument(path.read_bytes())
    subset = pdfium.PdfDocument.new()
    subset.import_pages(source, [1, 2])
    return parse(_pdf_bytes(subset), "small_ocr_p2-3.pdf")


@needs_ocr
def test_sparse_text_page_is_ocred_with_its_text_boxes(ocr_test_pdf: ParsedDocument) -> None:
    doc = ocr_test_pdf
    assert doc.metadata["ocr_pages"] == "1"
    text = _squash(doc.text)
    for expected in ("我是文字", "横向文本框", "竖向文本框"):
        assert expected in text
    assert "englishtext" in text.lower()
    assert all(block.page == 1 for block in doc.blocks)


@needs_ocr
def test_scanned_book_pages_are_ocred_in_page_order(small_ocr_two_pages: ParsedDocument) -> None:
    doc = small_ocr_two_pages
    assert doc.page_count == 2
    assert doc.metadata["ocr_pages"] == "1,2"
    assert doc.language == "zh"
    page_one = _squash(" ".join(b.text for b in doc.blocks if b.page == 1))
    page_two = _squash(" ".join(b.text for b in doc.blocks if b.page == 2))
    assert "某种特殊的商品，例如一夸特小麦" in page_one
    assert "用一个初级几何的例子就可以说明这一点" in page_one
    assert "如果把商品的使用价值撇开" in page_two or "劳动产品这个性质" in page_two
    # Lines wrapped inside a paragraph are joined: the wrapped sentence is in one block.
    assert any("按各种极不相同的比例同别的商品交换" in _squash(b.text) for b in doc.blocks)


def test_scan_without_ocr_engine_lists_missing_pages(
    office_docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ocr_module, "ocr_available", lambda: False)
    scanned = _parse(office_docs, "mineru/small_ocr.pdf")
    assert scanned.page_count == 8
    assert scanned.metadata["ocr_missing_pages"] == "1,2,3,4,5,6,7,8"
    assert scanned.blocks == []
    sparse = _parse(office_docs, "chatchat/ocr_test.pdf")
    assert sparse.metadata["ocr_missing_pages"] == "1"
    assert sparse.text == "我是文字"  # the text layer is kept
    image = _parse(office_docs, "chatchat/ocr_test.jpg")
    assert [(b.kind, b.text) for b in image.blocks] == [("image", "")]
    assert image.metadata["ocr_missing_pages"] == "1"


@needs_ocr
def test_image_ocr_chinese_and_english(office_docs: Path) -> None:
    doc = _parse(office_docs, "chatchat/ocr_test.jpg")
    assert [b.kind for b in doc.blocks] == ["image"]
    text = _squash(doc.blocks[0].text)
    assert "横向文本框" in text and "竖向文本框" in text
    assert "englishtext" in text.lower()
    assert doc.metadata["format"] == "jpeg"


@needs_ocr
def test_image_ocr_chinese_paragraph(office_docs: Path) -> None:
    doc = _parse(office_docs, "unstructured/chi_sim_image.jpeg")
    text = _squash(doc.text)
    assert "甘草黄酮" in text
    assert "适用人群" in text
    assert doc.language == "zh"


def test_image_by_content_type_and_decompression_bomb() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 32), "white").save(buffer, format="PNG")
    doc = parse(buffer.getvalue(), "upload", "image/png")
    assert [b.kind for b in doc.blocks] == ["image"]
    assert doc.metadata["width"] == "64"

    # A PNG header declaring 20000 x 20000 pixels, refused before any pixel is decoded.
    header = struct.pack(">IIBBBBB", 20_000, 20_000, 8, 2, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IEND", b"")
    with pytest.raises(
        ParseError, match=rf"bomb\.png is too large.*over the limit of {MAX_IMAGE_PIXELS} pixels"
    ):
        parse(bomb, "bomb.png")


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def test_broken_images_raise_parse_error() -> None:
    with pytest.raises(ParseError, match=r"noise\.jpg is not a readable image") as error:
        parse(os.urandom(4096), "noise.jpg")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE
    buffer = io.BytesIO()
    Image.effect_noise((400, 400), 50).convert("RGB").save(buffer, format="JPEG")
    with pytest.raises(ParseError, match=r"cut\.jpg is corrupt or truncated") as error:
        parse(buffer.getvalue()[: len(buffer.getvalue()) // 2], "cut.jpg")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE


# --- broken, encrypted and oversized PDFs ----------------------------------------------------------


def test_truncated_and_random_pdfs_raise_parse_error(office_docs: Path) -> None:
    path = office_docs / "mineru/demo1.pdf"
    if not path.is_file():
        pytest.skip(f"evaluation file {path} is absent")
    data = path.read_bytes()
    with pytest.raises(
        ParseError, match=r"cut\.pdf is not a valid PDF file \(corrupt or truncated\)"
    ) as error:
        parse(data[: len(data) // 2], "cut.pdf")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE
    with pytest.raises(ParseError, match=r"noise\.pdf is not a PDF file") as error:
        parse(os.urandom(8192), "noise.pdf")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE
    with pytest.raises(ParseError, match=r"garbage\.pdf is not a valid PDF file") as error:
        parse(b"%PDF-1.7\n" + os.urandom(8192), "garbage.pdf")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE
    with pytest.raises(ParseError, match=r"empty\.pdf is empty") as error:
        parse(b"", "empty.pdf")
    assert error.value.code == ParseErrorCode.EMPTY_DOCUMENT


def _three_page_pdf() -> bytes:
    document = pdfium.PdfDocument.new()
    for _ in range(3):
        document.new_page(200, 200)
    return _pdf_bytes(document)


def test_encrypted_pdf_needs_a_password() -> None:
    pypdf = pytest.importorskip("pypdf", reason="pypdf writes the encrypted test PDF")
    reader = pypdf.PdfReader(io.BytesIO(_three_page_pdf()))
    locked = pypdf.PdfWriter()
    for page in reader.pages:
        locked.add_page(page)
    locked.encrypt(user_password="secret", owner_password="owner", algorithm="AES-128")
    buffer = io.BytesIO()
    locked.write(buffer)
    with pytest.raises(ParseError, match=r"locked\.pdf is encrypted") as error:
        parse(buffer.getvalue(), "locked.pdf")
    assert error.value.code == ParseErrorCode.ENCRYPTED

    # Encrypted with an empty user password (only editing is restricted): it opens.
    restricted = pypdf.PdfWriter()
    for page in reader.pages:
        restricted.add_page(page)
    restricted.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    buffer = io.BytesIO()
    restricted.write(buffer)
    assert parse(buffer.getvalue(), "restricted.pdf", "application/pdf").page_count == 3


def test_page_limit_is_enforced() -> None:
    data = _three_page_pdf()
    with pytest.raises(ParseError, match=r"big\.pdf has 3 pages, over the limit of 2 pages") as error:
        parse_pdf(data, "big.pdf", max_pages=2)
    assert error.value.code == ParseErrorCode.DOCUMENT_TOO_LARGE
    assert parse_pdf(data, "ok.pdf", max_pages=3).page_count == 3
