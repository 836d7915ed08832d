"""HTML parser: removes boilerplate (navigation, sidebars, footers) and keeps the article.

Article extraction is trafilatura's; its XML output (head / p / list / table / code / quote) is mapped onto
blocks, with headings building heading paths. When trafilatura finds no article (a tiny page), the
visible text of the body is kept instead, so a valid page never parses to nothing.
"""

from __future__ import annotations

import re

import trafilatura
from lxml import etree
from lxml import html as lxml_html

from knowsphere_ingestion.domain.document import Block, BlockKind, ParsedDocument
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.table import normalize_rows, render_markdown_table

_WHITESPACE = re.compile(r"[ \t\r\n\u00a0]+")
_INVISIBLE_TAGS = ("script", "style", "noscript", "template", "head")


def parse_html(data: bytes, file_name: str) -> ParsedDocument:
    try:
        page = lxml_html.fromstring(data)
    except (etree.ParserError, ValueError) as exc:
        raise ParseError(f"{file_name} is not valid HTML: {exc}", code=ParseErrorCode.CORRUPT_FILE) from exc
    page_title = _clean(page.findtext(".//title") or "")

    extracted = trafilatura.extract(
        data,
        output_format="xml",
        include_tables=True,
        include_comments=False,
        include_formatting=False,
        include_links=False,
        include_images=False,
        with_metadata=True,
    )
    if extracted:
        doc = etree.fromstring(extracted.encode("utf-8"))
        title = _clean(doc.get("title") or "") or page_title
        main = doc.find("main")
        blocks = _blocks_from_article(main) if main is not None else []
        extractor = "trafilatura"
    else:
        title = page_title
        blocks = _blocks_from_body(page)
        extractor = "body-text"
    if not blocks:
        raise ParseError(f"{file_name} has no visible text", code=ParseErrorCode.EMPTY_DOCUMENT)
    text = "\n".join(block.text for block in blocks)
    return ParsedDocument(
        blocks=blocks,
        title=title,
        language=guess_language(text),
        metadata={"format": "html", "extractor": extractor},
    )


def _blocks_from_article(main: etree._Element) -> list[Block]:
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []

    def path() -> tuple[str, ...]:
        return tuple(title for _, title in headings)

    def add(kind: BlockKind, element: etree._Element) -> None:
        text = _clean("".join(element.itertext()))
        if text:
            blocks.append(Block(kind=kind, text=text, heading_path=path()))

    for element in main:
        tag = element.tag
        if tag == "head":
            text = _clean("".join(element.itertext()))
            if not text:
                continue
            rend = element.get("rend") or "h2"
            level = int(rend[1]) if len(rend) == 2 and rend[1].isdigit() else 2
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, text))
            blocks.append(Block(kind="heading", text=text, heading_path=path(), level=level))
        elif tag == "list":
            for item in element.iter("item"):
                add("list_item", item)
        elif tag == "table":
            rows = normalize_rows(
                [
                    [_clean("".join(cell.itertext())) for cell in row.iter("cell")]
                    for row in element.iter("row")
                ]
            )
            if rows:
                blocks.append(
                    Block(kind="table", text=render_markdown_table(rows), heading_path=path(), rows=rows)
                )
        elif tag == "code":
            code = "".join(element.itertext()).strip("\n")
            if code.strip():
                blocks.append(Block(kind="code", text=code, heading_path=path()))
        else:  # p, quote and anything else trafilatura keeps as running text
            add("paragraph", element)
    return blocks


def _blocks_from_body(page: lxml_html.HtmlElement) -> list[Block]:
    for element in page.iter(*_INVISIBLE_TAGS):
        element.drop_tree()
    body = page.find("body")
    root = body if body is not None else page
    lines = [_clean(line) for line in root.text_content().split("\n")]
    return [Block(kind="paragraph", text=line) for line in lines if line]


def _clean(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()
