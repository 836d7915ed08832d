"""``ks models …``: the model registry — list, add, show or set a default, delete, and the providers."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from knowsphere_cli.context import cli_of
from knowsphere_cli.tables import show

app = typer.Typer(help="Models: list, add, defaults, delete, providers.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
TYPES_HELP = "knowledge_qa, vlm, embedding, rerank or asr"


@app.command("list")
def list_(
    ctx: typer.Context,
    type: Annotated[str | None, typer.Option(help=TYPES_HELP, show_default=False)] = None,
    as_json: JsonOption = False,
) -> None:
    """List the models (built-in ones and the tenant's)."""
    cli = cli_of(ctx)
    params = {"type": type} if type else {}
    with cli.gateway() as gateway:
        found = list(gateway.paged("/models", "models", **params))
    show(
        cli.out,
        found,
        [
            ("id", lambda m: m["id"]),
            ("name", lambda m: m.get("display_name")),
            ("provider", lambda m: m.get("provider_id")),
            ("model", lambda m: m.get("model_name")),
            ("types", lambda m: ", ".join(m.get("types") or [])),
        ],
        as_json,
        empty="no models",
    )


@app.command("providers")
def providers(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the providers a model can come from."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        found = gateway.get("/providers").get("providers") or []
    show(
        cli.out,
        found,
        [
            ("id", lambda p: p.get("id")),
            ("name", lambda p: p.get("display_name")),
            ("base URL", lambda p: p.get("default_base_url")),
        ],
        as_json,
        empty="no providers",
    )


@app.command("add")
def add(
    ctx: typer.Context,
    provider: Annotated[str, typer.Option(help="a provider id (`ks models providers`)")],
    model: Annotated[str, typer.Option(help="the provider's model name")],
    types: Annotated[list[str], typer.Option("--type", help=f"{TYPES_HELP} (repeat for several)")],
    name: Annotated[
        str | None, typer.Option(help="display name; default: the model name", show_default=False)
    ] = None,
    base_url: Annotated[str, typer.Option(help="the provider's API base URL; default: the provider's")] = "",
    api_key: Annotated[
        str | None,
        typer.Option(
            help="the provider's key (stored encrypted); default: $KS_MODEL_API_KEY",
            envvar="KS_MODEL_API_KEY",
            show_default=False,
        ),
    ] = None,
    context_window: Annotated[
        int | None, typer.Option(min=1, help="tokens the model reads", show_default=False)
    ] = None,
    default: Annotated[
        bool, typer.Option("--default", help="make it the default for each of its types")
    ] = False,
) -> None:
    """Add a model from a provider."""
    cli = cli_of(ctx)
    body: dict[str, object] = {
        "display_name": name or model,
        "provider_id": provider,
        "model_name": model,
        "types": types,
        "base_url": base_url,
    }
    if api_key:
        body["api_key"] = api_key
    if context_window:
        body["parameters"] = {"context_window": context_window}
    with cli.gateway() as gateway:
        created = gateway.post("/models", json=body)
        cli.out.print(f"added model {escape(created['display_name'])}: {created['id']}")
        if default:
            for model_type in types:
                gateway.put(f"/models/defaults/{model_type}", json={"model_id": created["id"]})
                cli.out.print(f"default for {model_type}: {created['id']}")


@app.command("default")
def default(
    ctx: typer.Context,
    type: Annotated[str, typer.Argument(help=TYPES_HELP)],
    model_id: Annotated[
        str | None, typer.Argument(help="set this model as the default", show_default=False)
    ] = None,
) -> None:
    """Show the default model of a type, or set it."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        if model_id:
            resolved = gateway.put(f"/models/defaults/{type}", json={"model_id": model_id})
        else:
            resolved = gateway.get(f"/models/defaults/{type}")
    chosen = resolved.get("model") or {}
    source = f" ({resolved['source']})" if resolved.get("source") else ""
    if chosen:
        cli.out.print(f"{type}: {escape(chosen.get('display_name') or '')} {chosen.get('id', '')}{source}")
    else:
        cli.out.print(f"{type}: none set (`ks models add … --default`)")


@app.command("delete")
def delete(ctx: typer.Context, model_id: Annotated[str, typer.Argument(help="the model's id")]) -> None:
    """Delete a model of the tenant."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        gateway.delete(f"/models/{model_id}")
    cli.out.print(f"deleted model {model_id}")
