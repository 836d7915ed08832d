"""Benchmark of the toolrunner: the real service process (``python -m knowsphere_toolrunner``, as
``make up`` runs it) called over gRPC on loopback from this process.

- ListTools: latency of a turn's listing (knowledge base, web and graph on, skills bound), p50/p95/p99
  over ``--list-calls`` calls after a warm-up; the goal is p95 < 2 ms. The same figures for the gRPC
  health check of the same server are the floor any call pays on this machine.
- Stored results: a 1 MB tool result read back through GetStoredData (one call, the whole text) and
  through the get_stored_data tool (every page, as the model would), each ``--reads`` times.
- Sandbox start-to-exit of an empty Python script (``bench_sandbox.measure``: the whole path
  execute_skill_script takes, every protection in force), goal < 150 ms.

The store is the service's SQLite file in a temporary data folder (the bench writes the 1 MB result
into it directly, and installs the bound skill, with a script, beside it); the peers (retrieval,
modelhub) are not needed and point at a closed port. The last
line printed is the JSON of all figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The sibling benchmark (run as a script, this folder is on sys.path).
from bench_sandbox import GOAL_MS as SANDBOX_GOAL_MS
from bench_sandbox import measure as measure_sandbox
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere.toolrunner.v1.toolrunner_enums import ContentFormat
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.identity_token import generate_keys, install_from_keys
from knowsphere_runtime.rpc import check_health, open_channel
from knowsphere_stack.components import LOCAL_CLIENT_ISSUER, identity_env
from knowsphere_toolrunner.adapters.sql_store import SqlToolResultStore
from knowsphere_toolrunner.domain.ports import StoredResult
from knowsphere_toolrunner.settings import Settings
from knowsphere_toolrunner.skills import SkillStore

IDENTITY = Identity("bench", "bench-user")
BOUND_SKILL = "report-writer"
MEGABYTE_CHARS = 1_000_000
LIST_GOAL_MS = 2.0
START_TIMEOUT_SECONDS = 60


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(cuts[49], 3),
        "p95_ms": round(cuts[94], 3),
        "p99_ms": round(cuts[98], 3),
        "max_ms": round(ordered[-1], 3),
    }


def megabyte_result() -> str:
    rows = []
    i = 0
    while sum(len(r) for r in rows) < MEGABYTE_CHARS:
        row = {"chunk_id": f"doc-{i // 50}-{i}", "text": "年假 annual leave rules " * 8}
        rows.append(json.dumps(row, ensure_ascii=False))
        i += 1
    return "[" + ",".join(rows) + "]"


def start_service(folder: str, port: int) -> subprocess.Popen[bytes]:
    """The toolrunner as ``make up`` runs it, on ``port``, its data in ``folder``, its peers away; it
    trusts this process's identity tokens (keys in ``folder/identity``)."""
    keys = Path(folder) / "identity"
    generate_keys(keys, ["toolrunner", LOCAL_CLIENT_ISSUER])
    install_from_keys(keys, LOCAL_CLIENT_ISSUER)
    env = {
        **os.environ,
        **identity_env(keys, "toolrunner"),
        "KS_TOOLRUNNER_DATA_DIR": folder,
        "KS_TOOLRUNNER_GRPC_PORT": str(port),
        "KS_TOOLRUNNER_RETRIEVAL_ADDR": f"127.0.0.1:{closed_port()}",
        "KS_TOOLRUNNER_MODELHUB_ADDR": f"127.0.0.1:{closed_port()}",
        "KS_TOOLRUNNER_LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen([sys.executable, "-m", "knowsphere_toolrunner"], env=env)


def install_skill(folder: str) -> None:
    """The bound skill, as an operator installs it: ListTools looks at its files to offer
    execute_skill_script."""
    skill = SkillStore(Path(folder)).tenant_dir(IDENTITY.tenant_id) / BOUND_SKILL
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\ndescription: Writes reports.\n---\nRun scripts/build.py.\n")
    (skill / "scripts" / "build.py").write_text("print('report')\n")


async def bench(
    service: subprocess.Popen[bytes],
    folder: str,
    port: int,
    list_calls: int,
    reads: int,
    sandbox_runs: int,
) -> dict[str, Any]:
    channel = open_channel(f"127.0.0.1:{port}", services=[CONTRACTS["toolrunner"].descriptor])
    settings = Settings(data_dir=Path(folder), retrieval_addr="unused", modelhub_addr="unused")
    store = SqlToolResultStore(settings.result_store_url())
    try:
        await _wait_serving(channel, service)
        await store.open()
        stub = CONTRACTS["toolrunner"].stub(channel)
        with bound_identity(IDENTITY):
            floor = await _bench_health(channel, list_calls)
            listing = await _bench_list_tools(stub, list_calls)
            stored = await _bench_stored(stub, store, reads, settings.stored_page_chars)
    finally:
        await store.close()
        await channel.close()
    # In this process, after the service's calls: the sandbox path alone, as the service runs it.
    sandbox = await measure_sandbox(sandbox_runs, warmup=3)
    return {
        "list_tools": listing,
        "grpc_health_check_floor": floor,
        "stored_1mb": stored,
        "sandbox_start_to_exit": sandbox,
    }


async def _wait_serving(channel: Any, service: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while await check_health(channel, timeout=1.0) != "SERVING":
        if service.poll() is not None:
            raise RuntimeError(f"the toolrunner exited with status {service.returncode} before serving")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the toolrunner did not serve within {START_TIMEOUT_SECONDS} s")
        await asyncio.sleep(0.1)


async def _bench_health(channel: Any, calls: int) -> dict[str, Any]:
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest()
    for _ in range(max(50, calls // 10)):
        await stub.Check(request)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await stub.Check(request)
        samples.append((time.perf_counter() - started) * 1000)
    return {"calls": calls, **percentiles(samples)}


async def _bench_list_tools(stub: Any, calls: int) -> dict[str, Any]:
    request = pb.ListToolsRequest(
        switches=pb.TurnSwitches(knowledge_base_ids=["kb-1", "kb-2"], web_search=True, knowledge_graph=True),
        skill_names=[BOUND_SKILL],
    )
    warm = await stub.ListTools(request)
    if "execute_skill_script" not in [tool.name for tool in warm.tools]:
        raise RuntimeError("the bound skill's script did not bring execute_skill_script")
    for _ in range(max(50, calls // 10)):
        await stub.ListTools(request)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await stub.ListTools(request)
        samples.append((time.perf_counter() - started) * 1000)
    figures = percentiles(samples)
    return {
        "calls": calls,
        **figures,
        "goal_p95_ms": LIST_GOAL_MS,
        "goal_met": figures["p95_ms"] < LIST_GOAL_MS,
    }


async def _bench_stored(stub: Any, store: SqlToolResultStore, reads: int, page_chars: int) -> dict[str, Any]:
    text = megabyte_result()
    await store.put_result(
        StoredResult(
            ref_id="ref_bench",
            tenant_id=IDENTITY.tenant_id,
            user_id=IDENTITY.user_id,
            session_id="s1",
            turn_id="t1",
            tool_name="bench",
            content=text,
            format=ContentFormat.JSON,
            char_count=len(text),
            summary="",
            distilled=False,
            degraded=False,
            create_time=datetime.now(UTC),
        )
    )
    whole: list[float] = []
    for _ in range(reads):
        started = time.perf_counter()
        answer = await stub.GetStoredData(pb.GetStoredDataRequest(ref_id="ref_bench"))
        whole.append((time.perf_counter() - started) * 1000)
        assert len(answer.data.content) == len(text)
    paged: list[float] = []
    pages = 0
    for _ in range(reads):
        started = time.perf_counter()
        offset: int | None = 0
        pages = 0
        while offset is not None:
            arguments = struct_pb2.Struct()
            arguments.update({"ref_id": "ref_bench", "offset": offset})
            answer = await stub.ExecuteTool(
                pb.ExecuteToolRequest(
                    name="get_stored_data", arguments=arguments, context=pb.ToolContext(session_id="s1")
                )
            )
            assert not answer.HasField("error"), answer.content
            offset = json.loads(answer.content)["next_offset"]
            pages += 1
        paged.append((time.perf_counter() - started) * 1000)
    return {
        "chars": len(text),
        "utf8_bytes": len(text.encode()),
        "reads": reads,
        "get_stored_data_rpc": {"p50_ms": round(statistics.median(whole), 2), "max_ms": round(max(whole), 2)},
        "get_stored_data_tool_all_pages": {
            "pages": pages,
            "page_chars": page_chars,
            "p50_ms": round(statistics.median(paged), 2),
            "max_ms": round(max(paged), 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list-calls", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=10)
    parser.add_argument("--sandbox-runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        port = closed_port()
        install_skill(folder)
        service = start_service(folder, port)
        try:
            figures = asyncio.run(
                bench(service, folder, port, args.list_calls, args.reads, args.sandbox_runs)
            )
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(timeout=30)
    listing = figures["list_tools"]
    stored = figures["stored_1mb"]
    floor = figures["grpc_health_check_floor"]
    print(f"ListTools: p50 {listing['p50_ms']} ms, p95 {listing['p95_ms']} ms (goal < {LIST_GOAL_MS} ms)")
    print(f"gRPC health check on the same server: p50 {floor['p50_ms']} ms, p95 {floor['p95_ms']} ms")
    print(
        f"1 MB stored result: GetStoredData p50 {stored['get_stored_data_rpc']['p50_ms']} ms; "
        f"get_stored_data tool, {stored['get_stored_data_tool_all_pages']['pages']} pages, "
        f"p50 {stored['get_stored_data_tool_all_pages']['p50_ms']} ms"
    )
    sandbox = figures["sandbox_start_to_exit"]
    print(
        f"sandbox start-to-exit, empty Python script: p50 {sandbox['p50_ms']} ms, p95 {sandbox['p95_ms']} ms "
        f"(goal < {SANDBOX_GOAL_MS:g} ms; {', '.join(sandbox['protections'])})"
    )
    print(json.dumps(figures, ensure_ascii=False))


if __name__ == "__main__":
    main()
