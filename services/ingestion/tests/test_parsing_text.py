"""Parsing of the text-like formats (TXT, Markdown, HTML, CSV) against real files and synthetic bytes.

The real files come from /work/shared/data/office-docs; those tests skip when the folder is absent.

Readability measure: the expected article's block texts (p, h1-h6, li, td, th, pre, blockquote; whitespace
removed) are looked up in the extracted text. Recall is the share of the expected characters whose block is
found; precision is the share of extracted characters whose block occurs in the expected article. The
expected pages (Mozilla Readability output) keep a few bylines and share-button captions that are
boilerplate, so recall is required at >= 85% per page and >= 95% over the four pages together.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lxml import html as lxml_html

from knowsphere_ingestion.parsing import ParseError, ParseErrorCode, UnsupportedFormat, parse

DATA = Path("/work/shared/data/office-docs")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"evaluation data folder {DATA} is absent")

READABILITY_PAGES = ("gmw", "pixnet", "qq", "youth")
MIN_PAGE_RECALL = 0.85
MIN_TOTAL_RECALL = 0.95
MIN_PAGE_PRECISION = 0.95
_SPACE = re.compile(r"\s+")
_EXPECTED_BLOCK_TAGS = ("p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th", "pre", "blockquote")
_LEAF_ANCESTORS = {"p", "li", "td", "th", "pre"}


def _read(relative: str) -> bytes:
    return (DATA / relative).read_bytes()


def _squash(text: str) -> str:
    return _SPACE.sub("", text)


# --- real files -------------------------------------------------------------------------------------


@needs_data
def test_txt_keeps_known_sentence_and_splits_paragraphs() -> None:
    doc = parse(_read("chatchat/test.txt"), "test.txt")
    assert doc.metadata["encoding"] == "utf-8"
    assert doc.language == "zh"
    assert any(
        block.text.startswith("我们将探讨如何使用不同的提示工程技术来实现不同的目标。")
        for block in doc.blocks
    )
    assert len(doc.blocks) > 100


@needs_data
@pytest.mark.parametrize(
    ("name", "known_item"),
    [
        ("分布式训练技术原理.md", "数据并行"),
        ("大模型应用技术原理.md", "RAG"),
        ("大模型技术栈-算法与原理.md", "tokenizer方法"),
        ("大模型推理优化策略.md", "显存优化"),
    ],
)
def test_markdown_heading_paths(name: str, known_item: str) -> None:
    title = name.removesuffix(".md")
    doc = parse(_read(f"chatchat/{name}"), name)
    assert doc.title == title
    assert doc.blocks[0] == doc.blocks[0].__class__(
        kind="heading", text=title, heading_path=(title,), level=1
    )
    items = [block for block in doc.blocks if block.kind == "list_item"]
    assert items and all(block.heading_path == (title,) for block in items)
    assert any(known_item in block.text for block in items)
    # Nested list markers are not left in the text.
    assert not any(block.text.startswith(("- ", "* ")) for block in items)


@needs_data
def test_wikipedia_article_kept_navigation_dropped() -> None:
    doc = parse(_read("markitdown/test_wikipedia.html"), "test_wikipedia.html")
    assert doc.title == "Microsoft - Wikipedia"
    assert "Microsoft was founded by Bill Gates and Paul Allen on April 4, 1975" in doc.text
    for boilerplate in ("Main page", "Random article", "Create account", "Privacy policy", "Jump to content"):
        assert boilerplate not in doc.text, boilerplate
    infobox = next(block for block in doc.blocks if block.kind == "table")
    assert ("ISIN", "US5949181045") in infobox.rows


def _expected_blocks(page: str) -> list[str]:
    tree = lxml_html.fromstring(_read(f"readability/{page}-expected.html").decode("utf-8"))
    blocks = []
    for element in tree.iter(*_EXPECTED_BLOCK_TAGS):
        if any(ancestor.tag in _LEAF_ANCESTORS for ancestor in element.iterancestors()):
            continue
        text = _squash(element.text_content())
        if text:
            blocks.append(text)
    return blocks


def _readability_scores(page: str) -> tuple[int, int, float]:
    """(expected chars, found expected chars, precision) for one page."""
    doc = parse(_read(f"readability/{page}-source.html"), f"{page}-source.html")
    extracted = _squash(doc.text)
    expected = _expected_blocks(page)
    expected_all = "".join(expected)
    found = sum(len(block) for block in expected if block in extracted)
    extracted_blocks = [_squash(block.text) for block in doc.blocks]
    kept = sum(len(block) for block in extracted_blocks if block in expected_all)
    precision = kept / max(1, sum(len(block) for block in extracted_blocks))
    return sum(len(block) for block in expected), found, precision


@needs_data
def test_readability_pages_keep_the_article_and_little_else() -> None:
    total_expected = total_found = 0
    for page in READABILITY_PAGES:
        expected, found, precision = _readability_scores(page)
        assert found / expected >= MIN_PAGE_RECALL, (page, found, expected)
        assert precision >= MIN_PAGE_PRECISION, (page, precision)
        total_expected += expected
        total_found += found
    assert total_found / total_expected >= MIN_TOTAL_RECALL


@needs_data
def test_readability_title_and_known_sentence() -> None:
    doc = parse(_read("readability/qq-source.html"), "qq-source.html", "text/html")
    assert doc.title == "DeepMind新电脑已可利用记忆自学 人工智能迈上新台阶"
    assert "DeepMind称，DNC还可以帮你规划从沼泽门到皮卡迪利广场的最佳路线。" in doc.text
    assert "Copyright" not in doc.text


@needs_data
def test_csv_is_one_table_with_header_first() -> None:
    doc = parse(_read("chatchat/langchain-ChatGLM_open.csv"), "langchain-ChatGLM_open.csv")
    assert [block.kind for block in doc.blocks] == ["table"]
    rows = doc.blocks[0].rows
    assert rows[0][:6] == ("", "title", "file", "url", "detail", "id")
    assert rows[1][1] == "效果如何优化"
    assert any(row[1] == "萌新求教大佬怎么改成AMD显卡或者CPU？" for row in rows)
    assert doc.metadata["delimiter"] == ","


# --- synthetic bytes --------------------------------------------------------------------------------

SIMPLIFIED = "知识库的文档解析需要正确识别编码。\n\n第二段：简体中文测试。"
TRADITIONAL = "知識庫的文件解析需要正確識別編碼。\n\n第二段：繁體中文測試。"


def test_gbk_text_decodes() -> None:
    doc = parse(SIMPLIFIED.encode("gbk"), "notes.txt")
    assert [block.text for block in doc.blocks] == SIMPLIFIED.split("\n\n")
    assert doc.metadata["encoding"] in {"gb18030", "gbk", "gb2312"}


def test_big5_text_decodes() -> None:
    doc = parse(TRADITIONAL.encode("big5"), "notes.txt")
    assert [block.text for block in doc.blocks] == TRADITIONAL.split("\n\n")
    assert doc.metadata["encoding"] == "big5"


def test_utf8_bom_is_stripped() -> None:
    doc = parse(b"\xef\xbb\xbf" + "标题行\n\n正文".encode(), "bom.txt")
    assert doc.blocks[0].text == "标题行"
    assert doc.metadata["encoding"] == "utf-8-sig"


def test_gbk_csv_decodes() -> None:
    doc = parse("名称;数量\n苹果;3\n".encode("gbk"), "fruit.csv", "text/csv")
    assert doc.blocks[0].rows == (("名称", "数量"), ("苹果", "3"))


def test_markdown_structure() -> None:
    source = (
        "# 手册\n\n简介段落。\n\n## 安装\n\n- 第一步\n- 第二步\n\n```bash\npip install x\n```\n\n"
        "### 配置\n\n| 键 | 值 |\n| --- | :-: |\n| port | 8080 |\n\n## 使用\n\n正文。\n"
    )
    doc = parse(source.encode(), "guide.md")
    kinds = [(block.kind, block.heading_path) for block in doc.blocks]
    assert kinds == [
        ("heading", ("手册",)),
        ("paragraph", ("手册",)),
        ("heading", ("手册", "安装")),
        ("list_item", ("手册", "安装")),
        ("list_item", ("手册", "安装")),
        ("code", ("手册", "安装")),
        ("heading", ("手册", "安装", "配置")),
        ("table", ("手册", "安装", "配置")),
        ("heading", ("手册", "使用")),
        ("paragraph", ("手册", "使用")),
    ]
    table = doc.blocks[7]
    assert table.rows == (("键", "值"), ("port", "8080"))
    assert doc.blocks[5].text == "pip install x"


def test_empty_file_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"empty\.txt is empty") as error:
        parse(b"", "empty.txt")
    assert error.value.code == ParseErrorCode.EMPTY_DOCUMENT
    with pytest.raises(ParseError, match=r"blank\.md is empty") as error:
        parse(b"  \n\t\n", "blank.md")
    assert error.value.code == ParseErrorCode.EMPTY_DOCUMENT


def test_binary_blob_named_txt_is_a_parse_error() -> None:
    blob = bytes(range(256)) * 16
    with pytest.raises(ParseError, match=r"blob\.txt is not a text file") as error:
        parse(blob, "blob.txt")
    assert error.value.code == ParseErrorCode.CORRUPT_FILE


def test_unknown_extension_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormat, match=r"'\.xyz'.*\.csv, .*\.txt") as error:
        parse(b"hello", "data.xyz")
    assert error.value.code == ParseErrorCode.UNSUPPORTED_FORMAT


def test_content_type_used_without_extension() -> None:
    doc = parse(b"<html><body><p>Hello there.</p></body></html>", "upload", "text/html; charset=utf-8")
    assert "Hello there." in doc.text


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        (
            "blank.html",
            b"<html><head><script>var x = 1;</script></head><body>  </body></html>",
            "no visible text",
        ),
        ("commas.csv", b",,,\n,,\n", "has no rows"),
    ],
)
def test_a_file_with_nothing_to_read_is_an_empty_document(name: str, data: bytes, words: str) -> None:
    with pytest.raises(ParseError, match=words) as error:
        parse(data, name)
    assert error.value.code == ParseErrorCode.EMPTY_DOCUMENT


def test_an_unsupported_format_is_a_parse_error_with_its_code() -> None:
    with pytest.raises(ParseError) as error:
        parse(b"hello", "data.xyz")
    assert isinstance(error.value, UnsupportedFormat)
    assert error.value.code == ParseErrorCode.UNSUPPORTED_FORMAT
