"""The ``ks`` command: its options, its command groups, and one place that turns failures into a
one-line message and an exit code (:mod:`knowsphere_cli.context`)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from knowsphere_cli.commands import agents, chat, config, ingest, knowledge, models, orchestrators, tokens
from knowsphere_cli.context import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_UNREACHABLE, EXIT_USAGE, Cli
from knowsphere_cli.gateway import ApiError, Unreachable
from knowsphere_cli.settings import DEFAULT_URL, ConfigError, Settings

app = typer.Typer(
    name="ks",
    help="KnowSphere from the command line: knowledge bases, ingestion, questions with cited sources, "
    "agents and orchestrators.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def options(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(help=f"the gateway; else $KS_URL, the config file, {DEFAULT_URL}", show_default=False),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="an API token (ks_…); else $KS_TOKEN, the config file, none (local mode)", show_default=False
        ),
    ] = None,
) -> None:
    ctx.obj = Cli(Settings.resolve(url=url, token=token))


app.add_typer(knowledge.app, name="kb")
app.command("ingest")(ingest.ingest)
app.command("ask")(chat.ask)
app.command("chat")(chat.chat)
app.add_typer(agents.app, name="agent")
app.add_typer(orchestrators.app, name="orchestrator")
app.add_typer(models.app, name="models")
app.add_typer(tokens.app, name="token")
app.command("login")(config.login)
app.add_typer(config.app, name="config")


def main(argv: list[str] | None = None) -> None:
    """The console script: runs ``ks`` and exits with its code; a failure is one line on stderr."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        app(args=argv, prog_name="ks")
    except ApiError as error:
        err.print(f"[red]error:[/] {escape(error.one_line())}")
        sys.exit(EXIT_FAILED)
    except Unreachable as error:
        err.print(f"[red]error:[/] {escape(str(error))}")
        sys.exit(EXIT_UNREACHABLE)
    except ConfigError as error:
        err.print(f"[red]error:[/] {escape(str(error))}")
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)


__all__ = ["app", "main"]
