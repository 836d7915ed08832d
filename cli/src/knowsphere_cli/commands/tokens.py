"""``ks token create|list|revoke``: API tokens of the caller's tenant (admins only)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from knowsphere_cli.context import cli_of
from knowsphere_cli.tables import show, when

app = typer.Typer(help="API tokens: create, list, revoke.", no_args_is_help=True)


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="what the token is for")],
    role: Annotated[str, typer.Option(help="admin, member or read-only")] = "member",
    expires_in_days: Annotated[
        int | None, typer.Option(min=1, help="default: the gateway's (90 days)", show_default=False)
    ] = None,
    user: Annotated[
        str | None, typer.Option(help="the user it acts as; default: you", show_default=False)
    ] = None,
) -> None:
    """Create a token. It is printed alone on stdout, once: keep it safe."""
    cli = cli_of(ctx)
    body: dict[str, object] = {"name": name, "role": role}
    if expires_in_days:
        body["expires_in_days"] = expires_in_days
    if user:
        body["user_id"] = user
    with cli.gateway() as gateway:
        created = gateway.post("/tokens", json=body)
    info = created["info"]
    cli.err.print(
        f"token {info['id']} ({escape(info['name'])}, {info['role']}, user {escape(info['user_id'])}, "
        f"expires {when(info['expire_time'])} UTC); it is shown only now:"
    )
    cli.out.file.write(created["token"] + "\n")


@app.command("list")
def list_(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List the tenant's tokens, newest first (revoked ones too); never their text."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = gateway.get("/tokens")["tokens"]
    show(
        cli.out,
        found,
        [
            ("id", lambda t: t["id"]),
            ("name", lambda t: t["name"]),
            ("role", lambda t: t["role"]),
            ("user", lambda t: t["user_id"]),
            ("expires", lambda t: when(t["expire_time"])),
            ("last used", lambda t: when(t.get("last_used_time"))),
            ("revoked", lambda t: when(t.get("revoke_time"))),
        ],
        as_json,
        empty="no tokens",
    )


@app.command("revoke")
def revoke(
    ctx: typer.Context, token_id: Annotated[str, typer.Argument(help="the token's id (tok_…)")]
) -> None:
    """Revoke a token at once."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        gateway.delete(f"/tokens/{token_id}")
    cli.out.print(f"revoked token {token_id}")
