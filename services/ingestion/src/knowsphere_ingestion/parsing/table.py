"""Rendering of table rows as a Markdown table: the text of a table block."""

from __future__ import annotations

from collections.abc import Sequence


def normalize_rows(rows: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """Strip cells, drop empty rows and all-empty trailing columns, and pad rows to one width."""
    kept = [tuple(cell.strip() for cell in row) for row in rows if any(cell.strip() for cell in row)]
    # Trailing columns empty in every row (stray delimiters at line ends) are dropped.
    width = max((len(row) for row in kept), default=0)
    while width and all(len(row) < width or not row[width - 1] for row in kept):
        width -= 1
    kept = [row[:width] for row in kept]
    return tuple(row + ("",) * (width - len(row)) for row in kept)


def render_markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """The first row is rendered as the header."""
    if not rows:
        return ""

    def line(row: Sequence[str]) -> str:
        cells = (cell.replace("|", "\\|").replace("\r", " ").replace("\n", " ") for cell in row)
        return "| " + " | ".join(cells) + " |"

    header, *body = rows
    separator = "| " + " | ".join("---" for _ in header) + " |"
    return "\n".join([line(header), separator, *(line(row) for row in body)])
