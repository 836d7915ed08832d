"""Conversation throughput and latency: N concurrent chat turns through the gateway, the queue and
the graph, against a scripted model with fixed timings.

For each concurrency level it starts that many turns at once (each in a session of its own) and
measures, per turn, from the request to the ``started`` event and to the first text delta. The model's
own time is known (it answers the intent decision at once and sends its first token after
``--first-token-ms``; like a hosted model's stream, that first chunk names the role and the first
words follow one ``--token-ms`` later), so ``overhead_first_token_ms`` is the time to the first token
minus those two: what the platform adds. It also reports turns per second and the conversation
replica's memory.

Usage: ``make bench-conversation`` (``BENCH_ARGS="--levels 1,20,50,100"``). Last line: one JSON object.
Goal: platform overhead to the first token p95 < 50 ms at 50 concurrent turns.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Recorded, Reply, Tenant, machine, rss_mb, running_stack, scripted_model, sse
from scripted_provider import openai_decision, openai_text_stream


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


async def one_turn(http: Any, session_id: str) -> tuple[float, float, bool]:
    sent = time.perf_counter()
    started = first_token = 0.0
    ok = False
    async with http.stream(
        "POST", "/chat/turns", json={"message": "tell me a story", "session_id": session_id}
    ) as response:
        response.raise_for_status()
        async for name, _ in sse(response):
            now = time.perf_counter()
            if name == "started" and not started:
                started = now
            elif name == "text_delta" and not first_token:
                first_token = now
            elif name in ("completed", "error", "cancelled"):
                ok = name == "completed"
                break
    return (started - sent) * 1000, (first_token - sent) * 1000, ok


async def level(tenant: Tenant, sessions: list[str], first_token_ms: float) -> dict[str, Any]:
    async with tenant.async_client() as http:
        begun = time.perf_counter()
        results = await asyncio.gather(*(one_turn(http, s) for s in sessions))
        seconds = time.perf_counter() - begun
    to_started = [r[0] for r in results]
    to_token = [r[1] for r in results]
    overhead = [t - first_token_ms for t in to_token]
    return {
        "concurrency": len(sessions),
        "completed": sum(r[2] for r in results),
        "turns_per_second": round(len(sessions) / seconds, 2),
        "first_event_ms": {"p50": percentile(to_started, 0.5), "p95": percentile(to_started, 0.95)},
        "first_token_ms": {"p50": percentile(to_token, 0.5), "p95": percentile(to_token, 0.95)},
        "overhead_first_token_ms": {
            "p50": percentile(overhead, 0.5),
            "p95": percentile(overhead, 0.95),
            "mean": round(statistics.fmean(overhead), 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,20,50", help="concurrent turns per level, comma-separated")
    parser.add_argument(
        "--first-token-ms", type=float, default=200.0, help="the model's time to its first token"
    )
    parser.add_argument("--token-ms", type=float, default=20.0, help="the model's time between tokens")
    parser.add_argument("--tokens", type=int, default=10, help="tokens per answer")
    parser.add_argument("--max-concurrent-turns", type=int, default=64, help="turns one replica runs at once")
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",")]

    def model(request: Recorded) -> Reply:
        decision = openai_decision("B", request.json)  # chitchat: one answer, no tools
        if decision is not None:
            return decision
        answer = openai_text_stream([f"word{i} " for i in range(args.tokens)])
        return dataclasses.replace(answer, delay=args.first_token_ms / 1000, chunk_delay=args.token_ms / 1000)

    figures: dict[str, Any] = {"machine": machine(), "replicas": 1, "levels": []}
    env = {"KS_CONVERSATION_MAX_CONCURRENT_TURNS": str(args.max_concurrent_turns)}
    with scripted_model(model) as server, running_stack(env, server) as stack:
        tenant = Tenant(stack)
        tenant.use_model(server)
        conversation = stack.state().component("conversation")
        figures["conversation_rss_mb_idle"] = rss_mb(conversation.pid)
        # The model's own time to its first words: the role chunk, then one token interval.
        model_first_words_ms = args.first_token_ms + args.token_ms
        asyncio.run(level(tenant, [tenant.session()], model_first_words_ms))  # warm-up
        for n in levels:
            sessions = [tenant.session() for _ in range(n)]
            result = asyncio.run(level(tenant, sessions, model_first_words_ms))
            result["conversation_rss_mb"] = rss_mb(conversation.pid)
            figures["levels"].append(result)
            print(
                f"{n:>4} concurrent: first event p95 {result['first_event_ms']['p95']} ms, "
                f"first token p95 {result['first_token_ms']['p95']} ms "
                f"(overhead p95 {result['overhead_first_token_ms']['p95']} ms), "
                f"{result['turns_per_second']} turns/s, {result['completed']}/{n} completed, "
                f"conversation RSS {result['conversation_rss_mb']} MiB",
                file=sys.stderr,
            )
    figures["model"] = {
        "first_token_ms": args.first_token_ms,
        "token_ms": args.token_ms,
        "tokens": args.tokens,
    }
    at_50 = next((lv for lv in figures["levels"] if lv["concurrency"] == 50), None)
    figures["goal_overhead_p95_ms_at_50"] = 50
    figures["goal_met"] = at_50 is not None and at_50["overhead_first_token_ms"]["p95"] < 50
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
