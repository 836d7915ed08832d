"""Lists shown as tables, one item as its fields, or either as JSON with ``--json`` for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def show(
    console: Console,
    items: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, Callable[[dict[str, Any]], Any]]],
    as_json: bool,
    empty: str,
) -> None:
    """``items`` as a table of ``columns`` (header, value of an item), or as a JSON array."""
    if as_json:
        console.print_json(json.dumps(list(items)))
        return
    if not items:
        console.print(empty)
        return
    table = Table(show_edge=False, pad_edge=False)
    for index, (header, _) in enumerate(columns):
        # The first column is the id to copy: never broken over lines.
        table.add_column(header, overflow="fold", no_wrap=index == 0)
    for item in items:
        table.add_row(*("" if (value := cell(item)) is None else str(value) for _, cell in columns))
    console.print(table)


def show_fields(
    console: Console,
    item: dict[str, Any],
    fields: Sequence[tuple[str, Callable[[dict[str, Any]], Any]]],
    as_json: bool,
) -> None:
    """One item as lines of ``field  value`` (a list joined by commas, an object as indented JSON), or
    as its JSON."""
    if as_json:
        console.print_json(json.dumps(item))
        return
    table = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, cell in fields:
        table.add_row(label, Text(shown(cell(item))))  # Text: a value's [brackets] are not markup
    console.print(table)


def shown(value: Any) -> str:
    """A JSON value as one table cell."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(part) for part in value)
    if isinstance(value, dict):
        return json.dumps(value, indent=2, ensure_ascii=False)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def when(value: str | None) -> str:
    """An RFC 3339 time as ``YYYY-MM-DD HH:MM`` (UTC), or empty."""
    return value[:16].replace("T", " ") if value else ""


__all__ = ["show", "show_fields", "shown", "when"]
