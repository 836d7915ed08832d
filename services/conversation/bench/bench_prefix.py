"""Prompt-prefix reuse across a 10-turn session: how much of each main-model request is a byte prefix
of the one before it (what a provider's prompt cache can reuse), and the cached tokens reported.

A scripted session (unchanged switches; a knowledge-base search in most turns, two chitchat turns)
runs through the whole stack. The scripted OpenAI-compatible model records every request and reports
``prompt_tokens_details.cached_tokens`` the way a prefix cache would: the longest byte prefix shared
with any earlier request, in whole blocks of 128 tokens (about 4 bytes each) from 1,024 tokens on —
a stand-in for a hosted provider's cache, which this machine cannot reach.

A request's prompt is its tool schemas followed by its messages, as providers render them. Only the
main requests (the agent's and generate's) count; query understanding is a short request of its own.

Usage: ``make bench-prefix``. Last line: one JSON object. Goal: >= 95% averaged over turns 2-10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HANDBOOK, Recorded, Reply, Tenant, machine, running_stack, scripted_model, sse
from scripted_provider import openai_decision, openai_text_stream, openai_tool_call_stream

QUESTIONS = [
    ("E", "How many days of annual leave do employees get?"),
    ("E", "Can unused leave be carried over?"),
    ("B", "Thanks, that helps a lot."),
    ("E", "When are taxi rides reimbursed?"),
    ("E", "What if I carry equipment?"),
    ("E", "Does that apply on weekends too?"),
    ("B", "Great, you are fast."),
    ("E", "Summarise the leave rules once more."),
    ("E", "And the expense rules?"),
    ("E", "Which of these changed most recently?"),
]
BLOCK_TOKENS = 128
MIN_CACHED_TOKENS = 1024
BYTES_PER_TOKEN = 4


def prompt_bytes(body: dict[str, Any]) -> bytes:
    tools = json.dumps(body.get("tools", []), ensure_ascii=False, sort_keys=True)
    messages = json.dumps(body["messages"], ensure_ascii=False)
    return (tools + messages).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Cache:
    """The provider side: remembers main prompts and reports what a prefix cache would reuse."""

    def __init__(self) -> None:
        self.prompts: list[bytes] = []
        self.lock = threading.Lock()

    def cached_tokens(self, prompt: bytes) -> int:
        with self.lock:
            best = max((common_prefix(prompt, p) for p in self.prompts), default=0)
            self.prompts.append(prompt)
        tokens = best // BYTES_PER_TOKEN
        return 0 if tokens < MIN_CACHED_TOKENS else tokens // BLOCK_TOKENS * BLOCK_TOKENS


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
    cache = Cache()
    labels = iter(label for label, _ in QUESTIONS)
    current = {"label": "E"}
    main_requests: list[dict[str, Any]] = []

    def model(request: Recorded) -> Reply:
        body = request.json
        decision = openai_decision(current["label"], body)
        if decision is not None:
            return decision
        if body["messages"][0]["role"] != "system" or "Rules:" not in json.dumps(body["messages"][0]):
            return openai_text_stream(["(rewritten) " + body["messages"][-1]["content"].splitlines()[-1]])
        prompt = prompt_bytes(body)
        cached = cache.cached_tokens(prompt)
        main_requests.append(
            {"bytes": prompt, "cached_tokens": cached, "prompt_tokens": len(prompt) // BYTES_PER_TOKEN}
        )
        if body.get("tools") and body["messages"][-1]["role"] != "tool":
            reply = openai_tool_call_stream("doc_retrieval", {"query": "leave and expenses"})
        else:
            reply = openai_text_stream(["The handbook says so [[c1]]."])
        usage = {
            "prompt_tokens": len(prompt) // BYTES_PER_TOKEN,
            "completion_tokens": 8,
            "total_tokens": len(prompt) // BYTES_PER_TOKEN + 8,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        assert reply.sse is not None
        last = json.loads(reply.sse[-2].removeprefix("data: "))
        reply.sse.insert(-1, f"data: {json.dumps({**last, 'choices': [], 'usage': usage})}\n\n")
        return reply

    turns: list[dict[str, Any]] = []
    with scripted_model(model) as server, running_stack(model_server=server) as stack:
        tenant = Tenant(stack)
        tenant.use_model(server)
        kb_id = tenant.knowledge_base(HANDBOOK)
        session = tenant.session()

        async def run() -> None:
            async with tenant.async_client() as http:
                for label, question in QUESTIONS:
                    current["label"] = next(labels)
                    before = len(main_requests)
                    body = {"message": question, "session_id": session, "knowledge_base_ids": [kb_id]}
                    async with http.stream("POST", "/chat/turns", json=body) as response:
                        final: dict[str, Any] = {}
                        async for name, data in sse(response):
                            if name in ("completed", "error", "cancelled"):
                                final = data
                    turns.append(
                        {
                            "question": question,
                            "label": label,
                            "requests": list(range(before, len(main_requests))),
                            "final": final,
                        }
                    )

        asyncio.run(run())

    rows = []
    previous: bytes | None = None
    for number, turn in enumerate(turns, start=1):
        for index in turn["requests"]:
            request = main_requests[index]
            share = common_prefix(request["bytes"], previous) / len(request["bytes"]) if previous else 0.0
            cached_share = request["cached_tokens"] / max(1, request["prompt_tokens"])
            rows.append(
                {
                    "turn": number,
                    "request": index + 1,
                    "prompt_bytes": len(request["bytes"]),
                    "prefix_share": round(share, 4),
                    "cached_token_share": round(cached_share, 4),
                }
            )
            print(
                f"turn {number:>2} request {index + 1:>2}: {len(request['bytes']):>6} bytes, "
                f"prefix of the previous {share:6.1%}, cached tokens {cached_share:6.1%}",
                file=sys.stderr,
            )
            previous = request["bytes"]
        outcome = turn["final"].get("kind", "?")
        if outcome != "completed":
            print(f"turn {number} ended {outcome}: {turn['final']}", file=sys.stderr)
    later = [r for r in rows if r["turn"] >= 2]
    average = sum(r["prefix_share"] for r in later) / max(1, len(later))
    cached = sum(r["cached_token_share"] for r in later) / max(1, len(later))
    figures = {
        "machine": machine(),
        "turns": len(turns),
        "requests": rows,
        "prefix_share_turns_2_10": round(average, 4),
        "cached_token_share_turns_2_10": round(cached, 4),
        "completed_turns": sum(1 for t in turns if t["final"].get("kind") == "completed"),
        "goal": 0.95,
        "goal_met": average >= 0.95,
    }
    print(
        f"average prefix share over turns 2-10: {average:.1%} (cached tokens {cached:.1%})", file=sys.stderr
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
