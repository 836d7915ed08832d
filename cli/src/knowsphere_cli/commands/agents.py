"""``ks agent create|list|show|delete``: the tenant's agents — a model, a system prompt, tools and
knowledge bases — that sessions and orchestrators run. An agent is named by its id or its name (names
are unique in a tenant) wherever a command takes one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from knowsphere_cli.context import cli_of
from knowsphere_cli.gateway import agent, knowledge_base
from knowsphere_cli.inputs import inline_or_file
from knowsphere_cli.tables import show, show_fields, when

app = typer.Typer(help="Agents: create, list, show, delete.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
AgentArgument = Annotated[str, typer.Argument(help="the agent's id or name")]


def model_of(found: dict[str, Any]) -> str:
    return found.get("model_id") or "(the tenant's default)"


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="unique in the tenant; a-z, 0-9, - and _")],
    prompt: Annotated[str | None, typer.Option(help="its system prompt", show_default=False)] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="read the system prompt from this file", show_default=False
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="a model id (`ks models list`); default: the tenant's", show_default=False),
    ] = None,
    kbs: Annotated[
        list[str] | None,
        typer.Option("--kb", help="a knowledge base id or name it searches (repeat for several)"),
    ] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option("--tool", help="a tool of the tool runner it may call (repeat for several)"),
    ] = None,
    display_name: Annotated[str, typer.Option(help="shown instead of the name")] = "",
    description: Annotated[str, typer.Option(help="what it is for")] = "",
    inactive: Annotated[
        bool, typer.Option("--inactive", help="keep it switched off: no session or orchestrator runs it")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Create an agent."""
    cli = cli_of(ctx)
    system_prompt = inline_or_file(prompt, prompt_file, "--prompt", "--prompt-file") or ""
    with cli.gateway() as gateway:
        body: dict[str, object] = {
            "name": name,
            "display_name": display_name,
            "description": description,
            "system_prompt": system_prompt,
            "model_id": model or "",
            "tool_names": tools or [],
            "knowledge_base_ids": [knowledge_base(gateway, ref)["id"] for ref in kbs or []],
            "active": not inactive,
        }
        created = gateway.post("/agents", json=body)
    if as_json:
        cli.out.print_json(data=created)
    else:
        cli.out.print(f"created agent {escape(created['name'])}: {created['id']}")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the agents by name."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = list(gateway.paged("/agents", "agents"))
    show(
        cli.out,
        found,
        [
            ("id", lambda a: a["id"]),
            ("name", lambda a: a["name"]),
            ("model", model_of),
            ("knowledge bases", lambda a: len(a.get("knowledge_base_ids") or [])),
            ("tools", lambda a: ", ".join(a.get("tool_names") or [])),
            ("active", lambda a: "yes" if a.get("active") else "no"),
            ("description", lambda a: a.get("description")),
        ],
        as_json,
        empty="no agents yet: `ks agent create NAME --prompt …`",
    )


@app.command("show")
def show_(ctx: typer.Context, ref: AgentArgument, as_json: JsonOption = False) -> None:
    """Show an agent with its system prompt."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = agent(gateway, ref)
    parameters = found.get("model_parameters") or {}
    show_fields(
        cli.out,
        found,
        [
            ("id", lambda a: a["id"]),
            ("name", lambda a: a["name"]),
            ("display name", lambda a: a.get("display_name")),
            ("description", lambda a: a.get("description")),
            ("model", model_of),
            ("temperature", lambda _: parameters.get("temperature")),
            ("max tokens", lambda _: parameters.get("max_tokens")),
            ("knowledge bases", lambda a: a.get("knowledge_base_ids")),
            ("tools", lambda a: a.get("tool_names")),
            ("skills", lambda a: a.get("skill_names")),
            ("active", lambda a: bool(a.get("active"))),
            ("created", lambda a: when(a.get("create_time"))),
            ("updated", lambda a: when(a.get("update_time"))),
            ("system prompt", lambda a: a.get("system_prompt")),
        ],
        as_json,
    )


@app.command("delete")
def delete(ctx: typer.Context, ref: AgentArgument) -> None:
    """Delete an agent; refused while an orchestrator runs it."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = agent(gateway, ref)
        gateway.delete(f"/agents/{found['id']}")
    cli.out.print(f"deleted agent {escape(found['name'])} ({found['id']})")
