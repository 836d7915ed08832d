"""``ks orchestrator create|list|show|delete``: how the tenant's agents combine to answer. The config is a
JSON object shaped by the mode; the gateway checks it and names the field at fault
(``config.agent_id``). An orchestrator is named by its id or its name wherever a command takes one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from knowsphere_cli.context import cli_of
from knowsphere_cli.gateway import orchestrator
from knowsphere_cli.inputs import inline_or_file, json_object
from knowsphere_cli.tables import show, show_fields, when

app = typer.Typer(help="Orchestrators: create, list, show, delete.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
OrchestratorArgument = Annotated[str, typer.Argument(help="the orchestrator's id or name")]
MODES_HELP = (
    "single, supervisor, collaboration, workflow, conditional, external, deep_agent or knowledge_base"
)
CONFIG_EXAMPLES = (
    'single: {"agent_id": "…"}; conditional: {"routes": [{"condition": {"keywords": ["invoice"]}, '
    '"agent_id": "…"}], "default_agent_id": "…"}; knowledge_base: {"knowledge_base_ids": ["…"]}'
)


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="unique in the tenant; a-z, 0-9, - and _")],
    mode: Annotated[str, typer.Option(help=MODES_HELP)],
    config: Annotated[
        str | None,
        typer.Option(help=f"the mode's config as JSON, e.g. {CONFIG_EXAMPLES}", show_default=False),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="read the config (JSON) from this file", show_default=False
        ),
    ] = None,
    display_name: Annotated[str, typer.Option(help="shown instead of the name")] = "",
    description: Annotated[str, typer.Option(help="what it is for")] = "",
    inactive: Annotated[
        bool, typer.Option("--inactive", help="keep it switched off: no session runs it")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Create an orchestrator of agents."""
    cli = cli_of(ctx)
    text = inline_or_file(config, config_file, "--config", "--config-file")
    if text is None:
        raise typer.BadParameter(
            "give the mode's config with --config or --config-file", param_hint="--config"
        )
    body = {
        "name": name,
        "mode": mode,
        "config": json_object(text, "--config-file" if config_file else "--config"),
        "display_name": display_name,
        "description": description,
        "active": not inactive,
    }
    with cli.gateway() as gateway:
        created = gateway.post("/orchestrators", json=body)
    if as_json:
        cli.out.print_json(data=created)
    else:
        agents = ", ".join(created.get("member_agent_ids") or []) or "none"
        cli.out.print(
            f"created orchestrator {escape(created['name'])} ({created.get('mode')}, agents: {agents}): "
            f"{created['id']}"
        )


@app.command("list")
def list_(
    ctx: typer.Context,
    mode: Annotated[
        str | None, typer.Option(help=f"only this mode: {MODES_HELP}", show_default=False)
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List the orchestrators by name."""
    cli = cli_of(ctx)
    params = {"mode": mode} if mode else {}
    with cli.gateway() as gateway:
        found = list(gateway.paged("/orchestrators", "orchestrators", **params))
    show(
        cli.out,
        found,
        [
            ("id", lambda o: o["id"]),
            ("name", lambda o: o["name"]),
            ("mode", lambda o: o.get("mode")),
            ("agents", lambda o: len(o.get("member_agent_ids") or [])),
            ("active", lambda o: "yes" if o.get("active") else "no"),
            ("description", lambda o: o.get("description")),
        ],
        as_json,
        empty="no orchestrators yet: `ks orchestrator create NAME --mode MODE --config JSON`",
    )


@app.command("show")
def show_(ctx: typer.Context, ref: OrchestratorArgument, as_json: JsonOption = False) -> None:
    """Show an orchestrator with its config."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = orchestrator(gateway, ref)
    show_fields(
        cli.out,
        found,
        [
            ("id", lambda o: o["id"]),
            ("name", lambda o: o["name"]),
            ("display name", lambda o: o.get("display_name")),
            ("description", lambda o: o.get("description")),
            ("mode", lambda o: o.get("mode")),
            ("agents", lambda o: o.get("member_agent_ids")),
            ("active", lambda o: bool(o.get("active"))),
            ("created", lambda o: when(o.get("create_time"))),
            ("updated", lambda o: when(o.get("update_time"))),
            ("config", lambda o: o.get("config") or {}),
        ],
        as_json,
    )


@app.command("delete")
def delete(ctx: typer.Context, ref: OrchestratorArgument) -> None:
    """Delete an orchestrator (its agents stay)."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = orchestrator(gateway, ref)
        gateway.delete(f"/orchestrators/{found['id']}")
    cli.out.print(f"deleted orchestrator {escape(found['name'])} ({found['id']})")
