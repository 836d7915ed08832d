"""DOCX parser (python-docx): headings build heading paths; paragraphs, list items and tables in body order.

Also holds the zip-bomb guard every OOXML parser (DOCX, PPTX, XLSX) runs before opening a file.
"""

from __future__ import annotations

import io
import re

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.ooxml import check_ooxml_archive
from knowsphere_ingestion.parsing.table import normalize_rows, render_markdown_table

# Limits checked against the zip's central directory before any member is decompressed.
_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*(\d+)$", re.IGNORECASE)


def parse_docx(data: bytes, file_name: str) -> ParsedDocument:
    check_ooxml_archive(data, file_name)
    try:
        document = docx.Document(io.BytesIO(data))
        content = list(document.iter_inner_content())
        core_title = document.core_properties.title or ""
    except ParseError:
        raise
    except Exception as exc:  # python-docx raises many types (KeyError, lxml errors, ...) on corrupt parts
        raise ParseError(
            f"{file_name} is not a valid DOCX file: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc

    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []

    def path() -> tuple[str, ...]:
        return tuple(title for _, title in headings)

    for item in content:
        if isinstance(item, Table):
            rows = normalize_rows(_table_rows(item))
            if rows:
                blocks.append(
                    Block(kind="table", text=render_markdown_table(rows), heading_path=path(), rows=rows)
                )
            continue
        text = item.text.strip()
        if not text:
            continue
        level = _heading_level(item)
        if level:
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, text))
            blocks.append(Block(kind="heading", text=text, heading_path=path(), level=level))
        elif _is_list_item(item):
            blocks.append(Block(kind="list_item", text=text, heading_path=path()))
        else:
            blocks.append(Block(kind="paragraph", text=text, heading_path=path()))

    title = core_title.strip() or next(
        (block.text for block in blocks if block.kind == "heading" and block.level == 1), ""
    )
    full_text = "\n".join(block.text for block in blocks)
    return ParsedDocument(
        blocks=blocks,
        title=title,
        language=guess_language(full_text),
        metadata={"format": "docx"},
    )


def _style_name(paragraph: Paragraph) -> str:
    try:
        style = paragraph.style
    except (KeyError, ValueError):
        return ""
    return (style.name or "") if style is not None else ""


def _heading_level(paragraph: Paragraph) -> int:
    match = _HEADING_STYLE.match(_style_name(paragraph).strip())
    return int(match.group(1)) if match else 0


def _is_list_item(paragraph: Paragraph) -> bool:
    if _style_name(paragraph).lower().startswith("list"):
        return True
    properties = paragraph._p.pPr
    return properties is not None and properties.numPr is not None


def _table_rows(table: Table) -> list[list[str]]:
    return [[cell.text for cell in row.cells] for row in table.rows]
