"""Scale-out on one machine: the same work with more replicas, and what each replica adds per unit of work.

    make bench-scale                                   # every configuration below
    make bench-scale BENCH_ARGS="--docs 40 --turns 20 --configs workers-1,workers-2"

Each configuration is a whole stack of its own, started by the same launcher as ``make up`` (``ks-stack``'s
``KS_STACK_REPLICAS_*``) on free ports in a temporary folder, with fresh PostgreSQL databases for modelhub's
registry and conversation's sessions and checkpoints (every configuration, one replica or more, so the
stores compared are the same; the machine's server, ``--postgres-url``):

- ``workers-1``, ``workers-2``, ``workers-3``: 1, 2, 3 ingestion workers; ``modelhub-2``: 2 workers and
  2 modelhub replicas (against ``workers-2``). A SciFact slice (``--docs``, one document per record, as
  ``make bench-ingest`` reads it) is uploaded through the ingestion gRPC API in ``UploadDocuments`` streams
  of ``--files-per-upload`` files, ``--upload-streams`` at a time, and waited for until every document is
  ready or failed. Each upload is one workflow, so small uploads give every worker a share. Documents per
  second, and CPU-seconds per document summed over every process of the stack (NATS, Temporal, the
  services and their children, from ``/proc``).
- ``conversation-1``, ``conversation-2``: 1 and 2 conversation replicas. ``--turns`` chat turns through the
  gateway, ``--concurrency`` at once, each in a session of its own, against a scripted OpenAI-compatible
  model on loopback that answers every request after ``--model-delay-ms`` (intent decision: chitchat, then
  a short streamed answer). Turns per second, p50/p95 time to the first SSE event, CPU-seconds per turn.

Before warming up and again before measuring, each configuration waits until the stack is idle (a
replica reported healthy may still be initialising). It warms up so that a replica's first work (imports,
tokenizer, model, connections) is not counted per document: single-document uploads into knowledge bases
of their own until every worker has run one (Temporal's history names the worker of each workflow task)
and an Embed call to every modelhub replica; or a few turns until every conversation replica has answered
one (its log's "turn finished"). The same sources show how the measured work was shared: workflows per
worker, turns per replica. The CPU the machine spent outside the stack meanwhile (this client, and
anyone else's work) tells a noisy run. Ratios are taken against the baseline named above; the CPU ratio is
the one the issue's "overhead within 5% of one replica" is about. Prints a table per configuration as it
finishes and a summary; the last line is one JSON object with every figure and the ratios.

What to expect. A replica helps where one process is the bottleneck and cores are left, not where the
cores are full, and it must not add work per unit: the platform's CPU per document (per turn) within 5%
of one replica is the figure that matters on a small machine. On two cores, ingesting SciFact at the
default size keeps both busy (the embedding model in modelhub, a thread per core, is most of a document's
CPU), so more workers or modelhub replicas leave documents per second where it was, and two modelhub
replicas oversubscribe the cores (``--env KS_MODELHUB_LOCAL_EMBEDDING_THREADS=1`` to compare). A short
slice leaves the cores idle part of the time (one worker's workflow stages one after another, the embed
batcher's wait, round trips), which another worker can fill; and with ten documents per workflow, a
modelhub replica gets so few Embed calls that their split is lumpy. With more cores, ingestion workers
and modelhub replicas scale documents per second with the cores until the embedding model's CPU is
saturated. Conversation replicas scale turns that wait on models: one replica is one Python event loop
(one core at most) running at most ``KS_CONVERSATION_MAX_CONCURRENT_TURNS`` turns at once (16 by default,
``--max-concurrent-turns``), so a second replica spreads concurrent turns over a second core and lets
twice as many turns wait on a slow model at once, while the CPU per turn should stay flat. Runs of a few
seconds are noisy on a shared two-core machine: compare the defaults, or more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_stack import Stack, StackConfig, StackStartError

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "services" / "ingestion" / "bench"))
sys.path.insert(0, str(ROOT / "services" / "conversation" / "bench"))
from bench_conversation import percentile  # noqa: E402
from bench_ingest import TENANT, _upload, documents  # noqa: E402
from harness import PROXY_SECRET, Recorded, Reply, ScriptedProvider, Tenant, machine, sse  # noqa: E402
from scripted_provider import openai_decision, openai_text_stream  # noqa: E402

DATASET = ROOT.parent / "shared" / "data" / "beir-scifact"
POSTGRES_URL = os.environ.get(
    "KS_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
DATABASE_CALL_SECONDS = 15.0
STACK_START_SECONDS = 300.0
STOP_GRACE_SECONDS = 10.0
INGEST_TIMEOUT_SECONDS = 900.0
CHAT_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 0.25
"""How often the ingestion wait asks whether documents are still on their way (its time resolution)."""
LOG_FLUSH_SECONDS = 10.0
"""How long the count of turns per replica waits for the replicas' "turn finished" log lines."""
SETTLE_TIMEOUT_SECONDS = 120.0
SETTLE_WINDOW_SECONDS = 1.0
SETTLE_CPU_SHARE = 0.1
"""The stack has settled when all its processes together use less than this share of one core over a
window: a replica reported healthy may still be starting (an ingestion worker counts as healthy after 2 s
up; here a second worker went on to use over a second of CPU after that), which must not be measured."""
WARMUP_DOCUMENTS_PER_WORKER = 2
WARMUP_TURNS_PER_REPLICA = 2
WARMUP_ROUNDS = 5
"""Warm-up rounds at most, until every worker (conversation replica) has run some of the work: a replica's
first work costs what later work does not (imports, tokenizer, connections), which is not per document."""
ANSWER_TOKENS = 8
TOKEN_DELAY_SECONDS = 0.01
GOAL_OVERHEAD_RATIO = 1.05
"""The issue's bound: CPU per unit of work with replicas within 5% of one replica."""
WORKING = [
    pb.DOCUMENT_STATUS_QUEUED,
    pb.DOCUMENT_STATUS_PARSING,
    pb.DOCUMENT_STATUS_CHUNKING,
    pb.DOCUMENT_STATUS_EMBEDDING,
    pb.DOCUMENT_STATUS_INDEXING,
    pb.DOCUMENT_STATUS_GRAPH,
]
INGEST, CHAT = "ingest", "chat"


