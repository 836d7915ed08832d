"""The web UI's weight and speed: the built bundle, and how soon a long conversation is usable.

    make bench-ui                                      # 100 turns (200 messages), 5 loads
    make bench-ui BENCH_ARGS="--turns 20 --loads 3"
    make bench-ui BENCH_ARGS="--bundle-only"           # sizes only, no platform, no browser

Bundle: every script and style sheet of ``frontend/dist/assets``, raw and gzipped, each file alone and
gzipped by Node's zlib exactly as ``frontend/scripts/check-dist.mjs`` measures its budget; first-load
JavaScript is the entry script of ``index.html`` and every chunk it preloads, the rest load with their
page.

Time to interactive: the whole stack, started on free ports in a temporary folder by the conversation
benchmarks' harness (``services/conversation/bench/harness.py``, the launcher of ``make up``), with a
scripted OpenAI-compatible chat model on loopback as a tenant's default (a stand-in for a hosted
provider, which this machine cannot reach). A session of ``--turns`` turns is made through the gateway
as any client would: each turn searches a small knowledge base and answers in about 60 words citing
``[[c1]]``, so every answer on the page has its citation chip. Then Debian's Chromium, headless and
driven by Playwright, signs in through the login page and opens the session's chat page ``--loads``
times: from the navigation's start to the first animation frame in which every message is in the list
and the question box is enabled. "Cold" loads start from an emptied HTTP cache (a first visit); "warm"
loads come right after, with the cache filled (a return visit). Also the first contentful paint, the
time the page spent reading the messages (its requests, one per page of them, first start to last end),
the JS heap once loaded (after a garbage collection, from the DevTools protocol) and the DOM's node count.
No CPU or network throttling: this machine's loopback.

Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import ViewportSize, sync_playwright

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "services" / "conversation" / "bench"))
from harness import Recorded, Reply, Tenant, machine, running_stack, scripted_model, sse  # noqa: E402
from scripted_provider import openai_decision, openai_text_stream, openai_tool_call_stream  # noqa: E402

DIST = ROOT / "frontend" / "dist"
CHROMIUM = Path(os.environ.get("KS_BENCH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium reaches for Google's services, which a closed network never answers.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 860}
NODE_GZIPPED_SIZES = (
    "const { gzipSync } = require('node:zlib'); const { readFileSync } = require('node:fs');"
    "console.log(JSON.stringify(process.argv.slice(1).map((f) => gzipSync(readFileSync(f)).length)))"
)
"""The gzipped size of each file named, as check-dist.mjs takes it (Node's zlib at its defaults)."""
LOAD_TIMEOUT_MS = 60_000
SETTLE_SECONDS = 0.5
"""After a load, before its heap is read: what the page starts once interactive has run."""
TURN_TIMEOUT_SECONDS = 120.0
HANDBOOK = (
    b"# Employee handbook\n\n## Annual leave\n\n"
    b"Every employee gets 27 days of paid annual leave per calendar year. "
    b"Unused leave can be carried over until the end of March.\n\n## Expenses\n\n"
    b"Taxi rides are reimbursed only after 22:00 or when carrying equipment.\n"
)
ANSWER = (
    "Every employee gets 27 days of paid annual leave per calendar year, and leave that is not taken "
    "can be carried over until the end of March of the following year. Requests go to your manager, "
    "who approves them in the HR portal; the balance shown there is updated every night [[c1]]."
)
ANSWER_PIECES = 8
HISTORY_REQUESTS = """() => {
    const pages = performance.getEntriesByType('resource').filter((e) => e.name.includes('/messages'))
    const start = Math.min(...pages.map((e) => e.startTime))
    const end = Math.max(...pages.map((e) => e.responseEnd))
    return { requests: pages.length, ms: pages.length ? end - start : 0 }
}"""
"""The requests that read the conversation's messages (one per page of them), first start to last end."""
INTERACTIVE = """(expected) => {
    const messages = document.querySelectorAll('ol.messages > li.message').length
    const input = document.querySelector('#chat-input')
    return messages >= expected && input !== null && !input.disabled ? performance.now() : false
}"""


# --- the bundle -------------------------------------------------------------------------------------


def first_load_files(dist: Path) -> list[str]:
    """The assets a first visit loads before any page: the entry script, what index.html preloads, and
    its style sheets."""
    html = (dist / "index.html").read_text(encoding="utf-8")
    entry = re.findall(r'<script\b[^>]*\ssrc\s*=\s*"([^"]+)"', html, re.IGNORECASE)
    preloaded = [
        re.search(r'\shref\s*=\s*"([^"]+)"', tag, re.IGNORECASE)
        for tag in re.findall(r"<link\b[^>]*>", html, re.IGNORECASE)
        if re.search(r'rel\s*=\s*"(modulepreload|stylesheet)"', tag, re.IGNORECASE)
    ]
    hrefs = entry + [match.group(1) for match in preloaded if match]
    return list(dict.fromkeys(href.removeprefix("/ui/") for href in hrefs))


def bundle_sizes(dist: Path) -> dict[str, Any]:
    if not (dist / "index.html").is_file():
        raise SystemExit(f"{dist}/index.html not found: build the web UI first (make setup)")
    first = set(first_load_files(dist))
    paths = sorted(p for p in (dist / "assets").iterdir() if p.suffix in (".js", ".css"))
    gzipped = json.loads(
        subprocess.run(
            ["node", "-e", NODE_GZIPPED_SIZES, *map(str, paths)], capture_output=True, text=True, check=True
        ).stdout
    )
    chunks = [
        {
            "file": f"assets/{path.name}",
            "kind": "js" if path.suffix == ".js" else "css",
            "first_load": f"assets/{path.name}" in first,
            "bytes": path.stat().st_size,
            "gzip_bytes": size,
        }
        for path, size in zip(paths, gzipped, strict=True)
    ]

    def total(kind: str, first_load: bool | None = None) -> int:
        return sum(
            c["gzip_bytes"]
            for c in chunks
            if c["kind"] == kind and (first_load is None or c["first_load"] == first_load)
        )

    return {
        "first_load_js_gzip_bytes": total("js", True),
        "first_load_css_gzip_bytes": total("css", True),
        "lazy_js_gzip_bytes": total("js", False),
        "all_js_gzip_bytes": total("js"),
        "all_js_bytes": sum(c["bytes"] for c in chunks if c["kind"] == "js"),
        "css_gzip_bytes": total("css"),
        "chunks": chunks,
    }


def kb(size: int) -> str:
    return f"{size / 1000:.1f} kB"


def print_bundle(sizes: dict[str, Any]) -> None:
    print("bundle (frontend/dist), each file gzipped alone:")
    print(f"  {'file':<44} {'load':<6} {'raw':>10} {'gzipped':>10}")
    for chunk in sorted(sizes["chunks"], key=lambda c: (not c["first_load"], -c["gzip_bytes"])):
        load = "first" if chunk["first_load"] else "later"
        print(f"  {chunk['file']:<44} {load:<6} {kb(chunk['bytes']):>10} {kb(chunk['gzip_bytes']):>10}")
    print(f"  first-load JavaScript, gzipped: {kb(sizes['first_load_js_gzip_bytes'])}")
    print(f"  all JavaScript, gzipped: {kb(sizes['all_js_gzip_bytes'])} (raw {kb(sizes['all_js_bytes'])})")
    print(f"  first-load CSS, gzipped: {kb(sizes['first_load_css_gzip_bytes'])}")
    print(f"  all CSS, gzipped: {kb(sizes['css_gzip_bytes'])}")


# --- a long conversation ----------------------------------------------------------------------------


def answer(request: Recorded) -> Reply:
    """Every turn: a knowledge-base search, then a cited answer in a few pieces."""
    body = request.json
    decision = openai_decision("E", body)  # kb_search
    if decision is not None:
        return decision
    if body["messages"][-1]["role"] == "tool":
        words = ANSWER.split(" ")
        size = -(-len(words) // ANSWER_PIECES)
        return openai_text_stream([" ".join(words[i : i + size]) + " " for i in range(0, len(words), size)])
    return openai_tool_call_stream("doc_retrieval", {"query": "annual leave"})


async def make_turns(tenant: Tenant, session_id: str, kb_id: str, turns: int) -> float:
    """Asks ``turns`` questions in the session, one after another; the seconds it took."""
    started = time.perf_counter()
    async with tenant.async_client() as http:
        for number in range(1, turns + 1):
            question = (
                f"Question {number}: how many days of annual leave do I get, and can I carry them over?"
            )
            body = {"message": question, "session_id": session_id, "knowledge_base_ids": [kb_id]}
            async with asyncio.timeout(TURN_TIMEOUT_SECONDS):
                async with http.stream("POST", "/chat/turns", json=body) as response:
                    response.raise_for_status()
                    async for name, data in sse(response):
                        if name in ("error", "cancelled"):
                            raise RuntimeError(f"turn {number} ended with {name}: {data}")
                        if name == "completed":
                            break
            if number % 20 == 0:
                print(f"  {number} of {turns} turns", flush=True)
    return time.perf_counter() - started


def stored_messages(tenant: Tenant, session_id: str) -> int:
    count, token = 0, ""
    with tenant.client() as http:
        while True:
            page = http.get(f"/sessions/{session_id}/messages", params={"page_token": token} if token else {})
            page.raise_for_status()
            count += len(page.json()["messages"])
            token = page.json().get("next_page_token", "")
            if not token:
                return count


# --- the browser ------------------------------------------------------------------------------------


def measure_loads(
    gateway_url: str, token: str, session_id: str, messages: int, loads: int
) -> list[dict[str, Any]]:
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(
            f"Chromium not found at {CHROMIUM}: install Debian's chromium package (apt-get install chromium)"
        )
    url = f"{gateway_url}/ui/chat/{session_id}"
    results: list[dict[str, Any]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT, locale="en-US")
        page = context.new_page()
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        devtools = context.new_cdp_session(page)
        devtools.send("Performance.enable")
        # Signed in once, through the login page; the token stays in the tab's session storage.
        page.goto(f"{gateway_url}/ui/login")
        page.locator("#login-token").fill(token)
        page.locator("form button[type=submit]").click()
        page.wait_for_url(re.compile(r"/ui/chat$"))
        for _ in range(loads):
            for cache in ("cold", "warm"):
                if cache == "cold":
                    devtools.send("Network.clearBrowserCache")
                page.goto(url, wait_until="commit")
                interactive = page.wait_for_function(INTERACTIVE, arg=messages, polling="raf").json_value()
                time.sleep(SETTLE_SECONDS)
                devtools.send("HeapProfiler.collectGarbage")
                metrics = {m["name"]: m["value"] for m in devtools.send("Performance.getMetrics")["metrics"]}
                paint = page.evaluate(
                    "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null"
                )
                history = page.evaluate(HISTORY_REQUESTS)
                results.append(
                    {
                        "cache": cache,
                        "interactive_ms": round(float(interactive), 1),
                        "first_contentful_paint_ms": round(float(paint), 1) if paint is not None else None,
                        "history_requests": history["requests"],
                        "history_ms": round(float(history["ms"]), 1),
                        "js_heap_used_mib": round(metrics["JSHeapUsedSize"] / 2**20, 2),
                        "js_heap_total_mib": round(metrics["JSHeapTotalSize"] / 2**20, 2),
                        "dom_nodes": int(metrics["Nodes"]),
                        "messages_shown": page.locator("ol.messages > li.message").count(),
                    }
                )
        browser.close()
    return results


def summary(results: list[dict[str, Any]], cache: str) -> dict[str, Any]:
    runs = [r for r in results if r["cache"] == cache]

    def p50(key: str) -> float:
        return round(statistics.median(r[key] for r in runs if r[key] is not None), 1)

    return {
        "loads": len(runs),
        "interactive_p50_ms": p50("interactive_ms"),
        "interactive_max_ms": max(r["interactive_ms"] for r in runs),
        "first_contentful_paint_p50_ms": p50("first_contentful_paint_ms"),
        "history_requests": runs[-1]["history_requests"],
        "history_p50_ms": p50("history_ms"),
        "js_heap_used_p50_mib": p50("js_heap_used_mib"),
        "dom_nodes": runs[-1]["dom_nodes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--turns", type=int, default=100, help="turns in the conversation (two messages each)"
    )
    parser.add_argument("--loads", type=int, default=5, help="loads of the chat page, each cold then warm")
    parser.add_argument("--dist", type=Path, default=DIST, help="the built web UI")
    parser.add_argument("--bundle-only", action="store_true", help="the bundle's sizes only")
    args = parser.parse_args()

    print(f"machine: {machine()}; Chromium at {CHROMIUM}")
    sizes = bundle_sizes(args.dist)
    print_bundle(sizes)
    figures: dict[str, Any] = {"bundle": {k: v for k, v in sizes.items() if k != "chunks"}}
    figures["bundle"]["chunks"] = {c["file"]: c["gzip_bytes"] for c in sizes["chunks"]}
    if not args.bundle_only:
        with scripted_model(answer) as server, running_stack(model_server=server) as stack:
            tenant = Tenant(stack)
            tenant.use_model(server)
            kb_id = tenant.knowledge_base(HANDBOOK)
            session_id = tenant.session()
            with tenant.client() as http:
                created = http.post("/tokens", json={"name": "bench-ui", "role": "member"})
                created.raise_for_status()
                token = created.json()["token"]
            print(f"making a conversation of {args.turns} turns through the platform (scripted model)")
            took = asyncio.run(make_turns(tenant, session_id, kb_id, args.turns))
            messages = stored_messages(tenant, session_id)
            print(f"  {messages} messages stored in {took:.1f} s")
            results = measure_loads(stack.gateway_url, token, session_id, messages, args.loads)
        size = f"{VIEWPORT['width']}x{VIEWPORT['height']}"
        print(f"chat page with {messages} messages, {size}, headless Chromium:")
        print(
            f"  {'load':<6} {'interactive':>12} {'first paint':>12} {'messages read':>16} "
            f"{'JS heap':>10} {'DOM nodes':>10}"
        )
        for r in results:
            paint = r["first_contentful_paint_ms"] or 0
            read = f"{r['history_ms']:.0f} ms ({r['history_requests']})"
            print(
                f"  {r['cache']:<6} {r['interactive_ms']:>9.0f} ms {paint:>9.0f} ms {read:>16} "
                f"{r['js_heap_used_mib']:>6.1f} MiB {r['dom_nodes']:>10}"
            )
        figures["chat_page"] = {
            "messages": messages,
            "turns_made_in_s": round(took, 1),
            "cold": summary(results, "cold"),
            "warm": summary(results, "warm"),
            "platform": "knowsphere_stack via services/conversation/bench/harness.py, scripted model",
        }
        cold, warm = figures["chat_page"]["cold"], figures["chat_page"]["warm"]
        print(
            f"  interactive p50: cold {cold['interactive_p50_ms']:.0f} ms, "
            f"warm {warm['interactive_p50_ms']:.0f} ms; JS heap p50 {warm['js_heap_used_p50_mib']:.1f} MiB"
        )
    figures["machine"] = machine()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
