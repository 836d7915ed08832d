"""Every file of the office-docs evaluation set parses, each with one check a reader would notice.

The files are in ../shared/data/office-docs (the ``shared_data`` fixture skips without it). Each file is
parsed once per module: the scanned book mineru/small_ocr.pdf alone takes about 35 s of OCR.

Readability: for each ``readability/<page>-source.html`` the article text ``parse_html`` extracts is
compared with the text of ``<page>-expected.html`` (Mozilla Readability's output, tags stripped with lxml)
as sets of tokens: lower-cased Latin words and numbers, and character bigrams of Chinese runs. Recall is
the share of expected tokens found in the extraction, precision the share of extracted tokens that are in
the expected article. Measured (parse_html on trafilatura 2.3.1), recall / precision: gmw 0.997 / 1.000,
pixnet 1.000 / 1.000, qq 0.936 / 1.000 (the expected page keeps a share-button caption and the editor's
byline), youth 1.000 / 1.000; the per-page minimums below sit just under these figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import html as lxml_html

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing import ocr as ocr_module
from knowsphere_ingestion.parsing import parse
from knowsphere_ingestion.parsing.html import parse_html

# Every file of the set at the time of writing: the walk must find at least these.
MIN_FILES = 30
_SKIPPED_NAMES = ("manifest.json",)
_READABILITY_MINIMUMS = {  # page: (minimum recall, minimum precision)
    "gmw": (0.98, 0.98),
    "pixnet": (0.98, 0.98),
    "qq": (0.92, 0.98),
    "youth": (0.98, 0.98),
}
_CHINESE_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_WORD = re.compile(r"[^\W_\u3400-\u4dbf\u4e00-\u9fff]+")


def _is_evaluated(path: Path) -> bool:
    name = path.name
    return (
        path.is_file()
        and name not in _SKIPPED_NAMES
        and not name.upper().startswith("README")
        and "-expected" not in name
    )


@pytest.fixture(scope="module")
def office_docs(shared_data: Path) -> Path:
    return shared_data / "office-docs"


@pytest.fixture(scope="module")
def parsed(office_docs: Path) -> Callable[[str], ParsedDocument]:
    """Parse a file of the set (relative path) once per module."""
    cache: dict[str, ParsedDocument] = {}

    def get(relative: str) -> ParsedDocument:
        if relative not in cache:
            path = office_docs / relative
            if not path.is_file():
                pytest.skip(f"evaluation file {path} is absent")
            cache[relative] = parse(path.read_bytes(), path.name)
        return cache[relative]

    return get


def test_every_file_parses_to_text(office_docs: Path, parsed: Callable[[str], ParsedDocument]) -> None:
    files = sorted(
        path.relative_to(office_docs).as_posix() for path in office_docs.rglob("*") if _is_evaluated(path)
    )
    assert len(files) >= MIN_FILES, files
    needs_ocr = {"chatchat/ocr_test.jpg", "unstructured/chi_sim_image.jpeg", "mineru/small_ocr.pdf"}
    empty = []
    for relative in files:
        if relative in needs_ocr and not ocr_module.ocr_available():
            continue
        doc = parsed(relative)  # a ParseError fails the test, naming the file
        if not doc.text.strip():
            empty.append(relative)
    assert not empty, f"no text from {empty}"


def _table_block(doc: ParsedDocument, index: int) -> Block:
    return [block for block in doc.blocks if block.kind == "table"][index]


def _table(doc: ParsedDocument, index: int = 0) -> tuple[tuple[str, ...], ...]:
    return _table_block(doc, index).rows


def _squashed(doc: ParsedDocument) -> str:
    return "".join(doc.text.split())


# One check per file, each on something no other test module asserts.
FILE_CHECKS: list[tuple[str, Callable[[ParsedDocument], object]]] = [
    ("chatchat/langchain-ChatGLM_closed.xlsx", lambda d: _table(d)[1][1] == "加油~以及一些建议"),
    (
        "chatchat/langchain-ChatGLM_open.csv",
        lambda d: _table(d)[2][3].endswith("langchain-ChatGLM/issues/15"),
    ),
    ("chatchat/langchain-ChatGLM_open.xlsx", lambda d: d.blocks[0].text == "Sheet1" and len(_table(d)) > 300),
    (
        "chatchat/langchain.pdf",
        lambda d: any(
            b.page == 2 and b.text.startswith("Keywords – Large Language Models, LangChain, Concepts")
            for b in d.blocks
        ),
    ),
    ("chatchat/ocr_test.docx", lambda d: [b.kind for b in d.blocks] == ["paragraph", "table"]),
    ("chatchat/ocr_test.jpg", lambda d: (d.metadata["width"], d.metadata["height"]) == ("298", "210")),
    ("chatchat/ocr_test.pdf", lambda d: d.page_count == 1 and d.blocks[0].text == "我是文字"),
    (
        "chatchat/ocr_test.pptx",
        lambda d: _table(d) == (("我是表格1", "我是表格5"), ("我是表格3", "我是表格4")),
    ),
    (
        "chatchat/test.txt",
        lambda d: d.blocks[0].text == "ChatGPT是OpenAI开发的一个大型语言模型，可以提供各种主题的信息，",
    ),
    (
        "chatchat/分布式训练技术原理.md",
        lambda d: any(b.text.startswith("FSDP算法是由来自DeepSpeed") for b in d.blocks),
    ),
    ("chatchat/大模型应用技术原理.md", lambda d: "redis,pgvector,milvus" in d.text),
    (
        "chatchat/大模型技术栈-算法与原理.md",
        lambda d: "将optimizer state分成若干份，每块GPU上各自维护一份" in d.text,
    ),
    ("chatchat/大模型推理优化策略.md", lambda d: "现有系统浪费了 60% - 80% 的显存" in d.text),
    (
        "markitdown/test.docx",
        lambda d: (
            d.blocks[0].text == "AutoGen: Enabling Next-Gen LLM Applications via Multi-Agent Conversation"
        ),
    ),
    (
        "markitdown/test.pdf",
        lambda d: any(b.text == "3We refer to Appendix A for a detailed discussion." for b in d.blocks),
    ),
    (
        "markitdown/test.pptx",
        lambda d: d.title == "AutoGen: Enabling Next-Gen LLM Applications via Multi-Agent Conversation",
    ),
    (
        "markitdown/test.xlsx",
        lambda d: _table_block(d, 1).heading_path == ("09060124-b5e7-4717-9d07-3c046eb",),
    ),
    (
        "markitdown/test_wikipedia.html",
        lambda d: any(b.heading_path == ("Microsoft", "History", "1972–1985: Founding") for b in d.blocks),
    ),
    (
        "mineru/demo1.pdf",
        lambda d: any(
            b.page == 1
            and b.text == "Keywords: Afforestation; Flow duration curves; Flow reduction; Paired catchments"
            for b in d.blocks
        ),
    ),
    ("mineru/docx_01.docx", lambda d: d.blocks[0].text == "MinerU supports DOCX document parsing now"),
    ("mineru/pptx_01.pptx", lambda d: d.title == "Test Table Slide" and d.page_count == 6),
    (
        "mineru/small_ocr.pdf",
        lambda d: (
            d.metadata.get("ocr_pages") == "1,2,3,4,5,6,7,8"
            and "自然本身那样发挥作用" in "".join(b.text for b in d.blocks if b.page == 8).replace(" ", "")
        ),
    ),
    ("mineru/xlsx_01.xlsx", lambda d: _table(d, 1)[0][:4] == ("col-1", "col-2", "col-3", "col-4")),
    ("pdftools/chinese.pdf", lambda d: "所有現金客戶到期之總金額達到約17,300,000港元" in d.text),
    ("readability/gmw-source.html", lambda d: d.title == "宇航员在太空中喝酒会怎么样？后果很严重"),
    ("readability/pixnet-source.html", lambda d: d.title.startswith("新竹尖石_美樹營地賞楓")),
    ("readability/qq-source.html", lambda d: d.blocks[0].text == "TNW中文站 10月14日报道"),
    (
        "readability/youth-source.html",
        lambda d: d.title == "海外留学生看两会：出国前后关注点大不同_教育频道_中国青年网",
    ),
    ("unstructured/chi_sim_image.jpeg", lambda d: "油脂分泌过多" in _squashed(d)),
    ("unstructured/simplified_chinese.pdf", lambda d: any(b.text == "英文翻译：戴 薇" for b in d.blocks)),
]
_OCR_FILES = {
    "chatchat/ocr_test.jpg",
    "chatchat/ocr_test.pdf",
    "mineru/small_ocr.pdf",
    "unstructured/chi_sim_image.jpeg",
}


@pytest.mark.parametrize(("relative", "check"), FILE_CHECKS, ids=[relative for relative, _ in FILE_CHECKS])
def test_file_specific_content(
    relative: str, check: Callable[[ParsedDocument], object], parsed: Callable[[str], ParsedDocument]
) -> None:
    if relative in _OCR_FILES and not ocr_module.ocr_available():
        pytest.skip("OCR engine rapidocr-onnxruntime missing")
    assert check(parsed(relative)), relative


def test_file_checks_cover_every_file(office_docs: Path) -> None:
    files = {
        path.relative_to(office_docs).as_posix() for path in office_docs.rglob("*") if _is_evaluated(path)
    }
    assert files == {relative for relative, _ in FILE_CHECKS}


# --- readability ------------------------------------------------------------------------------------


def _tokens(text: str) -> set[str]:
    lowered = text.lower()
    tokens = set(_WORD.findall(lowered))
    for run in _CHINESE_RUN.findall(lowered):
        tokens.update(run[index : index + 2] for index in range(max(1, len(run) - 1)))
    return tokens


@pytest.mark.parametrize("page", sorted(_READABILITY_MINIMUMS))
def test_readability_article_tokens(page: str, office_docs: Path) -> None:
    folder = office_docs / "readability"
    source = folder / f"{page}-source.html"
    expected_page = folder / f"{page}-expected.html"
    if not (source.is_file() and expected_page.is_file()):
        pytest.skip(f"readability page {page} is absent")
    doc = parse_html(source.read_bytes(), source.name)
    expected = _tokens(lxml_html.fromstring(expected_page.read_bytes().decode("utf-8")).text_content())
    extracted = _tokens(doc.text)
    common = expected & extracted
    recall, precision = len(common) / len(expected), len(common) / len(extracted)
    min_recall, min_precision = _READABILITY_MINIMUMS[page]
    assert recall >= min_recall, (page, recall, sorted(expected - extracted)[:20])
    assert precision >= min_precision, (page, precision, sorted(extracted - expected)[:20])
