"""What each orchestration mode costs per turn over Single: the platform's time (the model's own time
excluded) and the tokens it spends, on the same scripted task through the whole stack.

The task: one question about the ingested handbook, answered with a citation, by the same agent (the
scripted OpenAI-wire model on loopback, its knowledge base the handbook, its one tool doc_retrieval):

- ``single``: the agent's ReAct loop — the model asks doc_retrieval, the tool runs, the model answers;
- ``conditional``: a keyword route (``leave``) to that agent, so the difference is the routing step
  and its ``handoff`` event (the default route names a second agent);
- ``knowledge_base``: one retrieval of the same knowledge base, then the answer (route ``retrieve``,
  no tool loop), with that agent's model and prompt;
- ``collaboration``: that agent and a second one (same knowledge base and tool) as experts in turn, each
  its own ReAct loop (the second sees the first's answer), then the summary by the first from their
  answers.

Every graph run asks the intent decision first (a short request of its own). Turns run one at
a time (per-turn overhead, not queueing), each in a session of its own, the modes taking turns so a
slower minute of this machine falls on all of them. Per turn it measures:

- ``overhead_ms``: from the POST to the ``completed`` event, minus the scripted model's own time for the
  turn's requests. That time is what the benchmark scripts: each reply waits ``--first-token-ms`` (the
  decision ``--decide-ms``) before its status line, then sends its chunks ``--token-ms`` apart, each
  followed by one interval (the role chunk's included; modelhub reads a stream to its end, so the
  interval after the last chunk is model time too);
- ``model_requests``: chat requests the model got during the turn (the intent decision included);
- ``tokens``: prompt + completion tokens as the ``completed`` event reports them (the agent's and the
  answer's requests; the intent decision is not counted there). The scripted model reports usage the
  way a provider would, estimated at 4 bytes a token: the prompt is the request's tool schemas and
  messages as JSON, the completion the answer's text or the tool call's name and arguments.

Each mode's p50/p95 and its difference to Single's; a turn that did not go the way its mode should
(final event, citation, route, handoffs, tool calls, model requests) is printed and counted. The other
modes of the contract are created too and asked once, and listed with what they answered
(``orchestration_mode_unavailable``, or refused when saved); one that answers is listed as runnable
but not measured.

Usage: ``make bench-orchestration`` (``BENCH_ARGS="--turns 50"``). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
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
HANDBOOK_PROMPT = "You answer questions about the employee handbook, citing it."
FRONT_DESK_PROMPT = "You are the front desk."
BYTES_PER_TOKEN = 4
HANDBOOK_AGENT = "handbook"
FRONT_DESK_AGENT = "front-desk"


@dataclasses.dataclass(frozen=True)
class Expected:
    """How a mode does the task: what each of its turns shows."""

    requests: int
    """Chat requests the model gets (intent decisions included)."""
    tool_calls: int
    route: TurnRoute
    """The route of the one ``intent`` event the client sees."""
    handoffs: tuple[str, ...] = ()
    """The agents the ``handoff`` events name, in order."""


EXPECTED = {
    # Intent, tool call, answer.
    Mode.SINGLE: Expected(3, 1, TurnRoute.REACT),
    # The same, after a keyword route (no request of its own).
    Mode.CONDITIONAL: Expected(3, 1, TurnRoute.REACT, (HANDBOOK_AGENT,)),
    # Intent, one retrieval (no model), answer.
    Mode.KNOWLEDGE_BASE: Expected(2, 0, TurnRoute.RETRIEVE),
    # Two experts in turn, each intent, tool call, answer; then the summary's intent and answer.
    Mode.COLLABORATION: Expected(8, 2, TurnRoute.GENERATE, (HANDBOOK_AGENT, FRONT_DESK_AGENT)),
}
MEASURED_MODES = tuple(EXPECTED)


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


def scripted_model_reply(args: argparse.Namespace, log: ModelLog) -> Callable[[Recorded], Reply]:
    """The model's answers: the intent, a doc_retrieval call when the tools are on and no tool result
    is in yet, else the cited answer; each logged with its scripted time."""
    answer_pieces = [ANSWER[i : i + 7] for i in range(0, len(ANSWER), 7)]

    def respond(request: Recorded) -> Reply:
        body = request.json
        decision = openai_decision("E", body)  # kb_search: the question needs the handbook
        if decision is not None:
            reply = dataclasses.replace(decision, delay=args.decide_ms / 1000)
            log.add("intent", scripted_seconds(reply))
            return reply
        prompt = estimated_tokens(prompt_bytes(body))
        asks_for_tool = (
            body.get("tools") and body.get("tool_choice") != "none" and body["messages"][-1]["role"] != "tool"
        )
        if asks_for_tool:
            arguments = {"query": "annual leave days"}
            reply = openai_tool_call_stream("doc_retrieval", arguments)
            completion = estimated_tokens("doc_retrieval" + json.dumps(arguments))
            kind = "tool_call"
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
    outcome: str
    total_ms: float
    model_ms: float
    requests: list[str]
    prompt_tokens: int
    completion_tokens: int
    problems: list[str]

    @property
    def overhead_ms(self) -> float:
        return self.total_ms - self.model_ms

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def check(mode: Mode, events: list[tuple[str, dict[str, Any]]], agents: dict[str, str]) -> list[str]:
    """What is wrong with a turn that should have done the task the way its mode does it."""
    expected = EXPECTED[mode]
    names = [name for name, _ in events]
    final = events[-1][1] if events else {}
    problems = []
    if not names or names[-1] != TurnEventKind.COMPLETED:
        problems.append(f"ended {names[-1] if names else 'without events'}: {final.get('error_code', '')}")
    elif not final.get("citations"):
        problems.append("answered without a citation")
    handoffs = [data.get("to_agent_id") for name, data in events if name == TurnEventKind.HANDOFF]
    if handoffs != [agents[a] for a in expected.handoffs]:
        problems.append(f"handoffs to {handoffs}, expected {list(expected.handoffs)}")
    routes = [data.get("route") for name, data in events if name == TurnEventKind.INTENT]
    if routes != [expected.route.value]:
        problems.append(f"route {routes}, expected {expected.route.value}")
    tool_calls = names.count(TurnEventKind.TOOL_STARTED)
    if tool_calls != expected.tool_calls:
        problems.append(f"{tool_calls} tool calls, expected {expected.tool_calls}")
    return problems


async def ask(http: httpx.AsyncClient, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The turn's events up to its final one."""
    events: list[tuple[str, dict[str, Any]]] = []
    async with http.stream(
        "POST", "/chat/turns", json={"message": QUESTION, "session_id": session_id}
    ) as response:
        response.raise_for_status()
        async for name, data in sse(response):
            events.append((name, data))
            if name in FINAL_KINDS:
                break
    return events


