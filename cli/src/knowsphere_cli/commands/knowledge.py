"""``ks kb create|list|delete``: the caller's knowledge bases. A knowledge base is named by its id or
its name wherever a command takes one."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from knowsphere_cli.context import cli_of
from knowsphere_cli.gateway import knowledge_base
from knowsphere_cli.tables import show, when

app = typer.Typer(help="Knowledge bases: create, list, delete.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="its name")],
    description: Annotated[str, typer.Option(help="what it holds")] = "",
    embedding_model: Annotated[
        str | None, typer.Option(help="an embedding model id; default: the tenant's", show_default=False)
    ] = None,
    language: Annotated[
        str | None, typer.Option(help="main language of its documents (BCP-47)", show_default=False)
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a knowledge base."""
    cli = cli_of(ctx)
    body: dict[str, object] = {"name": name, "description": description}
    if embedding_model:
        body["embedding_model_id"] = embedding_model
    if language:
        body["language_hint"] = language
    with cli.gateway() as gateway:
        kb = gateway.post("/knowledge-bases", json=body)
    if as_json:
        cli.out.print_json(data=kb)
    else:
        cli.out.print(f"created knowledge base {escape(kb['name'])}: {kb['id']}")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the knowledge bases."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        kbs = list(gateway.paged("/knowledge-bases", "knowledge_bases"))
    show(
        cli.out,
        kbs,
        [
            ("id", lambda kb: kb["id"]),
            ("name", lambda kb: kb["name"]),
            ("documents", lambda kb: kb.get("document_count")),
            ("created", lambda kb: when(kb.get("create_time"))),
            ("description", lambda kb: kb.get("description")),
        ],
        as_json,
        empty="no knowledge bases yet: `ks kb create NAME`",
    )


@app.command("delete")
def delete(
    ctx: typer.Context,
    kb: Annotated[str, typer.Argument(help="id or name")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
) -> None:
    """Delete a knowledge base with all its documents."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = knowledge_base(gateway, kb)
        label = f"{found['name']} ({found['id']}, {found.get('document_count') or 0} documents)"
        if not yes and not typer.confirm(f"Delete knowledge base {label}?"):
            raise typer.Exit(1)
        gateway.delete(f"/knowledge-bases/{found['id']}")
    cli.out.print(f"deleted knowledge base {escape(label)}")
