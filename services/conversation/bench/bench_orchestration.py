"""What each orchestration mode costs per turn over Single: the platform's time (the model's own time
excluded) and the tokens it spends, on the same scripted task through the whole stack.

The task: one question about the ingested handbook, answered with a citation. Two agents on the scripted
OpenAI-wire model (loopback), each with the handbook as its knowledge base and doc_retrieval as its one
tool: ``handbook`` (the one that answers) and ``front-desk``. Per mode:

- ``single``: ``handbook``'s ReAct loop — the model asks doc_retrieval, the tool runs, the model answers;
- ``conditional``: a keyword route (``leave``) to ``handbook`` (the default route names ``front-desk``),
  so the difference is the routing step and its ``handoff`` event;
- ``knowledge_base``: one retrieval of the same knowledge base, then ``handbook`` answers from the
  passages (route ``retrieve``, no tool loop);
- ``collaboration``: ``handbook`` then ``front-desk`` as experts in turn, each its own ReAct loop (the
  second sees the first's answer), then the summary by ``handbook`` from their answers;
- ``supervisor``: ``front-desk`` supervises and hands the question to ``handbook``
  (``transfer_to_handbook``), whose ReAct loop answers it; the supervisor relays the answer;
- ``workflow``: a doc_retrieval tool step on the question, then ``handbook`` answers from its result.

Each turn names the handbook's knowledge base (a workflow's tool step searches only what the turn
names; every other mode searches that same knowledge base either way).

Every graph run (the turn's, an expert's, a worker's) asks the intent decision first, a short request
of its own. Turns run one at a time (per-turn overhead, not queueing), each in a session of its own,
the modes taking turns so a slower minute of this machine falls on all of them. Per turn:

- ``overhead_ms``: from the POST to the ``completed`` event, minus the scripted model's own time for the
  turn's requests. That time is what the benchmark scripts: each reply waits ``--first-token-ms`` (an
  intent decision ``--decide-ms``) before its status line, then sends its chunks ``--token-ms`` apart,
  each followed by one interval (the role chunk's included; modelhub reads a stream to its end, so the
  interval after the last chunk is model time too);
- ``model_requests``: chat requests the model got during the turn (intent decisions included);
- ``tokens``: prompt + completion tokens as the ``completed`` event reports them (every streamed
  request of the turn, experts' and workers' included; intent decisions are not counted there). The
  scripted model reports usage the way a provider would, estimated at 4 bytes a token: the prompt is
  the request's tool schemas and messages as JSON, the completion its answer or its tool call.

Each mode's p50/p95 and its difference to Single's. A turn that did not go the way its mode should
(final event, citation, route, handoffs, tool calls, model requests) is printed and counted. Every mode
of the contract gets an orchestrator and a first (unmeasured) turn: a mode refused when saved or whose
turn ends with ``orchestration_mode_unavailable`` is listed as not runnable yet; one that answers but
that this benchmark has no script for is listed as runnable, not measured.

Usage: ``make bench-orchestration`` (``BENCH_ARGS="--turns 50"``). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from knowsphere.conversation.v1.conversation_enums import OrchestrationMode as Mode
from knowsphere.conversation.v1.conversation_enums import TurnRoute
from knowsphere_contracts.events import FINAL_KINDS, TurnEventKind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_conversation import percentile
from harness import HANDBOOK, Recorded, Reply, Tenant, machine, running_stack, scripted_model, sse
from scripted_provider import openai_decision, openai_text_stream, openai_tool_call_stream

QUESTION = "How many days of annual leave do employees get?"
ROUTE_KEYWORD = "leave"
ANSWER = "Every employee gets 27 days of paid annual leave per calendar year [[c1]]."
BYTES_PER_TOKEN = 4
HANDOFF_TOOL_PREFIX = "transfer_to_"
"""A supervisor's tools that hand a task to a worker."""
MODE_UNAVAILABLE = "orchestration_mode_unavailable"
HANDBOOK_AGENT = "handbook"
FRONT_DESK_AGENT = "front-desk"
AGENT_PROMPTS = {
    HANDBOOK_AGENT: "You answer questions about the employee handbook, citing it.",
    FRONT_DESK_AGENT: "You are the front desk.",
}


