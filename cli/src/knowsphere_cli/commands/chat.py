"""``ks ask KB "question"`` and ``ks chat``: a turn's answer streamed as it is written, then its
sources by file name and page.

A turn is ``POST /api/v1/chat/turns`` (server-sent events): ``text_delta`` pieces are printed as they
come; ``completed`` carries the whole answer (printed if no piece came, as for an extracted answer)
and the sources it cites; ``error`` ends the turn with the gateway's message. Ctrl-C during an answer
cancels the turn (``…/cancel``).

``--orchestrator`` or ``--agent`` creates the session its turns run in, bound to that orchestrator or
agent; a ``handoff`` event (the orchestrator gives the turn to one of its agents) is shown with the
tool activity (``--verbose``).
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import typer
from rich.markup import escape

from knowsphere_cli.context import EXIT_FAILED, EXIT_INTERRUPTED, Cli, cli_of
from knowsphere_cli.gateway import ApiError, Gateway, agent, knowledge_base, orchestrator

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
                elif event.name == "handoff" and verbose:
                    reason = f": {data['reason']}" if data.get("reason") else ""
                    cli.err.print(f"[dim]handoff to {escape((data.get('to_agent_id') or '') + reason)}[/]")
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
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="show tool activity and handoffs between agents on stderr")
]
OrchestratorOption = Annotated[
    str | None,
    typer.Option(
        "--orchestrator",
        help="answer with this orchestrator (id or name), in a new session bound to it",
        show_default=False,
    ),
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="answer with this agent (id or name), in a new session bound to it",
        show_default=False,
    ),
]


def binding(
    gateway: Gateway, orchestrator_ref: str | None, agent_ref: str | None, session: str | None
) -> tuple[dict[str, str], str]:
    """The body of a new session bound to the orchestrator or the agent named, and how to say so; no
    body for neither. Both, or either with a session (whose binding is already made), is a usage error."""
    if orchestrator_ref and agent_ref:
        raise typer.BadParameter("give --orchestrator or --agent, not both", param_hint="--agent")
    if session and (orchestrator_ref or agent_ref):
        raise typer.BadParameter(
            "a session keeps the orchestrator or agent it was created with; leave out --session to start a "
            "new one",
            param_hint="--session",
        )
    if orchestrator_ref:
        found = orchestrator(gateway, orchestrator_ref)
        return {"orchestrator_id": found["id"]}, f"orchestrator {found['name']}"
    if agent_ref:
        found = agent(gateway, agent_ref)
        return {"agent_id": found["id"]}, f"agent {found['name']}"
    return {}, ""


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
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="[KB] QUESTION",
            help="a knowledge base id or name, then the question; the knowledge base may be left out with "
            "--kb, --orchestrator or --agent",
            show_default=False,
        ),
    ],
    more_kbs: KbOption = None,
    session: Annotated[str | None, typer.Option(help="a session id, to ask within its history")] = None,
    orchestrator_ref: OrchestratorOption = None,
    agent_ref: AgentOption = None,
    web: WebOption = False,
    graph: GraphOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Ask a question (of a knowledge base, an orchestrator or an agent): the answer streams, then sources."""
    cli = cli_of(ctx)
    if len(words) > 2:
        raise typer.BadParameter(f"{len(words)} arguments; give KB QUESTION, the question in quotes")
    if len(words) == 1 and not (more_kbs or orchestrator_ref or agent_ref):
        raise typer.BadParameter(
            "give KB QUESTION (or the question alone with --kb, --orchestrator or --agent)"
        )
    *kb, question = words
    with cli.gateway() as gateway:
        bound, bound_to = binding(gateway, orchestrator_ref, agent_ref, session)
        kb_ids = [knowledge_base(gateway, ref)["id"] for ref in [*kb, *(more_kbs or [])]]
        if bound:
            session = gateway.post("/sessions", json=bound)["id"]
            if verbose:
                cli.err.print(f"[dim]session {session}; answered by {escape(bound_to)}[/]")
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
    orchestrator_ref: OrchestratorOption = None,
    agent_ref: AgentOption = None,
    web: WebOption = False,
    graph: GraphOption = False,
    verbose: VerboseOption = False,
) -> None:
    """An interactive conversation, its history kept in a session; Ctrl-C stops an answer, /exit ends."""
    cli = cli_of(ctx)
    with cli.gateway() as gateway:
        bound, bound_to = binding(gateway, orchestrator_ref, agent_ref, session)
        kb_ids = [knowledge_base(gateway, ref)["id"] for ref in kbs or []]
        session_id = session or gateway.post("/sessions", json=bound)["id"]
        answered_by = f"answered by {escape(bound_to)}; " if bound_to else ""
        cli.err.print(f"[dim]session {session_id}; {answered_by}/exit or Ctrl-D to leave[/]")
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
