"""Values a command takes either inline or from a file (``--prompt`` or ``--prompt-file``, ``--config``
or ``--config-file``). A wrong one is a usage error (exit code 2) naming the option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def inline_or_file(inline: str | None, path: Path | None, inline_option: str, file_option: str) -> str | None:
    """The text given inline or read from the file (UTF-8); None when neither is given."""
    if inline is not None and path is not None:
        raise typer.BadParameter(f"give {inline_option} or {file_option}, not both", param_hint=file_option)
    if path is None:
        return inline
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{path} is not UTF-8 text", param_hint=file_option) from None
    except OSError as error:
        raise typer.BadParameter(f"cannot read {path}: {error.strerror}", param_hint=file_option) from None


def json_object(text: str, option: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise typer.BadParameter(f"not valid JSON: {error}", param_hint=option) from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object: {…}", param_hint=option)
    return value


__all__ = ["inline_or_file", "json_object"]