async def one_turn(
    http: httpx.AsyncClient, mode: Mode, session_id: str, log: ModelLog, agents: dict[str, str]
) -> Turn:
    log.take()  # nothing from before this turn counts
    sent = time.perf_counter()
    events = await ask(http, session_id)
    ended = time.perf_counter()
    requests = log.take()
    final = events[-1][1] if events else {}
    problems = check(mode, events, agents)
    if len(requests) != EXPECTED[mode].requests:
        problems.append(f"{len(requests)} model requests ({[k for k, _ in requests]})")
    return Turn(
        mode=mode,
        outcome=events[-1][0] if events else "none",
        total_ms=(ended - sent) * 1000,
        model_ms=sum(seconds for _, seconds in requests) * 1000,
        requests=[kind for kind, _ in requests],
        prompt_tokens=int(final.get("prompt_tokens") or 0),
        completion_tokens=int(final.get("completion_tokens") or 0),
        problems=problems,
    )


def spread(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}


def summary(turns: list[Turn]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for turn in turns:
        for kind in turn.requests:
            kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "turns": len(turns),
        "completed": sum(t.outcome == TurnEventKind.COMPLETED for t in turns),
        "turns_with_problems": sum(bool(t.problems) for t in turns),
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


class Setup:
    """The tenant's two agents and an orchestrator per mode, through the gateway."""

    def __init__(self, http: httpx.Client, kb_id: str) -> None:
        self.http = http
        self.kb_id = kb_id
        self.handbook = self.agent(HANDBOOK_AGENT, HANDBOOK_PROMPT)
        self.front = self.agent(FRONT_DESK_AGENT, FRONT_DESK_PROMPT)
        self.agents = {HANDBOOK_AGENT: self.handbook, FRONT_DESK_AGENT: self.front}

    def agent(self, name: str, prompt: str) -> str:
        created = self.http.post(
            "/agents",
            json={
                "name": name,
                "system_prompt": prompt,
                "tool_names": ["doc_retrieval"],
                "knowledge_base_ids": [self.kb_id],
            },
        )
        created.raise_for_status()
        return str(created.json()["id"])

    def configs(self) -> dict[Mode, dict[str, Any]]:
        """A valid configuration per mode of the contract, each running the handbook agent."""
        return {
            Mode.SINGLE: {"agent_id": self.handbook},
            Mode.CONDITIONAL: {
                "routes": [{"condition": {"keywords": [ROUTE_KEYWORD]}, "agent_id": self.handbook}],
                "default_agent_id": self.front,
            },
            Mode.KNOWLEDGE_BASE: {"knowledge_base_ids": [self.kb_id], "agent_id": self.handbook},
            Mode.SUPERVISOR: {"supervisor_agent_id": self.front, "worker_agent_ids": [self.handbook]},
            Mode.COLLABORATION: {
                "agent_ids": [self.handbook, self.front],
                "collaboration_strategy": "sequential",
            },
            Mode.WORKFLOW: {
                "steps": [
                    {
                        "id": "answer",
                        "kind": "agent",
                        "agent_id": self.handbook,
                        "inputs": {"question": {"from": "turn.question"}},
                        "outputs": {"answer": "text"},
                    }
                ]
            },
            Mode.DEEP_AGENT: {"agent_id": self.handbook},
            Mode.EXTERNAL: {"integration_type": "dify"},
        }

    def orchestrator(self, mode: Mode, config: dict[str, Any]) -> httpx.Response:
        name = f"bench-{mode.value.replace('_', '-')}"
        return self.http.post("/orchestrators", json={"name": name, "mode": mode.value, "config": config})

    def session(self, orchestrator_id: str) -> str:
        created = self.http.post("/sessions", json={"orchestrator_id": orchestrator_id})
        created.raise_for_status()
        return str(created.json()["id"])


def refused(response: httpx.Response) -> dict[str, Any]:
    error = response.json().get("error", {})
    return {
        "runnable": False,
        "saved": False,
        "status": response.status_code,
        "code": error.get("code", ""),
        "message": error.get("message", ""),
    }


def answered(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    name, data = events[-1] if events else ("none", {})
    return {
        "runnable": name == TurnEventKind.COMPLETED,
        "saved": True,
        "turn_ended": name,
        "code": data.get("error_code") or "",
        "message": data.get("error_message") or "",
    }


def print_table(figures: dict[str, dict[str, Any]], probes: dict[str, dict[str, Any]]) -> None:
    rows = [
        ("mode", "completed", "overhead ms p50 / p95", "vs single p50 / p95", "requests/turn p50 / p95",
         "tokens/turn p50 / p95", "extra tokens vs single p50 / p95"),
    ]  # fmt: skip
    for mode, f in figures.items():
        rows.append(
            (
                mode,
                f"{f['completed']}/{f['turns']}",
                f"{f['overhead_ms']['p50']} / {f['overhead_ms']['p95']}",
                f"{f['extra_overhead_ms_vs_single']['p50']:+} / {f['extra_overhead_ms_vs_single']['p95']:+}",
                f"{f['model_requests']['p50']} / {f['model_requests']['p95']}",
                f"{f['tokens']['p50']} / {f['tokens']['p95']}",
                f"{f['extra_tokens_vs_single']['p50']:+} / {f['extra_tokens_vs_single']['p95']:+}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)), file=sys.stderr)
    for mode, found in probes.items():
        said = (
            f"a turn ended {found['turn_ended']}"
            if found["saved"]
            else f"refused when saved ({found['status']})"
        )
        print(f"{mode}: not measured; {said}: {found['code']} ({found['message']})", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20, help="measured turns per mode")
    parser.add_argument("--warm-up", type=int, default=2, help="unmeasured turns per mode first")
    parser.add_argument(
        "--first-token-ms", type=float, default=200.0, help="the model's time before each streamed reply"
    )
    parser.add_argument("--token-ms", type=float, default=20.0, help="the model's time after each chunk")
    parser.add_argument(
        "--decide-ms", type=float, default=100.0, help="the model's time for the intent decision"
    )
    args = parser.parse_args()
    if args.turns < 1:
        parser.error(f"--turns {args.turns}: at least 1 turn per mode")

    log = ModelLog()
    begun = time.monotonic()
    turns: dict[Mode, list[Turn]] = {mode: [] for mode in MEASURED_MODES}
    probes: dict[str, dict[str, Any]] = {}
    with (
        scripted_model(scripted_model_reply(args, log)) as server,
        running_stack(model_server=server) as stack,
    ):
        tenant = Tenant(stack)
        tenant.use_model(server)
        kb_id = tenant.knowledge_base(HANDBOOK)
        print(f"stack up and the handbook ingested in {time.monotonic() - begun:.0f} s", file=sys.stderr)
        with tenant.client() as http:
            setup = Setup(http, kb_id)
            orchestrators: dict[Mode, str] = {}
            for mode, config in setup.configs().items():
                saved = setup.orchestrator(mode, config)
                if saved.status_code == 201:
                    orchestrators[mode] = saved.json()["id"]
                elif mode in MEASURED_MODES:
                    sys.exit(f"the {mode.value} orchestrator was refused: {saved.text}")
                else:
                    probes[mode.value] = refused(saved)
            rounds = [(False, n) for n in range(args.warm_up)] + [(True, n) for n in range(args.turns)]
            # Sessions are made beforehand: the measured time is the turn's alone.
            sessions = {
                (measured, n, mode): setup.session(orchestrators[mode])
                for measured, n in rounds
                for mode in MEASURED_MODES
            }
            probed = {m: setup.session(o) for m, o in orchestrators.items() if m not in MEASURED_MODES}

        async def run() -> None:
            async with tenant.async_client() as client:
                for measured, n in rounds:
                    for mode in MEASURED_MODES:
                        turn = await one_turn(client, mode, sessions[(measured, n, mode)], log, setup.agents)
                        if turn.problems:
                            label = f"turn {n + 1}" if measured else f"warm-up turn {n + 1}"
                            print(f"{mode.value} {label}: {'; '.join(turn.problems)}", file=sys.stderr)
                        if measured:
                            turns[mode].append(turn)
                for mode, session in probed.items():
                    probes[mode.value] = answered(await ask(client, session))

        asyncio.run(run())

    figures = {mode.value: summary(measured) for mode, measured in turns.items()}
    versus_single(figures)
    print_table(figures, probes)
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
        "tokens_counted": "as the completed event reports them: the agent's and the answer's requests, "
        "not the intent decision",
        "modes": figures,
        "not_runnable": {mode: found for mode, found in probes.items() if not found["runnable"]},
        "runnable_not_measured": sorted(mode for mode, found in probes.items() if found["runnable"]),
        "seconds": round(time.monotonic() - begun, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