@dataclasses.dataclass(frozen=True)
class Expected:
    """How a mode does the task: what each of its turns shows."""

    requests: int
    """Chat requests the model gets (intent decisions included)."""
    tool_calls: int
    """``tool_started`` events the client sees."""
    route: TurnRoute
    """The route of the one ``intent`` event the client sees."""
    handoffs: tuple[str, ...] = ()
    """The agents the ``handoff`` events name, in order."""


EXPECTED = {
    # Intent, tool call, answer.
    Mode.SINGLE: Expected(3, 1, TurnRoute.REACT),
    # The same after a keyword route (no request of its own).
    Mode.CONDITIONAL: Expected(3, 1, TurnRoute.REACT, (HANDBOOK_AGENT,)),
    # Intent, one retrieval (no model), answer.
    Mode.KNOWLEDGE_BASE: Expected(2, 0, TurnRoute.RETRIEVE),
    # Two experts, each intent, tool call, answer; then the summary's intent and answer.
    Mode.COLLABORATION: Expected(8, 2, TurnRoute.GENERATE, (HANDBOOK_AGENT, FRONT_DESK_AGENT)),
    # Supervisor's intent and handoff call; the worker's intent, tool call, answer; the relay.
    Mode.SUPERVISOR: Expected(6, 1, TurnRoute.REACT, (HANDBOOK_AGENT, FRONT_DESK_AGENT)),
    # The tool step (no model); the answering step's intent and answer.
    Mode.WORKFLOW: Expected(2, 1, TurnRoute.GENERATE, (HANDBOOK_AGENT,)),
    # As single, with the workspace tools and write_plan offered (a longer prompt, no more requests).
    Mode.DEEP_AGENT: Expected(3, 1, TurnRoute.REACT),
}


def estimated_tokens(data: bytes | str) -> int:
    size = len(data.encode() if isinstance(data, str) else data)
    return max(1, math.ceil(size / BYTES_PER_TOKEN))


def prompt_bytes(body: dict[str, Any]) -> bytes:
    """A request's prompt as providers render it: its tool schemas, then its messages."""
    tools = json.dumps(body.get("tools", []), ensure_ascii=False, sort_keys=True)
    return (tools + json.dumps(body["messages"], ensure_ascii=False)).encode()


def with_usage(reply: Reply, prompt_tokens: int, completion_tokens: int) -> Reply:
    """The stream with a usage chunk before ``[DONE]``, as OpenAI sends it with ``include_usage``."""
    assert reply.sse is not None
    last = json.loads(reply.sse[-2].removeprefix("data: "))
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    reply.sse.insert(-1, f"data: {json.dumps({**last, 'choices': [], 'usage': usage})}\n\n")
    return reply


def scripted_seconds(reply: Reply) -> float:
    """How long the scripted server takes over ``reply``: the delay before its status line, then one
    interval after each chunk (the server closes the stream only after the last one)."""
    return reply.delay + reply.chunk_delay * len(reply.sse or ())


@dataclasses.dataclass
class ModelLog:
    """What the scripted model did during the current turn (turns run one at a time)."""

    requests: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    """(kind, scripted seconds) per request."""
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.requests.append((kind, seconds))

    def take(self) -> list[tuple[str, float]]:
        with self.lock:
            taken, self.requests = self.requests, []
        return taken


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("function", {}).get("name", "") for t in body.get("tools", [])]


