"""Markdown parser: ATX headings build heading paths; paragraphs, list items, fenced code and pipe tables.

A line-based reader of the common subset of CommonMark/GFM that uploads use. Setext headings, HTML blocks
and reference definitions are kept as paragraph text.
"""

from __future__ import annotations

import re

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing.encoding import decode_text
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.table import normalize_rows, render_markdown_table

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])[ \t]+(.*)$")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


def parse_markdown(data: bytes, file_name: str) -> ParsedDocument:
    text, encoding = decode_text(data, file_name)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []  # (level, text) of the open sections, outermost first

    def path() -> tuple[str, ...]:
        return tuple(title for _, title in headings)

    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            joined = "\n".join(line.strip() for line in paragraph).strip()
            if joined:
                blocks.append(Block(kind="paragraph", text=joined, heading_path=path()))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush_paragraph()
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            flush_paragraph()
            marker = fence.group(1)
            code: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                code.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of the file for an unclosed fence)
            blocks.append(Block(kind="code", text="\n".join(code), heading_path=path()))
            continue
        heading = _HEADING.match(line)
        if heading:
            flush_paragraph()
            level = len(heading.group(1))
            title = (heading.group(2) or "").strip()
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, title))
            # A heading's path ends with itself, so the chunker sees the section it opens.
            blocks.append(Block(kind="heading", text=title, heading_path=path(), level=level))
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_DELIMITER.match(lines[i + 1]):
            flush_paragraph()
            raw_rows = [_split_table_row(line)]
            i += 2
            while i < len(lines) and lines[i].strip() and "|" in lines[i]:
                raw_rows.append(_split_table_row(lines[i]))
                i += 1
            rows = normalize_rows(raw_rows)
            blocks.append(
                Block(kind="table", text=render_markdown_table(rows), heading_path=path(), rows=rows)
            )
            continue
        item = _LIST_ITEM.match(line)
        if item:
            flush_paragraph()
            indent = len(item.group(1).expandtabs(4))
            content = [item.group(2).strip()]
            i += 1
            # Lazy continuation: following lines indented deeper than the marker that are not items.
            while i < len(lines) and lines[i].strip() and not _LIST_ITEM.match(lines[i]):
                following = lines[i]
                if len(following) - len(following.lstrip()) <= indent and (
                    _HEADING.match(following) or _FENCE.match(following)
                ):
                    break
                content.append(following.strip())
                i += 1
            blocks.append(Block(kind="list_item", text="\n".join(content), heading_path=path()))
            continue
        paragraph.append(line)
        i += 1
    flush_paragraph()

    title = next((block.text for block in blocks if block.kind == "heading" and block.level == 1), "")
    return ParsedDocument(
        blocks=blocks,
        title=title,
        language=guess_language(text),
        metadata={"format": "markdown", "encoding": encoding},
    )


def _split_table_row(line: str) -> list[str]:
    row = line.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    cells = re.split(r"(?<!\\)\|", row)
    return [cell.replace("\\|", "|").strip() for cell in cells]
