"""``ks ask KB "question"`` and ``ks chat``: a turn's answer streamed as it is written, then its
sources by file name and page.

A turn is ``POST /api/v1/chat/turns`` (server-sent events): ``text_delta`` pieces are printed as they
come; ``completed`` carries the whole answer (printed if no piece came, as for an extracted answer)
and the sources it cites; ``error`` ends the turn with the gateway's message. Ctrl-C during an answer
cancels the turn (``…/cancel``).
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import typer
from rich.markup import escape

from knowsphere_cli.context import EXIT_FAILED, EXIT_INTERRUPTED, Cli, cli_of
from knowsphere_cli.gateway import ApiError, Gateway, knowledge_base

EXIT_COMMANDS = frozenset({"/exit", "/quit"})


def source_line(citation: dict[str, Any]) -> str:
    """``[c1] handbook.pdf, p. 3 — Leave › Annual leave`` (a web source: its title and URL)."""
    name = (
        citation.get("file_name")
        or citation.get("title")
        or citation.get("url")
        or citation.get("document_id")
    )
    line = f"[{citation.get('handle', '')}] {name}"
    if citation.get("page"):
        line += f", p. {citation['page']}"
    if citation.get("heading_path"):
        line += " — " + " › ".join(citation["heading_path"])
    if citation.get("url") and citation.get("url") != name:
        line += f" <{citation['url']}>"
    return line


def run_turn(cli: Cli, gateway: Gateway, body: dict[str, Any], verbose: bool) -> bool:
    """Streams one turn to the terminal; True when it completed. Ctrl-C cancels it."""
    turn_id = ""
    written = False
    found: dict[str, dict[str, Any]] = {}  # this turn's sources by handle, from the sources events
    try:
        with gateway.events("POST", "/chat/turns", json=body) as events:
            for event in events:
                data = event.data
                if event.name == "started":
                    turn_id = data.get("turn_id", "")
                elif event.name == "sources":
                    found.update({c.get("handle", ""): c for c in data.get("citations") or []})
                elif event.name == "text_delta" and data.get("text"):
                    cli.out.file.write(data["text"])
                    cli.out.file.flush()
                    written = True
                elif event.name in ("tool_started", "tool_finished") and verbose:
                    cli.err.print(
                        f"[dim]{event.name.replace('_', ' ')}: {escape(data.get('tool_name') or '')}[/]"
                    )
                elif event.name == "completed":
                    if not written:
                        cli.out.file.write(data.get("text") or "")
                    cli.out.file.write("\n")
                    show_sources(cli, data.get("citations") or [], found)
                    return True
                elif event.name == "cancelled":
                    cli.out.file.write("\n")
                    cli.err.print("[yellow]cancelled[/]")
                    return False
                elif event.name == "error":
                    if written:
                        cli.out.file.write("\n")
                    code = data.get("error_code") or "error"
                    cli.err.print(f"[red]error:[/] {escape(code)}: {escape(data.get('error_message') or '')}")
                    return False
        cli.err.print("[red]error:[/] the answer stream ended before the turn did")
        return False
    except KeyboardInterrupt:
        cli.out.file.write("\n")
        if turn_id:
            with contextlib.suppress(ApiError):  # the turn had finished: nothing to stop
                gateway.post(f"/chat/turns/{turn_id}/cancel")
        cli.err.print("[yellow]cancelled[/]")
        raise


def show_sources(cli: Cli, cited: list[dict[str, Any]], found: dict[str, dict[str, Any]]) -> None:
    """The sources the answer cites, each completed from what the turn's ``sources`` said of it."""
    if cited:
        cli.out.print("Sources:")
        for citation in cited:
            known = found.get(citation.get("handle", ""), {})
            merged = {**known, **{key: value for key, value in citation.items() if value}}
            cli.out.print(f"  {escape(source_line(merged))}")


KbOption = Annotated[
    list[str] | None, typer.Option("--kb", help="knowledge base id or name (repeat for several)")
]
WebOption = Annotated[bool, typer.Option("--web", help="let the answer use web search")]
GraphOption = Annotated[bool, typer.Option("--graph", help="let the answer query the knowledge graph")]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="show tool activity on stderr")]


def turn_body(
    message: str, kb_ids: list[str], web: bool, graph: bool, session_id: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message": message,
        "knowledge_base_ids": kb_ids,
        "web_search": web,
        "knowledge_graph": graph,
    }
    if session_id:
        body["session_id"] = session_id
    return body


def ask(
    ctx: typer.Context,
    kb: Annotated[str, typer.Argument(help="knowledge base id or name")],
    question: Annotated[str, typer.Argument(help="the question")],
    more_kbs: KbOption = None,
    session: Annotated[str | None, typer.Option(help="a session id, to ask within its history")] = None,
    web: WebOption = False,
    graph: GraphOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Ask a question of a knowledge base: the answer streams, then its sources."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        kb_ids = [knowledge_base(gateway, ref)["id"] for ref in [kb, *(more_kbs or [])]]
        try:
            completed = run_turn(cli, gateway, turn_body(question, kb_ids, web, graph, session), verbose)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if not completed:
        raise typer.Exit(EXIT_FAILED)


def chat(
    ctx: typer.Context,
    kbs: KbOption = None,
    session: Annotated[str | None, typer.Option(help="go on with this session; default: a new one")] = None,
    web: WebOption = False,
    graph: GraphOption = False,
    verbose: VerboseOption = False,
) -> None:
    """An interactive conversation, its history kept in a session; Ctrl-C stops an answer, /exit ends."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        kb_ids = [knowledge_base(gateway, ref)["id"] for ref in kbs or []]
        session_id = session or gateway.post("/sessions", json={})["id"]
        cli.err.print(f"[dim]session {session_id}; /exit or Ctrl-D to leave[/]")
        while True:
            try:
                question = cli.out.input("[bold]you>[/] ").strip()
            except (EOFError, KeyboardInterrupt):
                cli.out.print()
                return
            if not question:
                continue
            if question in EXIT_COMMANDS:
                return
            try:
                run_turn(cli, gateway, turn_body(question, kb_ids, web, graph, session_id), verbose)
            except KeyboardInterrupt:
                continue
            except ApiError as error:
                cli.err.print(f"[red]error:[/] {escape(error.one_line())}")
