"""Lists shown as tables, or as JSON with ``--json`` for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


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


def when(value: str | None) -> str:
    """An RFC 3339 time as ``YYYY-MM-DD HH:MM`` (UTC), or empty."""
    return value[:16].replace("T", " ") if value else ""


__all__ = ["show", "when"]