def scripted_model_reply(args: argparse.Namespace, log: ModelLog) -> Callable[[Recorded], Reply]:
    """The model: the intent (kb_search); while tool calls are on and no tool result is in, a handoff
    to a worker when it may hand off, else a doc_retrieval call; then the cited answer. Each request is
    logged with its scripted time."""
    answer_pieces = [ANSWER[i : i + 7] for i in range(0, len(ANSWER), 7)]

    def respond(request: Recorded) -> Reply:
        body = request.json
        decision = openai_decision("E", body)  # kb_search: the question needs the handbook
        if decision is not None:
            reply = dataclasses.replace(decision, delay=args.decide_ms / 1000)
            log.add("intent", scripted_seconds(reply))
            return reply
        prompt = estimated_tokens(prompt_bytes(body))
        calls_on = body.get("tools") and body.get("tool_choice") != "none"
        if calls_on and body["messages"][-1]["role"] != "tool":
            handoffs = [n for n in tool_names(body) if n.startswith(HANDOFF_TOOL_PREFIX)]
            name, arguments, kind = (
                (handoffs[0], {"task": QUESTION}, "handoff_call")
                if handoffs
                else ("doc_retrieval", {"query": "annual leave days"}, "tool_call")
            )
            reply = openai_tool_call_stream(name, arguments)
            completion = estimated_tokens(name + json.dumps(arguments))
        else:
            reply = openai_text_stream(answer_pieces)
            completion = estimated_tokens(ANSWER)
            kind = "answer"
        reply = dataclasses.replace(
            with_usage(reply, prompt, completion),
            delay=args.first_token_ms / 1000,
            chunk_delay=args.token_ms / 1000,
        )
        log.add(kind, scripted_seconds(reply))
        return reply

    return respond


@dataclasses.dataclass
class Turn:
    mode: Mode
    events: list[tuple[str, dict[str, Any]]]
    total_ms: float
    model_ms: float
    requests: list[str]

    @property
    def outcome(self) -> str:
        return self.events[-1][0] if self.events else "none"

    @property
    def final(self) -> dict[str, Any]:
        return self.events[-1][1] if self.events else {}

    @property
    def overhead_ms(self) -> float:
        return self.total_ms - self.model_ms

    @property
    def prompt_tokens(self) -> int:
        return int(self.final.get("prompt_tokens") or 0)

    @property
    def completion_tokens(self) -> int:
        return int(self.final.get("completion_tokens") or 0)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def problems(self, agents: dict[str, str]) -> list[str]:
        """What is wrong with a turn that should have done the task the way its mode does it."""
        expected = EXPECTED[self.mode]
        names = [name for name, _ in self.events]
        problems = []
        if self.outcome != TurnEventKind.COMPLETED:
            said = f"{self.final.get('error_code', '')} ({self.final.get('error_message', '')})"
            problems.append(f"ended {self.outcome}: {said}")
        elif not self.final.get("citations"):
            problems.append("answered without a citation")
        handoffs = [data.get("to_agent_id") for name, data in self.events if name == TurnEventKind.HANDOFF]
        if handoffs != [agents[a] for a in expected.handoffs]:
            named = {agent_id: name for name, agent_id in agents.items()}
            problems.append(
                f"handoffs to {[named.get(str(h), h) for h in handoffs]}, expected {expected.handoffs}"
            )
        routes = [data.get("route") for name, data in self.events if name == TurnEventKind.INTENT]
        if routes != [expected.route.value]:
            problems.append(f"routes {routes}, expected {expected.route.value}")
        tool_calls = names.count(TurnEventKind.TOOL_STARTED)
        if tool_calls != expected.tool_calls:
            problems.append(f"{tool_calls} tool calls, expected {expected.tool_calls}")
        if len(self.requests) != expected.requests:
            problems.append(
                f"{len(self.requests)} model requests {self.requests}, expected {expected.requests}"
            )
        return problems


class TurnTimedOut(Exception):
    pass


