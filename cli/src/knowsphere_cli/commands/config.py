"""``ks login`` and ``ks config set|unset|show``: the config file that remembers the gateway's URL and
a token (mode 0600; see :mod:`knowsphere_cli.settings`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from knowsphere_cli.context import cli_of
from knowsphere_cli.gateway import Gateway
from knowsphere_cli.settings import (
    CONFIG_KEYS,
    Settings,
    check_key,
    check_value,
    masked,
    read_config,
    write_config,
)

app = typer.Typer(help="The config file: set, unset, show.", no_args_is_help=True)
KEYS_HELP = " or ".join(CONFIG_KEYS)


def login(
    ctx: typer.Context,
    url: Annotated[
        str | None, typer.Option(help="the gateway; default: the one in use", show_default=False)
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="the API token; default: asked for, hidden", show_default=False)
    ] = None,
) -> None:
    """Check a token against the gateway and keep it (and the URL) in the config file."""
    cli = cli_of(ctx)
    chosen_url = check_value("url", url or cli.settings.url)
    chosen_token = check_value("token", token or typer.prompt("API token", hide_input=True))
    if not chosen_token:
        raise typer.BadParameter("the token is empty", param_hint="--token")
    with Gateway(
        Settings(url=chosen_url, token=chosen_token, config_file=cli.settings.config_file)
    ) as gateway:
        gateway.get("/knowledge-bases", params={"page_size": 1})  # any role may read them
    values = read_config(cli.settings.config_file)
    write_config(cli.settings.config_file, {**values, "url": chosen_url, "token": chosen_token})
    cli.out.print(f"logged in to {chosen_url}; saved in {cli.settings.config_file}")


@app.command("set")
def set_(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help=KEYS_HELP)],
    value: Annotated[str, typer.Argument(help="its value")],
) -> None:
    """Set a value in the config file."""
    cli = cli_of(ctx)
    path = cli.settings.config_file
    write_config(path, {**read_config(path), key: check_value(key, value)})
    cli.out.print(f"{key} saved in {path}")


@app.command("unset")
def unset(ctx: typer.Context, key: Annotated[str, typer.Argument(help=KEYS_HELP)]) -> None:
    """Remove a value from the config file."""
    cli = cli_of(ctx)
    path = cli.settings.config_file
    check_key(key)
    values = read_config(path)
    values.pop(key, None)
    write_config(path, values)
    cli.out.print(f"{key} removed from {path}")


@app.command("show")
def show(ctx: typer.Context) -> None:
    """Show the config file's path and the settings in use (the token masked)."""
    cli = cli_of(ctx)
    settings = cli.settings
    cli.out.print(f"config file: {settings.config_file}")
    cli.out.print(f"url:   {escape(settings.url)}")
    cli.out.print(f"token: {masked(settings.token) if settings.token else '(none: local mode)'}")
