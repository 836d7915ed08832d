"""The gateway under many open chat streams: N concurrent SSE chat turns through the real gateway (and
the queue and conversation behind it) against a scripted model, for each of several levels of N.
The N chats start spread evenly over ``--ramp-seconds`` (N users arriving, not one burst) and the model
takes ``--answer-seconds`` over each answer, longer than the ramp, so all N streams are held open at
once.

Per turn it measures, from the moment the request is sent, the time to the response headers (the
gateway alone: authentication, validation, routing) and to the turn's first event (``started``: the
gateway publishes the request, conversation takes it and announces the turn, the gateway streams it
back). Both come before any model call, so the model's time is excluded. Errors are
refused requests, broken streams and turns that end other than ``completed``. The gateway's CPU per
turn is the CPU time of its process (user + system, from ``/proc/<pid>/stat``) over the level,
divided by the turns (the kernel counts CPU time in ticks of 10 ms, so a level of one turn gives only
a rough figure). The same is reported for every other process of the stack and for this client, to
show where a turn's CPU goes.

Each chat is a user of its own (the gateway limits requests per caller; many users meet those limits
one by one): with an API token each by default (``--auth token``: one keyed-hash lookup per request),
or named by an authenticating proxy (``--auth proxy``). The gateway's idle CPU (health checks, bus
heartbeats), measured for ``--idle-seconds`` before each level, is taken off its CPU per turn.

Usage: ``make bench-gateway`` (``LEVELS=1,20,50,100``, ``BENCH_ARGS="--rounds 3"``). Last line: one
JSON object. Goal: time to first event p95 < 50 ms at 100 concurrent chats.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conversation" / "bench"))
from harness import Recorded, Reply, Tenant, machine, rss_mb, running_stack, scripted_model, sse
from scripted_provider import openai_decision, openai_text_stream

GOAL_P95_MS = 50.0
GOAL_CONCURRENCY = 100
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# A refused token request (429) is tried again after the gateway's Retry-After, at most this often.
TOKEN_CREATE_ATTEMPTS = 10


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


@dataclasses.dataclass
class Turn:
    headers_ms: float | None = None
    first_event_ms: float | None = None
    error: str | None = None


@dataclasses.dataclass
class Open:
    """Streams open right now, and the most at once."""

    now: int = 0
    most: int = 0

    def opened(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)

    def closed(self) -> None:
        self.now -= 1


async def one_turn(http: httpx.AsyncClient, user: dict[str, str], streams: Open, after: float) -> Turn:
    await asyncio.sleep(after)
    turn = Turn()
    sent = time.perf_counter()
    try:
        async with http.stream(
            "POST", "/chat/turns", json={"message": "tell me a story"}, headers=user
        ) as response:
            turn.headers_ms = (time.perf_counter() - sent) * 1000
            if response.status_code != 200:
                turn.error = f"http {response.status_code}"
                return turn
            streams.opened()
            try:
                async for name, data in sse(response):
                    if turn.first_event_ms is None:
                        turn.first_event_ms = (time.perf_counter() - sent) * 1000
                    if name in ("completed", "error", "cancelled"):
                        if name != "completed":
                            turn.error = f"{name}: {data.get('error_code') or ''}"
                        return turn
                turn.error = "stream ended before the turn"
            finally:
                streams.closed()
    except httpx.HTTPError as error:
        turn.error = type(error).__name__
    return turn


async def level(
    client: httpx.AsyncClient,
    users: list[dict[str, str]],
    concurrency: int,
    rounds: int,
    gateway_pid: int,
    idle_seconds: float,
    ramp_seconds: float,
    processes: dict[str, int],
) -> dict[str, Any]:
    idle_before = cpu_seconds(gateway_pid)
    await asyncio.sleep(idle_seconds)
    idle_rate = (cpu_seconds(gateway_pid) - idle_before) / idle_seconds if idle_seconds else 0.0
    turns: list[Turn] = []
    streams = Open()
    cpu_before = cpu_seconds(gateway_pid)
    others_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    client_before = time.process_time()
    begun = time.perf_counter()
    for _ in range(rounds):
        starts = [i * ramp_seconds / concurrency for i in range(concurrency)]
        turns += await asyncio.gather(
            *(one_turn(client, users[i], streams, starts[i]) for i in range(concurrency))
        )
    seconds = time.perf_counter() - begun
    cpu = cpu_seconds(gateway_pid) - cpu_before
    client_cpu = time.process_time() - client_before
    others = {name: cpu_seconds(pid) - others_before[name] for name, pid in processes.items()}
    net_cpu = max(0.0, cpu - idle_rate * seconds)
    first = [t.first_event_ms for t in turns if t.first_event_ms is not None]
    headers = [t.headers_ms for t in turns if t.headers_ms is not None]
    errors = [t.error for t in turns if t.error]
    return {
        "concurrency": concurrency,
        "turns": len(turns),
        "most_streams_open": streams.most,
        "first_event_ms": {"p50": percentile(first, 0.5), "p95": percentile(first, 0.95)},
        "headers_ms": {"p50": percentile(headers, 0.5), "p95": percentile(headers, 0.95)},
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "gateway_cpu_ms_per_turn": round(net_cpu * 1000 / len(turns), 2),
        "gateway_cpu_ms_per_turn_with_idle": round(cpu * 1000 / len(turns), 2),
        "gateway_idle_cpu_share": round(idle_rate, 4),
        "gateway_cpu_share": round(cpu / seconds, 3),
        "cpu_ms_per_turn": {
            **{name: round(spent * 1000 / len(turns), 2) for name, spent in others.items()},
            "bench_client": round(client_cpu * 1000 / len(turns), 2),
        },
        "seconds": round(seconds, 2),
    }


def users(tenant: Tenant, count: int, auth: str) -> list[dict[str, str]]:
    """The request headers of ``count`` users of the tenant, each a caller of its own."""
    if auth == "proxy":
        return [{**tenant.headers, "x-ks-user-id": f"user{i}", "x-ks-role": "member"} for i in range(count)]
    found: list[dict[str, str]] = []
    with tenant.client() as http:
        while len(found) < count:
            body = {"name": f"bench user{len(found)}", "role": "member", "user_id": f"user{len(found)}"}
            for _ in range(TOKEN_CREATE_ATTEMPTS):
                created = http.post("/tokens", json=body)
                if created.status_code != 429:
                    break
                time.sleep(float(created.headers.get("retry-after", "1")))
            if created.status_code != 201:
                raise SystemExit(f"creating a bench user's token: {created.status_code} {created.text}")
            found.append({"authorization": f"Bearer {created.json()['token']}"})
    return found


def client_for(tenant: Tenant) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"{tenant.stack.gateway_url}/api/v1",
        timeout=httpx.Timeout(30, read=300),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,20,50,100", help="concurrent chats per level, comma-separated")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of N concurrent chats per level")
    parser.add_argument(
        "--answer-seconds", type=float, default=20.0, help="how long the model takes over an answer"
    )
    parser.add_argument(
        "--ramp-seconds", type=float, default=10.0, help="the N chats of a level start spread over this"
    )
    parser.add_argument("--tokens", type=int, default=20, help="tokens per answer")
    parser.add_argument(
        "--auth", choices=("token", "proxy"), default="token", help="how each user authenticates"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=2.0,
        help="how long the gateway's idle CPU is measured per level",
    )
    args = parser.parse_args()
    try:
        levels = [int(n) for n in args.levels.split(",")]
    except ValueError:
        parser.error(f"--levels: {args.levels!r} is not a comma-separated list of numbers, e.g. 1,20,50,100")
    if any(n < 1 for n in levels) or args.rounds < 1 or args.tokens < 1:
        parser.error("--levels, --rounds and --tokens must be at least 1")
    if min(args.answer_seconds, args.idle_seconds, args.ramp_seconds) < 0:
        parser.error("--answer-seconds, --ramp-seconds and --idle-seconds must be at least 0")

    def model(request: Recorded) -> Reply:
        decision = openai_decision("B", request.json)  # chitchat: one answer, no tools
        if decision is not None:
            return decision
        answer = openai_text_stream([f"word{i} " for i in range(args.tokens)])
        pause = args.answer_seconds / (args.tokens + 1)
        return dataclasses.replace(answer, delay=pause, chunk_delay=pause)

    figures: dict[str, Any] = {"machine": machine(), "auth": args.auth, "levels": []}
    # Conversation runs every turn of the largest level at once and modelhub lets every answer stream at
    # once, so no turn waits for a free slot there: the N streams carry their answers side by side.
    env = {
        "KS_CONVERSATION_MAX_CONCURRENT_TURNS": str(max(levels)),
        "KS_MODELHUB_PROVIDER_CONCURRENCY": str(max(levels)),
    }
    with scripted_model(model) as server, running_stack(env, server) as stack:
        tenant = Tenant(stack)
        tenant.use_model(server)
        gateway = stack.state().component("gateway")
        assert gateway.pid is not None, "the stack reports no gateway process"
        callers = users(tenant, max(levels), args.auth)
        print(f"gateway pid {gateway.pid}; {len(callers)} users", file=sys.stderr)
        processes = {c.name: c.pid for c in stack.state().components if c.pid is not None}

        async def run() -> None:
            async with client_for(tenant) as client:
                await level(client, callers, 1, 1, gateway.pid, 0, 0, {})  # warm-up
                for n in levels:
                    result = await level(
                        client,
                        callers,
                        n,
                        args.rounds,
                        gateway.pid,
                        args.idle_seconds,
                        args.ramp_seconds,
                        processes,
                    )
                    result["gateway_rss_mb"] = rss_mb(gateway.pid)
                    figures["levels"].append(result)
                    first, headers = result["first_event_ms"], result["headers_ms"]
                    print(
                        f"{n:>4} concurrent: first event p50 {first['p50']} ms, p95 {first['p95']} ms; "
                        f"headers p95 {headers['p95']} ms; {result['errors']} errors; "
                        f"gateway CPU {result['gateway_cpu_ms_per_turn']} ms/turn; "
                        f"{result['most_streams_open']} streams open at most",
                        file=sys.stderr,
                    )

        asyncio.run(run())
    figures["model"] = {"answer_seconds": args.answer_seconds, "tokens": args.tokens}
    figures["ramp_seconds"] = args.ramp_seconds
    at_goal = next((lv for lv in figures["levels"] if lv["concurrency"] == GOAL_CONCURRENCY), None)
    figures["goal"] = {"first_event_p95_ms": GOAL_P95_MS, "concurrency": GOAL_CONCURRENCY}
    figures["goal_met"] = (
        at_goal is not None
        and at_goal["errors"] == 0
        and (at_goal["first_event_ms"]["p95"] or float("inf")) < GOAL_P95_MS
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