async def ask(
    http: httpx.AsyncClient, session_id: str, kb_id: str, timeout: float
) -> list[tuple[str, dict[str, Any]]]:
    """The turn's events up to its final one. The turn names the handbook's knowledge base, as the
    agents and the knowledge-base orchestrator do: a workflow's tool step searches only what the turn
    names (without it, doc_retrieval fails with "no knowledge base selected this turn")."""
    events: list[tuple[str, dict[str, Any]]] = []
    try:
        async with asyncio.timeout(timeout):
            body = {"message": QUESTION, "session_id": session_id, "knowledge_base_ids": [kb_id]}
            async with http.stream("POST", "/chat/turns", json=body) as response:
                response.raise_for_status()
                async for name, data in sse(response):
                    events.append((name, data))
                    if name in FINAL_KINDS:
                        break
    except TimeoutError as error:
        raise TurnTimedOut(
            f"no final event within {timeout:.0f} s; events: {[n for n, _ in events]}"
        ) from error
    return events


async def one_turn(
    http: httpx.AsyncClient, mode: Mode, orchestrator_id: str, kb_id: str, log: ModelLog, timeout: float
) -> Turn:
    created = await http.post("/sessions", json={"orchestrator_id": orchestrator_id})
    created.raise_for_status()
    log.take()  # nothing from before this turn counts
    sent = time.perf_counter()
    events = await ask(http, str(created.json()["id"]), kb_id, timeout)
    ended = time.perf_counter()
    requests = log.take()
    return Turn(
        mode=mode,
        events=events,
        total_ms=(ended - sent) * 1000,
        model_ms=sum(seconds for _, seconds in requests) * 1000,
        requests=[kind for kind, _ in requests],
    )


def spread(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}


def summary(turns: list[Turn], agents: dict[str, str]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for turn in turns:
        for kind in turn.requests:
            kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "turns": len(turns),
        "completed": sum(t.outcome == TurnEventKind.COMPLETED for t in turns),
        "turns_with_problems": sum(bool(t.problems(agents)) for t in turns),
        "overhead_ms": spread([t.overhead_ms for t in turns]),
        "turn_ms": spread([t.total_ms for t in turns]),
        "model_ms": spread([t.model_ms for t in turns]),
        "model_requests": spread([len(t.requests) for t in turns]),
        "model_requests_by_kind": {k: round(n / len(turns), 2) for k, n in sorted(kinds.items())},
        "tokens": spread([t.tokens for t in turns]),
        "prompt_tokens": spread([t.prompt_tokens for t in turns]),
        "completion_tokens": spread([t.completion_tokens for t in turns]),
    }


def versus_single(figures: dict[str, dict[str, Any]]) -> None:
    """Adds each mode's difference to Single's p50 and p95 (overhead and tokens)."""
    single = figures[Mode.SINGLE.value]
    for mode in figures.values():
        for name, key in (
            ("extra_overhead_ms_vs_single", "overhead_ms"),
            ("extra_tokens_vs_single", "tokens"),
        ):
            mode[name] = {p: round(mode[key][p] - single[key][p], 1) for p in ("p50", "p95")}


def create_agents(http: httpx.Client, kb_id: str) -> dict[str, str]:
    """The two agents, by name: their ids."""
    agents = {}
    for name, prompt in AGENT_PROMPTS.items():
        created = http.post(
            "/agents",
            json={
                "name": name,
                "system_prompt": prompt,
                "tool_names": ["doc_retrieval"],
                "knowledge_base_ids": [kb_id],
            },
        )
        created.raise_for_status()
        agents[name] = str(created.json()["id"])
    return agents


def configs(agents: dict[str, str], kb_id: str) -> dict[Mode, dict[str, Any]]:
    """A configuration per mode of the contract doing the task (see the module)."""
    handbook, front = agents[HANDBOOK_AGENT], agents[FRONT_DESK_AGENT]
    return {
        Mode.SINGLE: {"agent_id": handbook},
        Mode.CONDITIONAL: {
            "routes": [{"condition": {"keywords": [ROUTE_KEYWORD]}, "agent_id": handbook}],
            "default_agent_id": front,
        },
        Mode.KNOWLEDGE_BASE: {"knowledge_base_ids": [kb_id], "agent_id": handbook},
        Mode.COLLABORATION: {"agent_ids": [handbook, front], "collaboration_strategy": "sequential"},
        Mode.SUPERVISOR: {"supervisor_agent_id": front, "worker_agent_ids": [handbook]},
        Mode.WORKFLOW: {
            "start": "lookup",
            "steps": [
                {
                    "id": "lookup",
                    "kind": "tool",
                    "tool_name": "doc_retrieval",
                    "inputs": {"query": {"from": "turn.question"}},
                    "outputs": {"passages": "text"},
                    "next": [{"to": "answer"}],
                },
                {
                    "id": "answer",
                    "kind": "agent",
                    "agent_id": handbook,
                    "inputs": {"question": {"from": "turn.question"}},
                    "outputs": {"answer": "text"},
                },
            ],
        },
        Mode.DEEP_AGENT: {"agent_id": handbook},
        # Saved (its name does not resolve: checked again at the call) but not scripted: no peer here.
        Mode.EXTERNAL: {"provider": "n8n", "base_url": "https://n8n.invalid/webhook/bench"},
    }


