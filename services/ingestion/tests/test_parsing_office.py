"""Parsing of Office OOXML files (DOCX, PPTX, XLSX) against real files and synthetic bytes.

The real files come from /work/shared/data/office-docs; those tests skip when the folder is absent.
"""

from __future__ import annotations

import io
import os
import resource
import time
import zipfile
from pathlib import Path

import pytest

from knowsphere_ingestion.parsing import ParseError, ParseErrorCode, parse

DATA = Path("/work/shared/data/office-docs")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"evaluation data folder {DATA} is absent")


def _read(relative: str) -> bytes:
    path = DATA / relative
    if not path.is_file():
        pytest.skip(f"evaluation file {path} is absent")
    return path.read_bytes()


# --- DOCX -------------------------------------------------------------------------------------------


@needs_data
def test_docx_markitdown_heading_paths_and_table() -> None:
    doc = parse(_read("markitdown/test.docx"), "test.docx")
    abstract = next(b for b in doc.blocks if b.text.startswith("AutoGen is an open-source framework"))
    assert abstract.kind == "paragraph"
    assert abstract.heading_path == ("Abstract",)
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.rows[1] == ("7", "8", "9", "10", "11", "12")
    assert table.heading_path[0] == "Introduction"
    # Document order: the sentence introducing the table comes right before it.
    index = doc.blocks.index(table)
    assert doc.blocks[index - 1].text == "Here is a random table for .docx parsing test purposes:"


@needs_data
def test_docx_mineru_nested_headings_and_list_items() -> None:
    doc = parse(_read("mineru/docx_01.docx"), "docx_01.docx")
    heading = next(b for b in doc.blocks if b.kind == "heading" and b.text == "Table with rich cells")
    assert heading.level == 3
    assert heading.heading_path == ("1 这是第一章标题", "Many Tables", "Table with rich cells")
    assert any(b.kind == "list_item" and b.text == "Italic bullet 1" for b in doc.blocks)
    assert doc.language == "zh"


@needs_data
def test_docx_chatchat_text_and_table_cells() -> None:
    doc = parse(_read("chatchat/ocr_test.docx"), "ocr_test.docx")
    assert doc.blocks[0].text == "我是文字"
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.rows == (("我是表格1", "我是表格2"), ("我是表格3", "我是表格4"))


# --- PPTX -------------------------------------------------------------------------------------------


@needs_data
def test_pptx_markitdown_slide_table_and_page() -> None:
    doc = parse(_read("markitdown/test.pptx"), "test.pptx")
    assert doc.page_count == 6
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.page == 3
    assert table.heading_path == ("Slide 3: A table to test parsing:",)
    assert table.rows[0] == ("ColA", "ColB", "ColC", "ColD", "ColE", "ColF")
    # Text inside grouped shapes is read.
    nested = next(b for b in doc.blocks if b.text == "This is a nested shape with content in 2 shapes")
    assert nested.page == 5


@needs_data
def test_pptx_mineru_speaker_notes_and_untitled_slide() -> None:
    doc = parse(_read("mineru/pptx_01.pptx"), "pptx_01.pptx")
    notes = next(b for b in doc.blocks if b.text == "Some notes on the second slide.")
    assert notes.kind == "paragraph"
    assert notes.page == 2
    assert notes.heading_path == ("Slide 2: Second slide title",)
    assert any(b.kind == "heading" and b.heading_path == ("Slide 3",) and b.page == 3 for b in doc.blocks)


# --- XLSX -------------------------------------------------------------------------------------------


@needs_data
def test_xlsx_markitdown_one_table_per_sheet() -> None:
    doc = parse(_read("markitdown/test.xlsx"), "test.xlsx")
    tables = [b for b in doc.blocks if b.kind == "table"]
    assert len(tables) == 2
    assert tables[0].heading_path == ("Sheet1",)
    assert tables[0].rows[0] == ("Alpha", "Beta", "Gamma", "Delta")
    assert tables[0].rows[1] == ("89", "82", "100", "12")  # whole numbers rendered without ".0"


@needs_data
def test_xlsx_mineru_sheets_and_cells() -> None:
    doc = parse(_read("mineru/xlsx_01.xlsx"), "xlsx_01.xlsx")
    tables = {b.heading_path[0]: b for b in doc.blocks if b.kind == "table"}
    assert list(tables) == ["Sheet1", "Sheet2", "Sheet3", "Sheet4"]
    assert tables["Sheet1"].rows[:2] == (("first 123", "second 123", "third 123"), ("1", "5", "9"))
    assert tables["Sheet4"].rows == (("header",), ("1",))


@needs_data
def test_xlsx_chatchat_chinese_cells() -> None:
    doc = parse(_read("chatchat/langchain-ChatGLM_open.xlsx"), "langchain-ChatGLM_open.xlsx")
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.rows[0][1:] == ("title", "file", "url", "detail", "id")
    assert table.rows[1][1] == "效果如何优化"
    assert doc.language == "zh"


# --- dispatch and synthetic bytes -------------------------------------------------------------------


def _tiny_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Top", level=1)
    document.add_paragraph("Body text.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_docx_dispatch_by_content_type() -> None:
    mime = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    doc = parse(_tiny_docx(), "upload", mime)
    assert [(b.kind, b.text, b.heading_path) for b in doc.blocks] == [
        ("heading", "Top", ("Top",)),
        ("paragraph", "Body text.", ("Top",)),
    ]


@pytest.mark.parametrize("name", ["broken.docx", "broken.pptx", "broken.xlsx"])
def test_random_bytes_raise_parse_error(name: str) -> None:
    with pytest.raises(ParseError, match=name.replace(".", r"\.")) as error:
        parse(os.urandom(4096), name)
    assert error.value.code == ParseErrorCode.CORRUPT_FILE


def test_zip_that_is_not_ooxml_raises_parse_error() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a word document")
    with pytest.raises(ParseError, match=r"notword\.docx") as error:
        parse(buffer.getvalue(), "notword.docx")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    """A ~4.5 MB zip (fastest deflate level) holding one 1 GiB member of zeros, written by streaming."""
    buffer = io.BytesIO()
    chunk = bytes(1024 * 1024)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as member:
            for _ in range(1024):
                member.write(chunk)
    return buffer.getvalue()


def test_zip_bomb_docx_is_rejected_quickly_without_memory_growth(zip_bomb: bytes) -> None:
    assert len(zip_bomb) < 8 * 1024 * 1024
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(ParseError, match=r"bomb\.docx.*over the limit of 209715200 bytes") as error:
        parse(zip_bomb, "bomb.docx")
    assert error.value.code == ParseErrorCode.ARCHIVE_TOO_LARGE
    assert time.monotonic() - started < 1.0
    peak_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert peak_growth_kib < 50 * 1024


def test_many_members_and_high_ratio_are_rejected() -> None:
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as archive:
        for index in range(10_001):
            archive.writestr(f"m{index}", b"")
    with pytest.raises(ParseError, match=r"over the limit of 10000") as error:
        parse(many.getvalue(), "many.xlsx")
    assert error.value.code == ParseErrorCode.ARCHIVE_TOO_LARGE

    dense = io.BytesIO()
    with zipfile.ZipFile(dense, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("ppt/presentation.xml", bytes(20 * 1024 * 1024))
    with pytest.raises(ParseError, match=r"over the limit of 100:1") as error:
        parse(dense.getvalue(), "dense.pptx")
    assert error.value.code == ParseErrorCode.ARCHIVE_TOO_LARGE
