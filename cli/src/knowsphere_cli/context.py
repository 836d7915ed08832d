"""What every command is handed: the resolved settings, the consoles, and the exit codes."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer
from rich.console import Console

from knowsphere_cli.gateway import Gateway
from knowsphere_cli.settings import Settings

EXIT_FAILED = 1
"""The gateway refused the request, a file failed to ingest, or a turn ended in an error."""
EXIT_USAGE = 2
"""A wrong command line (unknown option, missing argument, a path that does not exist)."""
EXIT_UNREACHABLE = 3
"""No answer from the gateway at all."""
EXIT_INTERRUPTED = 130
"""Stopped with Ctrl-C."""


@dataclass
class Cli:
    settings: Settings
    # Soft wrap: a message stays one line however narrow the terminal (tables still fit its width).
    out: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False, soft_wrap=True))

    def gateway(self) -> Gateway:
        return Gateway(self.settings)


def cli_of(ctx: typer.Context) -> Cli:
    found = ctx.find_object(Cli)
    assert found is not None, "the app's callback sets the context object"
    return found


__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_UNREACHABLE", "EXIT_USAGE", "Cli", "cli_of"]