def error_of(response: httpx.Response) -> dict[str, Any]:
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {"message": response.text[:300]}
    return {
        "status": response.status_code,
        "code": error.get("code", ""),
        "message": error.get("message", ""),
    }


def unavailable(turn: Turn) -> bool:
    return turn.outcome == TurnEventKind.ERROR and turn.final.get("error_code") == MODE_UNAVAILABLE


def ending(turn: Turn) -> dict[str, Any]:
    """How an unscripted mode's turn ended, for the listing."""
    return {
        "status": f"a turn ended {turn.outcome}",
        "code": turn.final.get("error_code") or "",
        "message": turn.final.get("error_message") or "",
    }


def print_table(figures: dict[str, dict[str, Any]], others: dict[str, dict[str, Any]]) -> None:
    rows = [
        ("mode", "completed", "overhead ms p50 / p95", "vs single p50 / p95", "requests/turn p50 / p95",
         "tokens/turn p50 / p95", "extra tokens vs single p50 / p95"),
    ]  # fmt: skip
    for mode, f in figures.items():
        extra_ms, extra_tokens = f["extra_overhead_ms_vs_single"], f["extra_tokens_vs_single"]
        rows.append(
            (
                mode,
                f"{f['completed']}/{f['turns']}",
                f"{f['overhead_ms']['p50']} / {f['overhead_ms']['p95']}",
                f"{extra_ms['p50']:+} / {extra_ms['p95']:+}",
                f"{f['model_requests']['p50']} / {f['model_requests']['p95']}",
                f"{f['tokens']['p50']} / {f['tokens']['p95']}",
                f"{extra_tokens['p50']:+} / {extra_tokens['p95']:+}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)), file=sys.stderr)
    for mode, found in others.items():
        runs = {False: "not runnable yet", True: "runnable, not measured", None: "not known"}[
            found["runnable"]
        ]
        said = f"{found.get('code', '')} ({found.get('message', '')})" if found.get("code") else ""
        print(
            f"{mode}: {runs}; {'saved' if found['saved'] else 'not saved'}, {found['status']} {said}",
            file=sys.stderr,
        )


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the stack the benchmark started is stopped, not left running."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20, help="measured turns per mode")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=1,
        help="unmeasured turns per mode first (at least 1: it finds the runnable)",
    )
    parser.add_argument(
        "--first-token-ms", type=float, default=100.0, help="the model's time before each streamed reply"
    )
    parser.add_argument("--token-ms", type=float, default=10.0, help="the model's time after each chunk")
    parser.add_argument(
        "--decide-ms", type=float, default=50.0, help="the model's time for an intent decision"
    )
    parser.add_argument(
        "--turn-timeout", type=float, default=60.0, help="seconds a turn may take before the benchmark stops"
    )
    parser.add_argument(
        "--modes",
        default=",".join(m.value for m in Mode),
        help="modes to create and ask, comma-separated (single always runs: the others are compared with it)",
    )
    args = parser.parse_args()
    if args.turns < 1 or args.warm_up < 1:
        parser.error(f"--turns {args.turns}, --warm-up {args.warm_up}: each at least 1")
    try:
        chosen = {Mode.SINGLE, *(Mode(name.strip()) for name in args.modes.split(",") if name.strip())}
    except ValueError as error:
        parser.error(f"--modes: {error}; one of {', '.join(m.value for m in Mode)}")
    stop_on_sigterm()

    log = ModelLog()
    begun = time.monotonic()
    turns: dict[Mode, list[Turn]] = {}
    others: dict[str, dict[str, Any]] = {}  # the modes not measured: what they answered
    with (
        scripted_model(scripted_model_reply(args, log)) as server,
        running_stack(model_server=server) as stack,
    ):
        tenant = Tenant(stack)
        tenant.use_model(server)
        kb_id = tenant.knowledge_base(HANDBOOK)
        print(f"stack up and the handbook ingested in {time.monotonic() - begun:.0f} s", file=sys.stderr)
        orchestrators: dict[Mode, str] = {}
        with tenant.client() as http:
            agents = create_agents(http, kb_id)
            for mode, config in configs(agents, kb_id).items():
                if mode not in chosen:
                    continue
                name = f"bench-{mode.value.replace('_', '-')}"
                saved = http.post("/orchestrators", json={"name": name, "mode": mode.value, "config": config})
                if saved.status_code == 201:
                    orchestrators[mode] = str(saved.json()["id"])
                else:
                    others[mode.value] = {"runnable": False, "saved": False, **error_of(saved)}

        async def turn(client: httpx.AsyncClient, mode: Mode, label: str) -> Turn:
            try:
                done = await one_turn(client, mode, orchestrators[mode], kb_id, log, args.turn_timeout)
            except TurnTimedOut as error:
                sys.exit(f"{mode.value} {label}: {error}; the benchmark stops")
            if problems := done.problems(agents):
                print(f"{mode.value} {label}: {'; '.join(problems)}", file=sys.stderr)
            return done

        async def run() -> None:
            async with tenant.async_client() as client:
                # A first turn of every mode says whether it runs (and warms the scripted ones up).
                for mode, orchestrator_id in orchestrators.items():
                    if mode in EXPECTED:
                        first = await turn(client, mode, "warm-up turn 1")
                        if not unavailable(first):
                            turns[mode] = []
                            continue
                    else:
                        try:
                            first = await one_turn(
                                client, mode, orchestrator_id, kb_id, log, args.turn_timeout
                            )
                        except TurnTimedOut as error:
                            others[mode.value] = {"runnable": None, "saved": True, "status": str(error)}
                            continue
                    others[mode.value] = {"runnable": not unavailable(first), "saved": True, **ending(first)}
                rounds = [(False, n) for n in range(1, args.warm_up)] + [(True, n) for n in range(args.turns)]
                for measured, n in rounds:
                    for mode, kept in turns.items():
                        label = f"turn {n + 1}" if measured else f"warm-up turn {n + 1}"
                        done = await turn(client, mode, label)
                        if measured:
                            kept.append(done)

        asyncio.run(run())

    if Mode.SINGLE not in turns:
        sys.exit(f"single did not run: {others.get(Mode.SINGLE.value)}")
    figures = {mode.value: summary(measured, agents) for mode, measured in turns.items()}
    versus_single(figures)
    print_table(figures, others)
    result = {
        "machine": machine(),
        "task": {"question": QUESTION, "answer": ANSWER, "route_keyword": ROUTE_KEYWORD},
        "turns_per_mode": args.turns,
        "warm_up_turns_per_mode": args.warm_up,
        "model": {
            "first_token_ms": args.first_token_ms,
            "token_ms": args.token_ms,
            "decide_ms": args.decide_ms,
            "bytes_per_token": BYTES_PER_TOKEN,
        },
        "tokens_counted": "as the completed event reports them: every streamed request of the turn, "
        "not the intent decisions",
        "modes": figures,
        "not_runnable": {mode: found for mode, found in others.items() if found["runnable"] is False},
        "runnable_not_measured": {
            mode: found for mode, found in others.items() if found["runnable"] is not False
        },
        "seconds": round(time.monotonic() - begun, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
