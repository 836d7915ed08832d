"""Scale-out on one machine: replicas started by ``ks-stack`` on a 3-server NATS cluster, end to end.

One stack for the module, started by the same launcher as ``make up`` with ``KS_STACK_NATS_CLUSTER=3``,
``KS_STACK_REPLICAS_INGESTION_WORKER=3`` and ``KS_STACK_REPLICAS_CONVERSATION=2``. The conversation
replicas keep sessions and checkpoints in a fresh PostgreSQL database each run (the machine's server
at ``KS_TEST_POSTGRES_URL``; skipped without one, failed with ``KS_TEST_REQUIRE_POSTGRES=1``), as
ks-stack requires of replicas. Four things are checked, each as a user of the platform would notice:

- uploads are ingested by all three workers (Temporal's history names the worker of each activity), each
  document ready exactly once;
- concurrent chat turns are answered by both conversation replicas, each exactly once;
- the streams are kept by 3 servers, and killing one NATS server (by its pid) while messages are
  published and consumed loses none and stores none twice; the platform answers on afterwards;
- killing one NATS server, one ingestion worker and one conversation replica at once (SIGKILL, by pid)
  while a batch is being ingested and chat turns are being answered loses nothing and duplicates
  nothing: the cluster keeps quorum, redelivery does the rest (every document ready once with its
  chunks, vectors and lexical entries stored once, every turn ending with one final event and its
  whole answer). It reuses the fault suite's helpers (``tests/chaos``) and prints its counts as one
  JSON line, as the fault suite does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import ServiceUnavailableError
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.events import (
    CHAT_EVENTS_STREAM,
    CHAT_REQUESTS_STREAM,
    DOCUMENTS_DELETED_STREAM,
    TURN_COMPLETED_STREAM,
)
from knowsphere_runtime.streams import SESSION_LEASES_BUCKET
from knowsphere_stack import Stack, StackConfig
from knowsphere_stack.layout import nats_nodes

from .test_conversation import use_scripted_model
from .test_gateway_ingestion import events

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import Recorded, Reply, ScriptedProvider, openai_decision, openai_text_stream

# The fault suite's helpers (``tests/chaos``, the package pytest itself names ``chaos``): a turn followed
# to its final event, resumed after a dropped connection, and what the events stream keeps of it; a
# knowledge base's documents waited for and counted against the index (chunks, vectors, lexical entries).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chaos.test_chat_faults import FINALS, Turn, _answers_to, _brief, _follow, _stored
from chaos.test_ingestion_faults import OWNER, _all_finished, _count, _document, owners_clients

pytestmark = pytest.mark.e2e

T = TypeVar("T")

POSTGRES_URL = os.environ.get("KS_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("KS_TEST_REQUIRE_POSTGRES", "") == "1"
PROXY_SECRET = "e2e-replicas-proxy-secret-" + "0123456789abcdef" * 2
TIMEOUT = httpx.Timeout(30.0, read=120.0)
READY_WITHIN_SECONDS = 150.0
WORKERS = ("ingestion-worker", "ingestion-worker-2", "ingestion-worker-3")
CONVERSATIONS = ("conversation", "conversation-2")
NATS_SERVERS = ("nats", "nats-2", "nats-3")
PLATFORM_STREAMS = (CHAT_REQUESTS_STREAM, CHAT_EVENTS_STREAM, TURN_COMPLETED_STREAM, DOCUMENTS_DELETED_STREAM)

CODE_WORDS = ("amber", "birch", "cobalt", "dune", "ember", "fjord")
DOCUMENTS = {
    f"note-{i}.md": f"# Note {i}\n\nThe code word of note {i} is {word}. It opens cabinet {i}.\n".encode()
    for i, word in enumerate(CODE_WORDS, start=1)
}


# The stack -------------------------------------------------------------------------------------


@contextmanager
def fresh_postgres_databases(count: int) -> Iterator[list[str]]:
    """``count`` new databases on the test PostgreSQL server (as SQLAlchemy URLs), dropped afterwards."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    names = [f"ks_e2e_replicas_{uuid.uuid4().hex[:10]}" for _ in range(count)]

    async def run(statements: list[str]) -> None:
        admin = create_async_engine(
            make_url(POSTGRES_URL).set(database="postgres"),
            isolation_level="AUTOCOMMIT",
            connect_args={"timeout": 3},
        )
        try:
            async with asyncio.timeout(10), admin.connect() as conn:
                for statement in statements:
                    await conn.execute(text(statement))
        finally:
            await admin.dispose()

    try:
        asyncio.run(run([f'CREATE DATABASE "{name}"' for name in names]))
    except Exception as error:  # no server: skip (or fail when one is required), saying why
        reason = f"PostgreSQL not reachable at {POSTGRES_URL} ({type(error).__name__}: {error})"
        if REQUIRE_POSTGRES:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield [
            make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False) for name in names
        ]
    finally:
        asyncio.run(run([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)' for name in names]))


@pytest.fixture(scope="module")
def replicated(
    tmp_path_factory: pytest.TempPathFactory, model_server: ScriptedProvider, identity_keys_dir: Path
) -> Iterator[Stack]:
    with fresh_postgres_databases(2) as (sessions, checkpoints):
        config = StackConfig.with_free_ports(
            data_dir=tmp_path_factory.mktemp("replicas"),
            # The services trust the test process's identity tokens (it counts chunks in retrieval).
            identity_keys_dir=identity_keys_dir,
            temporal_headless=True,
            nats_cluster=3,
            replicas_ingestion_worker=3,
            replicas_conversation=2,
            stop_grace=10,
            extra_env={
                "OTEL_TRACES_EXPORTER": "none",
                "KS_GATEWAY_PROXY_SECRET": PROXY_SECRET,
                **model_server.modelhub_egress_env(),
                "KS_CONVERSATION_DATABASE_URL": sessions,
                # psycopg's own form of the URL for LangGraph's saver.
                "KS_CONVERSATION_CHECKPOINT_URL": checkpoints.replace(
                    "postgresql+asyncpg://", "postgresql://"
                ),
                # One turn at a time per replica: concurrent turns must be shared to be answered.
                "KS_CONVERSATION_MAX_CONCURRENT_TURNS": "1",
                # Each stage a task of its own on the queue (not the local activities of the workflow's
                # worker), so a handful of documents is shared between the workers in any case.
                "KS_INGESTION_LOCAL_ACTIVITIES": "false",
                # A killed worker's stage moves to the other worker after 5 s, not 30.
                "KS_INGESTION_ACTIVITY_HEARTBEAT_SECONDS": "5",
                # A killed conversation replica's turn is delivered again after 6 s, not 30.
                "KS_CONVERSATION_TURN_ACK_WAIT_SECONDS": "6",
                # A turn whose events stop reaching the gateway ends (turn_timeout) within the test's
                # bounds instead of after 120 s.
                "KS_GATEWAY_CHAT_TURN_TIMEOUT_SECONDS": "60",
            },
        )
        with Stack(config) as stack:
            yield stack


def component_pid(stack: Stack, name: str) -> int:
    state = stack.state()
    assert state is not None
    pid = state.component(name).pid
    assert pid is not None, state.component(name)
    return pid


def client(stack: Stack, tenant: str) -> httpx.Client:
    headers = {
        "x-ks-proxy-secret": PROXY_SECRET,
        "x-ks-tenant-id": tenant,
        "x-ks-user-id": "alice",
        "x-ks-role": "admin",
    }
    return httpx.Client(base_url=f"{stack.gateway_url}/api/v1", timeout=TIMEOUT, headers=headers)


def log_records(stack: Stack, component: str) -> list[dict[str, Any]]:
    """The JSON lines of a component's log (the launcher's own lines are not JSON)."""
    records = []
    for line in stack.config.log_path(component).read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def test_the_stack_lists_every_replica_and_server(replicated: Stack) -> None:
    state = replicated.state()
    assert state is not None
    names = [c.name for c in state.components]
    for name in (*NATS_SERVERS, *WORKERS, *CONVERSATIONS):
        assert name in names and state.component(name).status == "healthy", state.component(name)
        assert Path(replicated.config.log_path(name)).is_file()
    assert len({state.component(name).pid for name in (*WORKERS, *CONVERSATIONS)}) == len(WORKERS) + 2


# (b) the ingestion workers ---------------------------------------------------------------------


async def activity_workers(address: str) -> Counter[str]:
    """Per worker identity (``pid@host``), the activities it ran of every ingestion workflow."""
    temporal = await Client.connect(address)
    ran: Counter[str] = Counter()
    async for execution in temporal.list_workflows("WorkflowType = 'IngestDocuments'"):
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for event in handle.fetch_history_events():
            if event.HasField("activity_task_started_event_attributes"):
                ran[event.activity_task_started_event_attributes.identity] += 1
    return ran


async def watch_ready(
    http: httpx.AsyncClient, kb_id: str, ready: Counter[str], opened: asyncio.Event
) -> None:
    """Counts the "ready" progress events of each document of a knowledge base, until cancelled."""
    async with http.stream("GET", f"/knowledge-bases/{kb_id}/progress") as stream:
        assert stream.status_code == 200
        opened.set()
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                data = json.loads(line.removeprefix("data:"))
                if data.get("status") == "ready":
                    ready[data["document_id"]] += 1


async def ingest(stack: Stack) -> tuple[list[dict[str, Any]], Counter[str], dict[str, list[str]]]:
    """The documents uploaded one by one and waited for: their records, the "ready" events of each,
    and for each code word the files of the passages holding it."""
    headers = {"x-ks-proxy-secret": PROXY_SECRET, "x-ks-tenant-id": f"t{uuid.uuid4().hex[:10]}"}
    headers |= {"x-ks-user-id": "alice", "x-ks-role": "admin"}
    base = f"{stack.gateway_url}/api/v1"
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT, headers=headers) as http:
        created = await http.post("/knowledge-bases", json={"name": f"kb-{uuid.uuid4().hex[:8]}"})
        assert created.status_code == 201, created.text
        kb_id = created.json()["id"]
        ready: Counter[str] = Counter()
        opened = asyncio.Event()
        watcher = asyncio.create_task(watch_ready(http, kb_id, ready, opened))
        await asyncio.wait_for(opened.wait(), 30)
        ids = []
        for file_name, data in DOCUMENTS.items():
            response = await http.post(
                f"/knowledge-bases/{kb_id}/documents", files={"file": (file_name, data)}
            )
            assert response.status_code == 201, response.text
            ids.append(response.json()["document"]["id"])
        deadline = time.monotonic() + READY_WITHIN_SECONDS
        while True:
            documents = [(await http.get(f"/documents/{i}")).json() for i in ids]
            if all(d["status"] in ("ready", "failed") for d in documents) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # a second "ready" of any of them would have come by now
        watcher.cancel()
        holding: dict[str, list[str]] = {}
        for word in CODE_WORDS:
            found = await http.post(f"/knowledge-bases/{kb_id}/search", json={"query": f"code word {word}"})
            assert found.status_code == 200, found.text
            holding[word] = [r["file_name"] for r in found.json()["results"] if word in r["text"]]
    return documents, ready, holding


def test_uploads_are_ingested_by_all_three_workers_each_ready_once(replicated: Stack) -> None:
    documents, ready, holding = asyncio.run(ingest(replicated))
    assert [(d["file_name"], d["status"]) for d in documents] == [(f, "ready") for f in DOCUMENTS]
    assert all(d["chunk_count"] > 0 for d in documents), documents
    assert ready == Counter({d["id"]: 1 for d in documents}), ready
    # Each document indexed once: its code word is in one passage, its own.
    assert holding == {word: [f"note-{i}.md"] for i, word in enumerate(CODE_WORDS, start=1)}, holding

    ran = asyncio.run(activity_workers(replicated.temporal_address))
    by_worker = {name: ran[f"{component_pid(replicated, name)}@{os.uname().nodename}"] for name in WORKERS}
    assert sum(by_worker.values()) == sum(ran.values()), (by_worker, ran)  # nobody else ran any
    assert all(count > 0 for count in by_worker.values()), by_worker


# (c) the conversation replicas ----------------------------------------------------------------


def ask(http: httpx.Client, message: str, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    with http.stream("POST", "/chat/turns", json={"message": message, **fields}) as response:
        assert response.status_code == 200, response.read()
        return list(events(response))


def answered_turns(stack: Stack) -> Counter[tuple[str, str]]:
    """(replica, turn id) of every turn a conversation replica reports finished."""
    return Counter(
        (name, record["turn_id"])
        for name in CONVERSATIONS
        for record in log_records(stack, name)
        if record.get("event") == "turn finished"
    )


ANSWER = ["Hello,", " nice to", " meet you."]


def chat_model(request: Recorded) -> Reply:
    decision = openai_decision("B", request.json)  # chitchat: one streamed answer
    if decision is not None:
        return decision
    return dataclasses.replace(openai_text_stream(ANSWER), chunk_delay=0.4)


def test_concurrent_turns_are_shared_by_both_conversation_replicas_each_once(
    replicated: Stack, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", chat_model)
    tenant = f"t{uuid.uuid4().hex[:10]}"
    messages = [f"hello number {i} ({tenant})" for i in range(4)]
    with client(replicated, tenant) as http:
        use_scripted_model(http, model_server)
        with ThreadPoolExecutor(max_workers=len(messages)) as pool:
            turns = list(pool.map(lambda m: ask(http, m), messages))

    turn_ids = []
    for turn in turns:
        names = [name for name, _ in turn]
        assert names[0] == "started" and names.count("completed") == 1 and "error" not in names, turn
        assert turn[-1][1]["text"] == "".join(ANSWER), turn[-1]
        assert [data["sequence"] for _, data in turn] == list(range(len(turn))), turn
        turn_ids.append(turn[0][1]["turn_id"])
    # The model was asked for each answer once.
    answers = [
        r for r in model_server.requests_to("/v1/chat/completions") if openai_decision("B", r.json) is None
    ]
    asked = Counter(m for r in answers for m in messages if m in json.dumps(r.json["messages"]))
    assert asked == Counter(messages), asked

    deadline = time.monotonic() + 10  # the log line follows the final event
    while True:
        finished = {key: n for key, n in answered_turns(replicated).items() if key[1] in turn_ids}
        if len(finished) >= len(turn_ids) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(turn for _, turn in finished) == sorted(turn_ids), finished  # each by one replica
    assert set(finished.values()) == {1}, finished
    assert {replica for replica, _ in finished} == set(CONVERSATIONS), finished


# (a) the NATS cluster ---------------------------------------------------------------------------


SETTLE_SECONDS = 20.0


async def settled(call: Callable[[], Awaitable[T]]) -> T:
    """A JetStream API request, asked again while the cluster settles after a server went away (the
    stream's new leader is still being elected: the request times out, finds no responders or gets a
    503), as a client would."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        try:
            return await call()
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def stream_replicas(stack: Stack, stream: str) -> tuple[int, int]:
    """A stream's configured replicas and the servers holding it now."""
    connection = await nats.connect(servers=stack.nats_urls, **stack.nats_auth().connect_options())
    try:
        js = connection.jetstream()
        info = await settled(lambda: js.stream_info(stream))
    finally:
        await connection.close()
    peers = 1 + len(info.cluster.replicas or []) if info.cluster else 1
    return info.config.num_replicas or 1, peers


WORK_MESSAGES = 300
KILL_AFTER = 100


async def publish_and_consume_through_a_kill(stack: Stack) -> dict[str, Any]:
    """Publish ``WORK_MESSAGES`` messages to a replicated stream while a durable consumer takes them;
    after ``KILL_AFTER`` the stream's leader is killed. What was stored and received."""
    connection = await nats.connect(
        servers=stack.nats_urls,
        reconnect_time_wait=0.5,
        max_reconnect_attempts=-1,
        **stack.nats_auth().connect_options(),
    )
    js = connection.jetstream(timeout=2.0)
    stream, subject = f"E2E_WORK_{uuid.uuid4().hex[:6]}", f"e2e.work.{uuid.uuid4().hex[:6]}"
    await js.add_stream(StreamConfig(name=stream, subjects=[subject], num_replicas=3, duplicate_window=120))
    info = await js.stream_info(stream)
    leader = info.cluster.leader if info.cluster else None
    assert leader in NATS_SERVERS, info.cluster
    consumer = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=5)
    subscription = await js.pull_subscribe(subject, durable="e2e-worker", stream=stream, config=consumer)
    received: Counter[int] = Counter()
    published = 0
    killed: dict[str, Any] = {}

    async def publish() -> None:
        nonlocal published
        for number in range(WORK_MESSAGES):
            while True:  # as a producer does: the same message again (deduplicated) until acknowledged
                try:
                    await js.publish(subject, str(number).encode(), headers={"Nats-Msg-Id": f"m{number}"})
                    break
                except Exception as error:  # no responders, timeout, a server going away
                    killed.setdefault("publish_errors", []).append(type(error).__name__)
                    await asyncio.sleep(0.2)
            published += 1
            if published == KILL_AFTER:
                pid = component_pid(stack, str(leader))
                os.kill(pid, signal.SIGKILL)
                killed.update(server=leader, pid=pid, at=time.monotonic())

    async def consume() -> None:
        deadline = time.monotonic() + 90
        while len(received) < WORK_MESSAGES and time.monotonic() < deadline:
            try:
                messages = await subscription.fetch(50, timeout=1.0)
            except Exception:  # nothing yet, or the consumer's leader is moving
                await asyncio.sleep(0.1)
                continue
            for message in messages:
                received[int(message.data)] += 1
                # Not acknowledged: delivered again after ack_wait, counted as seen twice, never lost.
                with contextlib.suppress(Exception):
                    await message.ack_sync(timeout=2.0)

    await asyncio.gather(publish(), consume())
    stored = (await settled(lambda: js.stream_info(stream))).state
    await settled(lambda: js.delete_stream(stream))
    await connection.close()
    return {"received": received, "stored": stored.messages, "last_seq": stored.last_seq, **killed}


def test_streams_are_kept_by_three_servers_and_a_killed_server_loses_nothing(
    replicated: Stack, model_server: ScriptedProvider
) -> None:
    found = {name: asyncio.run(stream_replicas(replicated, name)) for name in PLATFORM_STREAMS}
    assert found == {name: (3, 3) for name in PLATFORM_STREAMS}

    outcome = asyncio.run(publish_and_consume_through_a_kill(replicated))
    received: Counter[int] = outcome["received"]
    lost = sorted(set(range(WORK_MESSAGES)) - set(received))
    print(
        json.dumps(
            {
                "killed": outcome.get("server"),
                "publish_retries": len(outcome.get("publish_errors", [])),
                "lost": len(lost),
                "received_twice": sum(1 for n in received.values() if n > 1),
            }
        )
    )
    assert outcome.get("server") in NATS_SERVERS, outcome
    assert lost == [], lost
    assert (outcome["stored"], outcome["last_seq"]) == (WORK_MESSAGES, WORK_MESSAGES)  # none stored twice

    # The supervisor brings the server back, and the platform answers on.
    killed = str(outcome["server"])
    deadline = time.monotonic() + 60
    while True:
        state = replicated.state()
        assert state is not None
        back = state.component(killed)
        if (back.status, back.pid != outcome["pid"], back.restarts) == ("healthy", True, 1):
            break
        assert time.monotonic() < deadline, back
        time.sleep(0.5)
    # Two turns of one session: whichever replica runs each, the session (PostgreSQL) and its lease (a
    # KV bucket, kept by 3 servers as the streams are) are the same.
    model_server.reset()
    model_server.respond("/v1/chat/completions", chat_model)
    tenant = f"t{uuid.uuid4().hex[:10]}"
    with client(replicated, tenant) as http:
        use_scripted_model(http, model_server)
        created = http.post("/sessions", json={})
        assert created.status_code == 201, created.text
        session = created.json()["id"]
        for question in ("are you still there", "and now"):
            turn = ask(http, f"{question} ({tenant})", session_id=session)
            assert [name for name, _ in turn].count("completed") == 1, turn
            assert turn[-1][1]["text"] == "".join(ANSWER), turn[-1]
        listed = http.get(f"/sessions/{session}/messages", params={"oldest_first": True})
        assert listed.status_code == 200, listed.text
        assert len(listed.json()["messages"]) == 4, listed.json()
    assert asyncio.run(stream_replicas(replicated, f"KV_{SESSION_LEASES_BUCKET}")) == (3, 3)


# (d) one NATS server, one worker and one conversation replica killed during work ----------------

FAULT_TURNS = 6  # three rounds on two replicas that take one turn at a time
FAULT_ANSWER = [f"Part {i} of the answer. " for i in range(1, 9)]
FAULT_ANSWER_PIECE_SECONDS = 0.5  # four seconds of streaming per turn: a kill lands mid-answer
FAULT_BATCHES = 2  # two uploads, two workflows: both workers have work
FAULT_BATCH_DOCUMENTS = 4
KILL_WITHIN_SECONDS = 60.0
QUORUM_WITHIN_SECONDS = 30.0
BACK_WITHIN_SECONDS = 60.0


def fault_model(request: Recorded) -> Reply:
    decision = openai_decision("B", request.json)  # chitchat: one streamed answer
    if decision is not None:
        return decision
    return dataclasses.replace(openai_text_stream(FAULT_ANSWER), chunk_delay=FAULT_ANSWER_PIECE_SECONDS)


def owner_client(stack: Stack) -> httpx.Client:
    """The gateway as the fault suite's tenant (``OWNER``), whose documents its gRPC helpers read."""
    return client(stack, OWNER.tenant_id)


async def worker_running_an_activity(temporal: Client, workers: dict[int, str]) -> tuple[str, str] | None:
    """(worker, activity type) of an ingestion stage a worker of ``workers`` (by pid) is running now."""
    query = "WorkflowType = 'IngestDocuments' AND ExecutionStatus = 'Running'"
    async for execution in temporal.list_workflows(query):
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        with contextlib.suppress(Exception):  # it ended meanwhile
            described = await handle.describe()
            for pending in described.raw_description.pending_activities:
                if pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                    continue
                pid = pending.last_worker_identity.partition("@")[0]
                if pid.isdigit() and int(pid) in workers:
                    return workers[int(pid)], pending.activity_type.name
    return None


async def stages_retried(temporal: Client) -> int:
    """Ingestion stages that ran again (attempt > 1: their worker died, or fell silent), in every
    ingestion workflow. Temporal records only an activity's last attempt."""
    retried = 0
    async for execution in temporal.list_workflows("WorkflowType = 'IngestDocuments'"):
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for event in handle.fetch_history_events():
            if event.HasField("activity_task_started_event_attributes"):
                retried += event.activity_task_started_event_attributes.attempt > 1
    return retried


async def nats_connection(stack: Stack) -> nats.NATS:
    return await nats.connect(
        servers=stack.nats_urls,
        reconnect_time_wait=0.5,
        max_reconnect_attempts=-1,
        **stack.nats_auth().connect_options(),
    )


async def stream_leader(stack: Stack, stream: str) -> str:
    connection = await nats_connection(stack)
    try:
        js = connection.jetstream(timeout=5.0)
        info = await settled(lambda: js.stream_info(stream))
    finally:
        await connection.close()
    assert info.cluster is not None and info.cluster.leader in NATS_SERVERS, info.cluster
    return str(info.cluster.leader)


async def healthy_servers(http: httpx.AsyncClient, stack: Stack, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` whose ``/healthz`` says 200: JetStream is on and has a meta leader (quorum)."""
    ports = {node.name: node.monitor_port for node in nats_nodes(stack.config)}
    healthy = []
    for name in names:
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get(f"http://127.0.0.1:{ports[name]}/healthz", timeout=2.0)).status_code == 200:
                healthy.append(name)
    return healthy


async def gateway_server(http: httpx.AsyncClient, stack: Stack) -> list[str]:
    """The NATS servers whose ``/connz`` lists a connection named after the gateway (for the report:
    whether the gateway itself lost its server)."""
    found = []
    for node in nats_nodes(stack.config):
        with contextlib.suppress(httpx.HTTPError, ValueError):
            connz = (await http.get(f"http://127.0.0.1:{node.monitor_port}/connz?limit=1024")).json()
            if any("gateway" in (c.get("name") or "") for c in connz.get("connections") or []):
                found.append(node.name)
    return found


async def cluster_intact(stack: Stack) -> dict[str, Any]:
    """Every platform stream (and the session leases' bucket) with a leader and 3 current replicas, and
    each server's view of the meta group."""
    connection = await nats_connection(stack)
    streams: dict[str, Any] = {}
    try:
        js = connection.jetstream(timeout=5.0)
        for stream in (*PLATFORM_STREAMS, f"KV_{SESSION_LEASES_BUCKET}"):
            cluster = (await settled(functools.partial(js.stream_info, stream))).cluster
            assert cluster is not None, stream
            replicas = cluster.replicas or []
            streams[stream] = {
                "leader": cluster.leader,
                "peers": 1 + len(replicas),
                "current": sum(1 for r in replicas if r.current) + 1,
            }
    finally:
        await connection.close()
    meta = {}
    async with httpx.AsyncClient() as http:
        for node in nats_nodes(stack.config):
            jsz = (await http.get(f"http://127.0.0.1:{node.monitor_port}/jsz")).json()
            meta[node.name] = (jsz.get("meta_cluster") or {}).get("cluster_size")
    return {"streams": streams, "meta_cluster_size": meta}


async def stored_chunk_positions(index: Any, document_id: str) -> list[int]:
    """The positions of a document's chunks as the chunk store lists them, in reading order."""
    selector = rpb.ChunkSelector(
        range=rpb.PositionRange(document_id=document_id, start_position=0, end_position=100_000)
    )
    positions: list[int] = []
    token = ""
    while True:
        response = await index.ListChunks(
            rpb.ListChunksRequest(selectors=[selector], page_size=100, page_token=token)
        )
        positions.extend(c.position for c in response.chunks)
        token = response.next_page_token
        if not token:
            return positions


def turn_verdict(turn: Turn, stored: list[tuple[str, dict[str, Any]]], model_answers: int) -> dict[str, Any]:
    """What became of one turn as its client saw it: lost (no completed final with the whole answer,
    or a gap in its events) or duplicated (a second final, an event or a piece of text twice)."""
    answer = "".join(FAULT_ANSWER)
    finals = turn.finals
    sequences = turn.sequences
    completed = len(finals) >= 1 and finals[0][0] == "completed" and finals[0][1].get("text") == answer
    return {
        "turn_id": turn.turn_id,
        "final": finals[0][0] if finals else "",
        "error_code": finals[0][1].get("error_code", "") if finals else "",
        # No completed final with the whole answer, a gap in the events, or text missing.
        "lost": not completed
        or sorted(set(sequences)) != list(range(len(set(sequences))))
        or (turn.streamed_text != answer and answer.startswith(turn.streamed_text)),
        "duplicated": len(finals) > 1
        or len(sequences) != len(set(sequences))
        or not answer.startswith(turn.streamed_text),
        "stored_matches_seen": [_brief(*e) for e in stored] == [_brief(*e) for e in turn.events],
        "model_answers": model_answers,
        "resumed": turn.resumed,
        "dropped": turn.dropped,
    }


async def work_through_kills(stack: Stack, model_server: ScriptedProvider) -> dict[str, Any]:
    """Chat turns in flight and a batch being ingested; one NATS server (the leader of the turn events'
    stream), the worker running a stage and a conversation replica running a turn are killed at once.
    What became of every document and turn."""
    tag = uuid.uuid4().hex[:8]
    messages = [f"tell me something, number {i} ({tag})" for i in range(FAULT_TURNS)]
    streaming: dict[str, bool] = dict.fromkeys(messages, False)

    def tracker(message: str) -> Callable[[str, dict[str, Any]], None]:
        """Keeps ``streaming[message]`` true while the turn's answer is coming."""

        def seen(name: str, _: dict[str, Any]) -> None:
            if name in FINALS:
                streaming[message] = False
            elif name == "text_delta":
                streaming[message] = True

        return seen

    loop = asyncio.get_running_loop()
    temporal = await Client.connect(stack.temporal_address)
    victim_conversation = CONVERSATIONS[1]
    report: dict[str, Any] = {}
    with (
        owner_client(stack) as http,
        ThreadPoolExecutor(max_workers=FAULT_TURNS + FAULT_BATCHES) as pool,
    ):
        await asyncio.to_thread(use_scripted_model, http, model_server)
        kb = await asyncio.to_thread(
            http.post,
            "/knowledge-bases",
            json={"name": f"faults-{tag}", "chunking": {"chunk_size_tokens": 48}},
        )
        assert kb.status_code == 201, kb.text
        kb_id = kb.json()["id"]

        def follow(message: str) -> Turn:
            try:
                return _follow(http, Turn(message), tracker(message))
            finally:
                streaming[message] = False

        turns = [loop.run_in_executor(pool, follow, m) for m in messages]
        deadline = time.monotonic() + KILL_WITHIN_SECONDS
        while sum(streaming.values()) < 2:  # both replicas are streaming an answer
            assert time.monotonic() < deadline, "the turns never streamed on both replicas at once"
            await asyncio.sleep(0.1)

        def upload(batch: int) -> list[str]:
            files = [
                ("file", (f"b{batch}-p{n}.md", _document(batch * 100 + n), "text/markdown"))
                for n in range(FAULT_BATCH_DOCUMENTS)
            ]
            response = http.post(f"/knowledge-bases/{kb_id}/documents/batch", files=files)
            assert response.status_code == 200, response.text
            results = response.json()["results"]
            assert all(r["error"] is None and not r["duplicate"] for r in results), results
            return [r["document"]["id"] for r in results]

        uploads = await asyncio.gather(*(loop.run_in_executor(pool, upload, b) for b in range(FAULT_BATCHES)))
        ids = [i for batch in uploads for i in batch]

        victim_nats = await stream_leader(stack, CHAT_EVENTS_STREAM)
        async with httpx.AsyncClient() as monitor:
            report["gateway_on"] = await gateway_server(monitor, stack)
        # The moment: a worker is running a stage and both replicas a turn; the kills follow at once.
        workers = {component_pid(stack, name): name for name in WORKERS}
        while True:
            running = await worker_running_an_activity(temporal, workers)
            if running is not None and sum(streaming.values()) >= 2:
                break
            assert time.monotonic() < deadline, (running, streaming)
            await asyncio.sleep(0.1)
        victim_worker, activity = running
        killed: dict[str, int] = {}
        for name in (victim_conversation, victim_worker, victim_nats):
            pid = component_pid(stack, name)
            os.kill(pid, signal.SIGKILL)
            killed[name] = pid
        killed_at = time.monotonic()
        report |= {"killed": killed, "activity_killed": activity, "turns_streaming": sum(streaming.values())}

        # The two servers left keep quorum: each still has a meta leader.
        survivors = tuple(n for n in NATS_SERVERS if n != victim_nats)
        async with httpx.AsyncClient() as monitor:
            while len(await healthy_servers(monitor, stack, survivors)) < len(survivors):
                assert time.monotonic() - killed_at < QUORUM_WITHIN_SECONDS, "the cluster lost its quorum"
                await asyncio.sleep(0.2)
        report["quorum_seconds"] = round(time.monotonic() - killed_at, 1)

        finished = await asyncio.gather(*turns)
        report["turns_seconds"] = round(time.monotonic() - killed_at, 1)
        stored = {t.turn_id: await asyncio.to_thread(_stored, http, t.turn_id) for t in finished if t.turn_id}

    async with owners_clients(stack) as (ingestion, index):
        documents = await _all_finished(ingestion, ids, within=READY_WITHIN_SECONDS)
        report["documents_seconds"] = round(time.monotonic() - killed_at, 1)
        listed = await ingestion.ListDocuments(
            ipb.ListDocumentsRequest(knowledge_base_id=kb_id, page_size=100)
        )
        counts = await _count(index, kb_id, documents)
        positions = {d.id: await stored_chunk_positions(index, d.id) for d in documents}
        stats = (
            await index.GetIndexStats(rpb.GetIndexStatsRequest(knowledge_base_ids=[kb_id]))
        ).knowledge_bases[0]

    # The killed processes are back (the supervisor restarts them) and the cluster is whole again.
    deadline = time.monotonic() + BACK_WITHIN_SECONDS
    while True:
        state = stack.state()
        assert state is not None
        back = {name: state.component(name) for name in killed}
        if all(c.status == "healthy" and c.pid != killed[name] for name, c in back.items()):
            break
        assert time.monotonic() < deadline, back
        await asyncio.sleep(0.5)
    async with httpx.AsyncClient() as monitor:
        while len(await healthy_servers(monitor, stack, NATS_SERVERS)) < len(NATS_SERVERS):
            assert time.monotonic() < deadline, "the killed NATS server did not rejoin"
            await asyncio.sleep(0.5)
    intact = await cluster_intact(stack)
    retried = await stages_retried(temporal)

    verdicts = {
        t.message: turn_verdict(t, stored.get(t.turn_id, []), _answers_to(model_server, t.message))
        for t in finished
    }
    records = [record for name in CONVERSATIONS for record in log_records(stack, name)]
    ours = {t.turn_id for t in finished}
    redelivered = {
        r["turn_id"] for r in records if r.get("event") == "turn finished" and r.get("delivery", 1) > 1
    }
    resumed = {r["turn_id"] for r in records if r.get("event") == "turn resumed from its checkpoint"}
    listed_ids = [d.id for d in listed.documents]
    return {
        **report,
        "documents": len(documents),
        "documents_listed": len(listed_ids),
        "documents_listed_twice": len(listed_ids) - len(set(listed_ids)),
        "documents_indexed": stats.document_count,
        # Per document, as the chunk store lists them: positions 0 … chunk_count - 1, each once.
        "chunks_missing": sum(len(set(range(d.chunk_count)) - set(positions[d.id])) for d in documents),
        "chunks_twice": sum(len(positions[d.id]) - len(set(positions[d.id])) for d in documents),
        "chunks_unexpected": sum(len(set(positions[d.id]) - set(range(d.chunk_count))) for d in documents),
        **counts,
        "turns": verdicts,
        "turns_redelivered": len(ours & redelivered),
        # Delivered again in the middle of their answer, and resumed from their checkpoint.
        "turns_resumed": len(ours & resumed),
        "stages_retried": retried,
        "cluster": intact,
    }


def test_killing_a_nats_server_a_worker_and_a_conversation_replica_mid_work_loses_nothing(
    replicated: Stack, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", fault_model)
    outcome = asyncio.run(work_through_kills(replicated, model_server))
    turns: dict[str, dict[str, Any]] = outcome.pop("turns")
    lost = {
        "documents": outcome["lost"] + len(outcome["failed"]),
        "chunks": outcome["chunks_missing"],
        "turns": sum(t["lost"] for t in turns.values()),
    }
    duplicated = {
        "documents": outcome["documents_listed_twice"],
        "chunks": outcome["duplicated"] + outcome["chunks_twice"] + outcome["chunks_unexpected"],
        "vectors": outcome["vectors"] - outcome["chunks"],
        "lexical": outcome["lexical"] - outcome["chunks"],
        "turns": sum(t["duplicated"] for t in turns.values()),
    }
    record = {
        "scenario": "nats server, ingestion worker and conversation replica killed during work",
        "lost": sum(lost.values()),
        "duplicated": sum(duplicated.values()),
        "lost_by_kind": lost,
        "duplicated_by_kind": duplicated,
        **outcome,
        "turns": {t["turn_id"]: {k: v for k, v in t.items() if k != "turn_id"} for t in turns.values()},
    }
    print("\n" + json.dumps(record, default=str))

    assert record["lost"] == 0 and record["duplicated"] == 0, record
    assert outcome["failed"] == [] and outcome["documents"] == FAULT_BATCHES * FAULT_BATCH_DOCUMENTS
    assert outcome["documents_listed"] == outcome["documents_indexed"] == outcome["documents"], outcome
    assert outcome["chunks"] > outcome["documents"]  # several chunks each
    for turn in turns.values():
        assert turn["final"] == "completed" and turn["stored_matches_seen"], turn
        assert turn["model_answers"] >= 1, turn
    # The killed replica's turn was delivered again, resumed mid-answer, and answered once all the same.
    assert outcome["turns_resumed"] >= 1, turns
    assert all(size == 3 for size in outcome["cluster"]["meta_cluster_size"].values()), outcome["cluster"]
    assert all(
        s["leader"] in NATS_SERVERS and s["peers"] == s["current"] == 3
        for s in outcome["cluster"]["streams"].values()
    ), outcome["cluster"]