@dataclass(frozen=True)
class Configuration:
    """One stack to measure: its replicas, its workload, and the configuration its ratios compare with."""

    name: str
    workload: str
    workers: int = 1
    modelhub: int = 1
    conversation: int = 1
    baseline: str | None = None

    def replicas(self) -> dict[str, int]:
        return {
            "ingestion-worker": self.workers,
            "modelhub": self.modelhub,
            "conversation": self.conversation,
        }


CONFIGURATIONS = {
    c.name: c
    for c in (
        Configuration("workers-1", INGEST),
        Configuration("workers-2", INGEST, workers=2, baseline="workers-1"),
        Configuration("workers-3", INGEST, workers=3, baseline="workers-1"),
        Configuration("modelhub-2", INGEST, workers=2, modelhub=2, baseline="workers-2"),
        Configuration("conversation-1", CHAT),
        Configuration("conversation-2", CHAT, conversation=2, baseline="conversation-1"),
    )
}


# PostgreSQL ------------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_databases(admin_url: str, names: list[str], keep: bool) -> Iterator[list[str]]:
    """New databases on the server of ``admin_url`` (as SQLAlchemy URLs), dropped afterwards unless kept."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    async def run(statements: list[str]) -> None:
        admin = create_async_engine(
            make_url(admin_url), isolation_level="AUTOCOMMIT", connect_args={"timeout": 5}
        )
        try:
            async with asyncio.timeout(DATABASE_CALL_SECONDS), admin.connect() as conn:
                for statement in statements:
                    await conn.execute(text(statement))
        finally:
            await admin.dispose()

    try:
        asyncio.run(run([f'CREATE DATABASE "{name}"' for name in names]))
    except Exception as error:
        raise RuntimeError(
            f"cannot create databases on {admin_url} ({type(error).__name__}: {error}); replicas of "
            f"conversation and modelhub need PostgreSQL: start it or pass --postgres-url"
        ) from error
    try:
        yield [make_url(admin_url).set(database=n).render_as_string(hide_password=False) for n in names]
    finally:
        if not keep:
            asyncio.run(run([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)' for name in names]))


# CPU of the stack's processes -------------------------------------------------------------------


def _process_table() -> dict[int, tuple[int, float]]:
    """Every process: its parent and its CPU seconds (user + system, with its waited-for children's)."""
    ticks = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # Fields after the name: state, ppid … utime (14th of the line), stime, cutime, cstime.
        table[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / ticks)
    return table


def platform_cpu_seconds(stack: Stack) -> dict[str, float]:
    """CPU seconds each component of the stack has used so far: its process and all its descendants.

    Children are found through every process's parent (not the main thread's children list), so a
    child started by any thread counts; a child that ended and was waited for counts in its parent's.
    """
    state = stack.state()
    if state is None:
        return {}
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    out: dict[str, float] = {}
    for component in state.components:
        if component.pid is None or component.pid not in table:
            continue
        total, todo = 0.0, [component.pid]
        while todo:
            pid = todo.pop()
            total += table[pid][1]
            todo.extend(children.get(pid, []))
        out[component.name] = total
    return out


def machine_cpu_seconds() -> float:
    """CPU seconds every core of the machine has been busy since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    # user nice system idle iowait irq softirq steal …: all but idle and iowait.
    busy = [int(value) for index, value in enumerate(fields[:8]) if index not in (3, 4)]
    return sum(busy) / os.sysconf("SC_CLK_TCK")


def outside_stack(machine_before: float, cpu: dict[str, float]) -> float:
    """CPU seconds the machine spent outside the stack since ``machine_before``: this benchmark's own
    client and scripted model, and whatever else runs here (other people's tests make wall times noisy;
    CPU per unit much less so)."""
    return round(machine_cpu_seconds() - machine_before - sum(cpu.values()), 2)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in sorted(after)}


def settle(stack: Stack, label: str) -> float:
    """Waits until the stack is idle (``SETTLE_CPU_SHARE``), at most ``SETTLE_TIMEOUT_SECONDS``; the
    seconds waited. Not idle by then is reported and the measurement goes on."""
    started = time.monotonic()
    while True:
        before = platform_cpu_seconds(stack)
        time.sleep(SETTLE_WINDOW_SECONDS)
        used = sum(cpu_delta(before, platform_cpu_seconds(stack)).values())
        waited = time.monotonic() - started
        if used < SETTLE_CPU_SHARE * SETTLE_WINDOW_SECONDS:
            return waited
        if waited > SETTLE_TIMEOUT_SECONDS:
            print(
                f"  {label}: still busy ({used:.2f} CPU-s/s) after {waited:.0f} s; measuring anyway",
                file=sys.stderr,
            )
            return waited


def restarts(stack: Stack) -> dict[str, int]:
    state = stack.state()
    return {c.name: c.restarts for c in state.components if c.restarts} if state else {}


# Ingestion --------------------------------------------------------------------------------------


async def ingest_slice(
    stack: Stack,
    kb_name: str,
    docs: list[tuple[str, bytes]],
    streams: int,
    files_per_upload: int,
    timeout: float,
) -> dict[str, Any]:
    """Uploads ``docs`` into a new knowledge base and waits until none is on its way; the documents."""
    async with open_channel(
        stack.grpc_addr("ingestion"), services=[CONTRACTS["ingestion"].descriptor]
    ) as channel:
        stub = CONTRACTS["ingestion"].stub(channel)
        with bound_identity(TENANT):
            kb = (await stub.CreateKnowledgeBase(pb.CreateKnowledgeBaseRequest(name=kb_name))).knowledge_base
            refused: list[str] = []
            semaphore = asyncio.Semaphore(streams)

            async def upload(files: list[tuple[str, bytes]]) -> None:
                async with semaphore:
                    for result in await _upload(stub, kb.id, files):
                        if result.HasField("error"):
                            refused.append(f"{result.file_name}: {result.error.code}: {result.error.message}")

            started = time.perf_counter()
            deadline = started + timeout
            groups = [docs[i : i + files_per_upload] for i in range(0, len(docs), files_per_upload)]
            try:
                await asyncio.wait_for(asyncio.gather(*(upload(g) for g in groups)), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"knowledge base {kb_name!r}: uploads not done within {timeout:g} s (raise "
                    f"--ingest-timeout, or read the ingestion log in {stack.config.log_dir})"
                ) from None
            while True:
                page = await stub.ListDocuments(
                    pb.ListDocumentsRequest(knowledge_base_id=kb.id, statuses=WORKING, page_size=1),
                    timeout=30,
                )
                if not page.documents:
                    break
                if time.perf_counter() > deadline:
                    raise TimeoutError(
                        f"knowledge base {kb_name!r}: documents still being ingested {timeout:g} s after the "
                        f"first upload (raise --ingest-timeout, or read the workers' logs in "
                        f"{stack.config.log_dir})"
                    )
                await asyncio.sleep(POLL_SECONDS)
            seconds = time.perf_counter() - started
            final: list[pb.Document] = []
            token = ""
            while True:
                page = await stub.ListDocuments(
                    pb.ListDocumentsRequest(knowledge_base_id=kb.id, page_size=200, page_token=token),
                    timeout=30,
                )
                final.extend(page.documents)
                token = page.next_page_token
                if not token:
                    break
    return {"kb": kb, "documents": final, "refused": refused, "seconds": seconds}


async def warm_up_modelhubs(stack: Stack, model_id: str) -> None:
    """One Embed call to each modelhub replica, so each has loaded the model before the clock runs."""
    for address in stack.grpc_addresses("modelhub").split(","):
        async with open_channel(address, services=[CONTRACTS["modelhub"].descriptor]) as channel:
            stub = CONTRACTS["modelhub"].stub(channel)
            with bound_identity(TENANT):
                await stub.Embed(
                    mpb.EmbedRequest(
                        model_id=model_id, texts=["warm-up"], input_type=mpb.EMBED_INPUT_TYPE_DOCUMENT
                    ),
                    timeout=120,
                )


def worker_names(configuration: Configuration) -> list[str]:
    return ["ingestion-worker", *(f"ingestion-worker-{k}" for k in range(2, configuration.workers + 1))]


async def workflows_by_worker(
    stack: Stack, configuration: Configuration, seen: set[str]
) -> tuple[Counter[str], int]:
    """Per ingestion worker, how many ingestion workflows not in ``seen`` it ran tasks of (Temporal's
    history names the worker, ``pid@host``, of every workflow task), and how many of their workflow
    tasks timed out (each one a stall of the task's timeout); ``seen`` gets them added."""
    state = stack.state()
    by_identity = (
        {f"{state.component(name).pid}@{os.uname().nodename}": name for name in worker_names(configuration)}
        if state
        else {}
    )
    temporal = await Client.connect(stack.temporal_address)
    ran: Counter[str] = Counter()
    timeouts = 0
    async for execution in temporal.list_workflows("WorkflowType = 'IngestDocuments'"):
        if execution.id in seen:
            continue
        seen.add(execution.id)
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        workers = set()
        async for event in handle.fetch_history_events():
            if event.HasField("workflow_task_started_event_attributes"):
                identity = event.workflow_task_started_event_attributes.identity
                workers.add(by_identity.get(identity, identity))
            elif event.HasField("workflow_task_timed_out_event_attributes"):
                timeouts += 1
        ran.update(workers)
    return ran, timeouts


async def measure_ingestion(
    stack: Stack,
    configuration: Configuration,
    docs: list[tuple[str, bytes]],
    warmup: list[tuple[str, bytes]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    # One document per upload, all at once: Temporal hands the little workflows to whichever worker
    # polls; again until each worker has run one.
    await asyncio.to_thread(settle, stack, f"{configuration.name} before warming up")
    seen: set[str] = set()
    warmed: Counter[str] = Counter()
    model_id = ""
    for round_ in range(1, WARMUP_ROUNDS + 1):
        warm = await ingest_slice(stack, f"warm-up-{round_}", warmup, len(warmup), 1, args.ingest_timeout)
        model_id = warm["kb"].embedding_model_id
        warmed += (await workflows_by_worker(stack, configuration, seen))[0]
        if all(warmed[name] for name in worker_names(configuration)):
            break
    else:
        print(f"  {configuration.name}: not every worker warmed up: {dict(warmed)}", file=sys.stderr)
    await warm_up_modelhubs(stack, model_id)
    await asyncio.to_thread(settle, stack, f"{configuration.name} before measuring")
    before, machine_before = platform_cpu_seconds(stack), machine_cpu_seconds()
    result = await ingest_slice(
        stack, "bench", docs, args.upload_streams, args.files_per_upload, args.ingest_timeout
    )
    cpu = cpu_delta(before, platform_cpu_seconds(stack))
    elsewhere = outside_stack(machine_before, cpu)
    shared, task_timeouts = await workflows_by_worker(stack, configuration, seen)
    final: list[pb.Document] = result["documents"]
    ready = [d for d in final if d.status == pb.DOCUMENT_STATUS_READY]
    failed = [
        f"{d.file_name}: {d.failure.code}: {d.failure.reason}"
        for d in final
        if d.status != pb.DOCUMENT_STATUS_READY
    ]
    for line in [*failed, *result["refused"]][:10]:
        print(f"  {configuration.name}: failed: {line}", file=sys.stderr)
    seconds, total_cpu = result["seconds"], sum(cpu.values())
    count = len(final) + len(result["refused"])
    return {
        "documents": count,
        "ready": len(ready),
        "failed": count - len(ready),
        "chunks": sum(d.chunk_count for d in ready),
        "seconds": round(seconds, 2),
        "documents_per_second": round(len(ready) / seconds, 3) if seconds else 0.0,
        "cpu_seconds": round(total_cpu, 2),
        "cpu_seconds_per_document": round(total_cpu / len(ready), 4) if ready else None,
        "cpu_seconds_by_component": cpu,
        "cpu_seconds_outside_stack": elsewhere,
        "workflows_by_worker": {name: shared[name] for name in sorted(shared)},
        "workflow_task_timeouts": task_timeouts,
        "warmup_workflows_by_worker": {name: warmed[name] for name in sorted(warmed)},
    }


# Chat turns -------------------------------------------------------------------------------------


def scripted_chat(model_delay: float) -> Callable[[Recorded], Reply]:
    """Every request answered after ``model_delay``: the intent decision (chitchat), then the answer."""

    def respond(request: Recorded) -> Reply:
        decision = openai_decision("B", request.json)  # chitchat: one streamed answer, no tools
        if decision is not None:
            return dataclasses.replace(decision, delay=model_delay)
        answer = openai_text_stream([f"word{i} " for i in range(ANSWER_TOKENS)])
        return dataclasses.replace(answer, delay=model_delay, chunk_delay=TOKEN_DELAY_SECONDS)

    return respond


async def one_turn(http: httpx.AsyncClient, session_id: str, index: int) -> dict[str, Any]:
    sent = time.perf_counter()
    first_event: float | None = None
    turn_id, outcome = "", "no final event"
    message = {"message": f"hello, this is turn {index}", "session_id": session_id}
    async with http.stream("POST", "/chat/turns", json=message) as response:
        if response.status_code != 200:
            return {"outcome": f"HTTP {response.status_code}", "first_event_ms": None, "turn_ms": None}
        async for name, data in sse(response):
            if first_event is None:
                first_event = time.perf_counter()
            if name == "started":
                turn_id = str(data.get("turn_id", ""))
            if name in ("completed", "error", "cancelled"):
                outcome = name
                break
    return {
        "outcome": outcome,
        "turn_id": turn_id,
        "first_event_ms": (first_event - sent) * 1000 if first_event is not None else None,
        "turn_ms": (time.perf_counter() - sent) * 1000,
    }


async def run_turns(
    tenant: Tenant, sessions: list[str], concurrency: int
) -> tuple[list[dict[str, Any]], float]:
    semaphore = asyncio.Semaphore(concurrency)
    async with tenant.async_client() as http:

        async def limited(index: int, session_id: str) -> dict[str, Any]:
            async with semaphore:
                return await one_turn(http, session_id, index)

        started = time.perf_counter()
        results = await asyncio.gather(*(limited(i, s) for i, s in enumerate(sessions)))
        return list(results), time.perf_counter() - started


def turns_by_replica(stack: Stack, configuration: Configuration, turn_ids: set[str]) -> dict[str, int]:
    """Per conversation replica, how many of ``turn_ids`` its log says it finished."""
    names = ["conversation", *(f"conversation-{k}" for k in range(2, configuration.conversation + 1))]
    deadline = time.monotonic() + LOG_FLUSH_SECONDS
    while True:
        counted: Counter[str] = Counter()
        for name in names:
            path = stack.config.log_path(name)
            for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
                if not line.startswith("{"):
                    continue
                with contextlib.suppress(json.JSONDecodeError):
                    record = json.loads(line)
                    if record.get("event") == "turn finished" and record.get("turn_id") in turn_ids:
                        counted[name] += 1
        if sum(counted.values()) >= len(turn_ids) or time.monotonic() > deadline:
            return {name: counted[name] for name in names}
        time.sleep(0.2)


def measure_chat(
    stack: Stack, configuration: Configuration, server: ScriptedProvider, args: argparse.Namespace
) -> dict[str, Any]:
    settle(stack, f"{configuration.name} before warming up")
    tenant = Tenant(stack)
    tenant.use_model(server)
    # A few turns at once, again until each replica has answered one.
    warmed: Counter[str] = Counter()
    for _ in range(WARMUP_ROUNDS):
        warmup = [tenant.session() for _ in range(WARMUP_TURNS_PER_REPLICA * configuration.conversation)]
        done, _ = asyncio.run(asyncio.wait_for(run_turns(tenant, warmup, len(warmup)), args.chat_timeout))
        warmed.update(turns_by_replica(stack, configuration, {r["turn_id"] for r in done if r["turn_id"]}))
        if all(warmed.values()):
            break
    else:
        print(f"  {configuration.name}: not every replica warmed up: {dict(warmed)}", file=sys.stderr)
    sessions = [tenant.session() for _ in range(args.turns)]
    settle(stack, f"{configuration.name} before measuring")
    before, machine_before = platform_cpu_seconds(stack), machine_cpu_seconds()
    try:
        results, seconds = asyncio.run(
            asyncio.wait_for(run_turns(tenant, sessions, args.concurrency), args.chat_timeout)
        )
    except TimeoutError:
        raise TimeoutError(
            f"{args.turns} turns not finished within {args.chat_timeout:g} s (raise --chat-timeout, or read "
            f"the conversation logs in {stack.config.log_dir})"
        ) from None
    cpu = cpu_delta(before, platform_cpu_seconds(stack))
    elsewhere = outside_stack(machine_before, cpu)
    completed = [r for r in results if r["outcome"] == "completed"]
    outcomes = Counter(r["outcome"] for r in results if r["outcome"] != "completed")
    if outcomes:
        print(f"  {configuration.name}: turns not completed: {dict(outcomes)}", file=sys.stderr)
    first_events = [r["first_event_ms"] for r in results if r["first_event_ms"] is not None]
    whole = [r["turn_ms"] for r in completed]
    total_cpu = sum(cpu.values())
    return {
        "turns": len(results),
        "completed": len(completed),
        "not_completed": dict(outcomes),
        "seconds": round(seconds, 2),
        "turns_per_second": round(len(completed) / seconds, 3) if seconds else 0.0,
        "first_event_ms": {"p50": percentile(first_events, 0.5), "p95": percentile(first_events, 0.95)}
        if first_events
        else None,
        "turn_ms": {"p50": percentile(whole, 0.5), "p95": percentile(whole, 0.95)} if whole else None,
        "cpu_seconds": round(total_cpu, 2),
        "cpu_seconds_per_turn": round(total_cpu / len(completed), 4) if completed else None,
        "cpu_seconds_by_component": cpu,
        "cpu_seconds_outside_stack": elsewhere,
        "turns_by_replica": turns_by_replica(stack, configuration, {r["turn_id"] for r in completed}),
        "warmup_turns_by_replica": dict(warmed),
    }


# One configuration ------------------------------------------------------------------------------


def run_configuration(
    configuration: Configuration,
    data_dir: Path,
    server: ScriptedProvider,
    docs: list[tuple[str, bytes]],
    spare: list[tuple[str, bytes]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Starts the configuration's stack, measures its workload, stops it (whatever happens)."""
    prefix = f"ks_bench_scale_{configuration.name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}_modelhub", f"{prefix}_sessions", f"{prefix}_checkpoints"]
    with fresh_databases(args.postgres_url, names, args.keep) as (modelhub_db, sessions_db, checkpoints_db):
        extra_env = {
            "OTEL_TRACES_EXPORTER": "none",
            "KS_GATEWAY_PROXY_SECRET": PROXY_SECRET,
            **server.modelhub_egress_env(),
            "KS_MODELHUB_DATABASE_URL": modelhub_db,
            "KS_CONVERSATION_DATABASE_URL": sessions_db,
            # psycopg's own form of the URL for LangGraph's saver.
            "KS_CONVERSATION_CHECKPOINT_URL": checkpoints_db.replace(
                "postgresql+asyncpg://", "postgresql://"
            ),
            **(
                {"KS_CONVERSATION_MAX_CONCURRENT_TURNS": str(args.max_concurrent_turns)}
                if args.max_concurrent_turns
                else {}
            ),
            **args.extra_env,
        }
        config = StackConfig.with_free_ports(
            data_dir=data_dir / configuration.name,
            temporal_headless=True,
            nats_cluster=args.nats_cluster,
            replicas_ingestion_worker=configuration.workers,
            replicas_modelhub=configuration.modelhub,
            replicas_conversation=configuration.conversation,
            health_timeout=args.start_timeout,
            stop_grace=STOP_GRACE_SECONDS,
            extra_env=extra_env,
        )
        print(
            f"{configuration.name}: starting {configuration.replicas()} in {config.data_dir}", file=sys.stderr
        )
        started = time.monotonic()
        with Stack(config) as stack:
            stack.sign_as_local_client()
            start_seconds = time.monotonic() - started
            print(f"{configuration.name}: healthy after {start_seconds:.0f} s, measuring", file=sys.stderr)
            if configuration.workload == INGEST:
                warmup = spare[: WARMUP_DOCUMENTS_PER_WORKER * configuration.workers]
                figures = asyncio.run(measure_ingestion(stack, configuration, docs, warmup, args))
            else:
                figures = measure_chat(stack, configuration, server, args)
            figures["restarts"] = restarts(stack)
        figures["start_seconds"] = round(start_seconds, 1)
        if args.keep:
            figures["databases"] = names
    return figures


# Reporting --------------------------------------------------------------------------------------


RATES = {INGEST: ("documents_per_second", "documents/s"), CHAT: ("turns_per_second", "turns/s")}
COSTS = {INGEST: ("cpu_seconds_per_document", "CPU-s/document"), CHAT: ("cpu_seconds_per_turn", "CPU-s/turn")}


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each configuration's rate and CPU per unit of work over its baseline's (when both were measured)."""
    out: dict[str, dict[str, Any]] = {}
    for name, figures in results.items():
        configuration = CONFIGURATIONS[name]
        base = results.get(configuration.baseline or "")
        if configuration.baseline is None or base is None or "error" in figures or "error" in base:
            continue
        rate, cost = RATES[configuration.workload][0], COSTS[configuration.workload][0]
        rate_ratio = round(figures[rate] / base[rate], 3) if base[rate] else None
        cost_ratio = round(figures[cost] / base[cost], 3) if figures[cost] and base[cost] else None
        out[name] = {
            "baseline": configuration.baseline,
            rate: rate_ratio,
            cost: cost_ratio,
            "cpu_overhead_within_5_percent": cost_ratio is not None and cost_ratio <= GOAL_OVERHEAD_RATIO,
        }
    return out


def print_configuration(name: str, figures: dict[str, Any]) -> None:
    configuration = CONFIGURATIONS[name]
    replicas = ", ".join(f"{k} {v}" for k, v in configuration.replicas().items())
    rows: list[tuple[str, str]] = [("replicas", replicas)]
    if "error" in figures:
        rows.append(("error", figures["error"]))
    elif configuration.workload == INGEST:
        rows += [
            ("documents", f"{figures['documents']} ({figures['failed']} failed), {figures['chunks']} chunks"),
            ("seconds", str(figures["seconds"])),
            ("documents/s", str(figures["documents_per_second"])),
            ("CPU-s (whole stack)", str(figures["cpu_seconds"])),
            ("CPU-s/document", str(figures["cpu_seconds_per_document"])),
            ("workflows by worker", ", ".join(f"{k} {v}" for k, v in figures["workflows_by_worker"].items())),
            ("workflow task timeouts", str(figures["workflow_task_timeouts"])),
        ]
    else:
        first, whole = figures["first_event_ms"] or {}, figures["turn_ms"] or {}
        rows += [
            ("turns", f"{figures['completed']}/{figures['turns']} completed"),
            ("seconds", str(figures["seconds"])),
            ("turns/s", str(figures["turns_per_second"])),
            ("first event p50/p95", f"{first.get('p50')} / {first.get('p95')} ms"),
            ("whole turn p50/p95", f"{whole.get('p50')} / {whole.get('p95')} ms"),
            ("CPU-s (whole stack)", str(figures["cpu_seconds"])),
            ("CPU-s/turn", str(figures["cpu_seconds_per_turn"])),
            ("turns by replica", ", ".join(f"{k} {v}" for k, v in figures["turns_by_replica"].items())),
        ]
    if "error" not in figures:
        busiest = sorted(figures["cpu_seconds_by_component"].items(), key=lambda kv: -kv[1])[:6]
        rows.append(("CPU-s by component", ", ".join(f"{k} {v}" for k, v in busiest)))
        rows.append(
            ("CPU-s outside stack", f"{figures['cpu_seconds_outside_stack']} (this client, and others)")
        )
        if figures["restarts"]:
            rows.append(("restarts", json.dumps(figures["restarts"])))
    width = max(len(label) for label, _ in rows)
    print(f"\n== {name} ==", file=sys.stderr)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}", file=sys.stderr)


def print_summary(results: dict[str, dict[str, Any]], found: dict[str, dict[str, Any]]) -> None:
    columns = ("configuration", "rate", "x baseline", "CPU-s per unit", "x baseline", "baseline")
    rows = []
    for name, figures in results.items():
        if "error" in figures:
            rows.append((name, "failed", "", "", "", ""))
            continue
        workload = CONFIGURATIONS[name].workload
        (rate, unit), (cost, cost_unit) = RATES[workload], COSTS[workload]
        ratio = found.get(name, {})
        rows.append(
            (
                name,
                f"{figures[rate]} {unit}",
                str(ratio.get(rate, "-")),
                f"{figures[cost]} {cost_unit}",
                str(ratio.get(cost, "-")),
                CONFIGURATIONS[name].baseline or "-",
            )
        )
    widths = [max(len(row[i]) for row in [columns, *rows]) for i in range(len(columns))]
    print(file=sys.stderr)
    for row in [columns, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)), file=sys.stderr)


# Entry point ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=150, help="SciFact documents ingested per configuration")
    parser.add_argument("--turns", type=int, default=40, help="chat turns per configuration")
    parser.add_argument("--concurrency", type=int, default=10, help="chat turns in flight at once")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGURATIONS),
        help=f"comma-separated subset of {', '.join(CONFIGURATIONS)} (ratios need the baseline too)",
    )
    parser.add_argument("--keep", action="store_true", help="keep each stack's data dir and databases")
    parser.add_argument("--dataset", type=Path, default=DATASET, help="a BEIR folder (corpus.jsonl)")
    parser.add_argument("--files-per-upload", type=int, default=10, help="files per UploadDocuments stream")
    parser.add_argument("--upload-streams", type=int, default=4, help="UploadDocuments streams at a time")
    parser.add_argument(
        "--model-delay-ms", type=float, default=100.0, help="the scripted model's delay before every reply"
    )
    parser.add_argument(
        "--max-concurrent-turns",
        type=int,
        default=0,
        help="turns one conversation replica runs at once (0: the service's default)",
    )
    parser.add_argument("--nats-cluster", type=int, default=1, choices=(1, 3, 5), help="NATS servers")
    parser.add_argument("--postgres-url", default=POSTGRES_URL, help="SQLAlchemy URL of an admin database")
    parser.add_argument("--start-timeout", type=float, default=STACK_START_SECONDS, help="seconds per start")
    parser.add_argument(
        "--ingest-timeout", type=float, default=INGEST_TIMEOUT_SECONDS, help="seconds per ingestion run"
    )
    parser.add_argument(
        "--chat-timeout", type=float, default=CHAT_TIMEOUT_SECONDS, help="seconds per turn run"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment for every service"
    )
    args = parser.parse_args()
    args.configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in args.configs if name not in CONFIGURATIONS]
    if unknown or not args.configs:
        parser.error(
            f"--configs: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(CONFIGURATIONS)}"
        )
    for option in ("docs", "turns", "concurrency", "files_per_upload", "upload_streams"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    malformed = [item for item in args.env if "=" not in item]
    if malformed:
        parser.error(f"--env takes KEY=VALUE, not {', '.join(malformed)}")
    args.extra_env = dict(item.split("=", 1) for item in args.env)
    if not (args.dataset / "corpus.jsonl").is_file():
        parser.error(f"--dataset: no corpus.jsonl in {args.dataset}")
    return args


def main() -> None:
    args = parse_args()
    most_workers = max(CONFIGURATIONS[name].workers for name in args.configs)
    records = list(documents(args.dataset, args.docs + WARMUP_DOCUMENTS_PER_WORKER * most_workers))
    docs, spare = records[: args.docs], records[args.docs :]
    if len(docs) < args.docs:
        print(f"only {len(docs)} documents in {args.dataset}", file=sys.stderr)
    data_dir = Path(tempfile.mkdtemp(prefix="ks-bench-scale-"))
    results: dict[str, dict[str, Any]] = {}
    server = ScriptedProvider()
    server.start()
    server.respond("/v1/chat/completions", scripted_chat(args.model_delay_ms / 1000))
    try:
        for name in args.configs:
            try:
                results[name] = run_configuration(CONFIGURATIONS[name], data_dir, server, docs, spare, args)
            except Exception as error:  # recorded; the other configurations still run
                reason = str(error)
                if isinstance(error, StackStartError):  # its message carries the culprit's log tail
                    print(f"{name}: {error}", file=sys.stderr)
                    reason = f"{error.component}: {error.reason} (log: {error.log_path})"
                elif not isinstance(error, TimeoutError | RuntimeError):
                    traceback.print_exc()
                results[name] = {"error": f"{type(error).__name__}: {reason}"}
            print_configuration(name, results[name])
    finally:
        server.stop()
        if args.keep:
            print(f"\nstack data kept in {data_dir}", file=sys.stderr)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    found = ratios(results)
    print_summary(results, found)
    figures = {
        "machine": machine(),
        "dataset": str(args.dataset),
        "docs": len(docs),
        "turns": args.turns,
        "concurrency": args.concurrency,
        "files_per_upload": args.files_per_upload,
        "upload_streams": args.upload_streams,
        "model_delay_ms": args.model_delay_ms,
        "max_concurrent_turns": args.max_concurrent_turns or None,
        "nats_cluster": args.nats_cluster,
        "env": args.extra_env,
        "configurations": {
            name: {"replicas": CONFIGURATIONS[name].replicas(), **figures}
            for name, figures in results.items()
        },
        "ratios": found,
        "goal_cpu_overhead_ratio": GOAL_OVERHEAD_RATIO,
    }
    if args.keep:
        figures["data_dir"] = str(data_dir)
    print(json.dumps(figures))
    if any("error" in r for r in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
