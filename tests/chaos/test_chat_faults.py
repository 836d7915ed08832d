"""NATS stopped (SIGSTOP, by its pid) in the middle of a chat turn: the turn the client was reading
ends with exactly one final event and its answer holds every piece of text once; a turn asked for
while NATS was stopped is answered once afterwards, or refused with a clear error, never silently
lost; and what the events stream keeps of each turn is what its client saw.

The stack is the one `make up` runs, every service (the gateway is healthy only with all of them). The
chat model is the scripted OpenAI-compatible server (real HTTP on loopback), registered in modelhub as
the tenant's default, streaming its answer a piece a second so that the stop lands while the answer is
being streamed. The client reads the turn as server-sent events and, should its connection drop,
resumes it from the last sequence it saw (``Last-Event-ID``), as the gateway supports. NATS stays
stopped for ``min(60, KS_CHAOS_OUTAGE_SECONDS)`` seconds. The test prints one JSON line: turns lost
and duplicated, each turn's events as its client saw them and as the events stream keeps them, the
answers the model was asked for, and the seconds from NATS's return to each turn's final event.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowsphere_contracts.events import FINAL_KINDS
from knowsphere_stack import Stack, StackConfig

from .conftest import ScenarioReport

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import Recorded, Reply, ScriptedProvider, openai_decision, openai_text_stream

pytestmark = pytest.mark.chaos

OUTAGE_SECONDS = min(60.0, float(os.environ.get("KS_CHAOS_OUTAGE_SECONDS", "120")))
PROXY_SECRET = "chaos-proxy-secret-" + "0123456789abcdef" * 2
# The answer the model streams, a piece a second: NATS is stopped after the first piece reaches the
# client, so the rest is produced while the bus cannot carry it.
STORY = [f"Part {i} of the story. " for i in range(1, 9)]
STORY_PIECE_SECONDS = 1.0
GREETING = ["Hello again,", " ask me anything."]
# The second turn is asked this long after NATS was stopped.
SECOND_TURN_AFTER_SECONDS = 3.0
# A turn's final event is due this long after NATS is back at the latest.
FINAL_WITHIN_SECONDS = 120.0
TIMEOUT = httpx.Timeout(30.0, read=FINAL_WITHIN_SECONDS + OUTAGE_SECONDS)
FINALS = {kind.value for kind in FINAL_KINDS}


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedProvider]:
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, identity_keys_dir: Path, model_server: ScriptedProvider
) -> Iterator[Stack]:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path_factory.mktemp("chaos-chat"),
        # Every service: the gateway is healthy only when all of them are.
        temporal_headless=True,
        identity_keys_dir=identity_keys_dir,
        extra_env={
            "OTEL_TRACES_EXPORTER": "none",
            "KS_GATEWAY_PROXY_SECRET": PROXY_SECRET,
            # Tenants' models point at the scripted provider on loopback, which the operator allows.
            **model_server.modelhub_egress_env(),
        },
    )
    with Stack(config) as running:
        yield running


def _client(stack: Stack, tenant: str) -> httpx.Client:
    """A client of ``tenant``, named in identity headers as an authenticating proxy would."""
    headers = {
        "x-ks-proxy-secret": PROXY_SECRET,
        "x-ks-tenant-id": tenant,
        "x-ks-user-id": "alice",
        "x-ks-role": "admin",
    }
    return httpx.Client(base_url=f"{stack.gateway_url}/api/v1", timeout=TIMEOUT, headers=headers)


def _use_scripted_model(http: httpx.Client, server: ScriptedProvider) -> None:
    created = http.post(
        "/models",
        json={
            "display_name": "scripted chat",
            "provider_id": "custom",
            "model_name": "scripted-chat",
            "types": ["knowledge_qa"],
            "base_url": f"{server.url}/v1",
            "api_key": "sk-chaos-scripted-0001",
        },
    )
    assert created.status_code == 201, created.text
    chosen = http.put("/models/defaults/knowledge_qa", json={"model_id": created.json()["id"]})
    assert chosen.status_code == 200, chosen.text


def _events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a server-sent event stream; keep-alive comments are skipped."""
    name, data = "message", list[str]()
    for line in response.iter_lines():
        if line.startswith(":"):
            continue
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())


@dataclass
class Turn:
    """What one client saw of one turn, over its first connection and any resumed one."""

    message: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 0  # of the request that asked for the turn
    refused: str = ""  # an HTTP error before any event, as the client got it
    dropped: list[str] = field(default_factory=list)  # connection failures, one per drop
    resumed: int = 0
    final_at: float = 0.0

    @property
    def turn_id(self) -> str:
        return str(self.events[0][1]["turn_id"]) if self.events else ""

    @property
    def finals(self) -> list[tuple[str, dict[str, Any]]]:
        return [(name, data) for name, data in self.events if name in FINALS]

    @property
    def sequences(self) -> list[int]:
        return [int(data["sequence"]) for _, data in self.events]

    @property
    def streamed_text(self) -> str:
        return "".join(data.get("text") or "" for name, data in self.events if name == "text_delta")


def _follow(
    http: httpx.Client, turn: Turn, on_event: Callable[[str, dict[str, Any]], None] = lambda n, d: None
) -> Turn:
    """Asks ``turn.message`` and reads the turn to its final event, resuming after a dropped
    connection from the last sequence seen."""

    def read(response: httpx.Response) -> None:
        for name, data in _events(response):
            turn.events.append((name, data))
            on_event(name, data)
            if name in FINALS:
                turn.final_at = time.monotonic()
                return

    try:
        with http.stream("POST", "/chat/turns", json={"message": turn.message}) as response:
            turn.status = response.status_code
            if response.status_code != 200:
                turn.refused = f"{response.status_code} {response.read().decode(errors='replace')}"
                return turn
            read(response)
    except httpx.HTTPError as error:
        turn.dropped.append(repr(error))
    deadline = time.monotonic() + FINAL_WITHIN_SECONDS + OUTAGE_SECONDS
    while not turn.finals and turn.turn_id and time.monotonic() < deadline:
        turn.resumed += 1
        try:
            headers = {"last-event-id": str(turn.sequences[-1])}
            with http.stream("GET", f"/chat/turns/{turn.turn_id}/events", headers=headers) as response:
                if response.status_code == 200:
                    read(response)
                else:
                    turn.dropped.append(f"resume: {response.status_code} {response.read()[:200]!r}")
                    time.sleep(1)
        except httpx.HTTPError as error:
            turn.dropped.append(repr(error))
            time.sleep(1)
    return turn


def _stored(http: httpx.Client, turn_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every event the events stream keeps of a turn, read from the start (none: the turn never
    reached the conversation service, e.g. the gateway answered it with an error itself)."""
    with http.stream("GET", f"/chat/turns/{turn_id}/events", params={"after": -1}) as response:
        if response.status_code == 404:
            return []
        assert response.status_code == 200, response.read()
        return list(_events(response))


def _answers_to(server: ScriptedProvider, message: str) -> int:
    """Answer streams the model was asked for about ``message`` (decisions aside)."""
    return sum(
        1
        for r in server.requests_to("/v1/chat/completions")
        if message in json.dumps(r.json.get("messages", [])) and openai_decision("B", r.json) is None
    )


def _brief(name: str, data: dict[str, Any]) -> str:
    """An event in a few words, for the report: sequence, kind and its text or error code."""
    detail = data.get("error_code") or data.get("text") or ""
    return f"{data.get('sequence')}:{name}" + (f":{detail}" if detail else "")


def _verdict(
    turn: Turn, expected_text: str, back: float, stored: list[tuple[str, dict[str, Any]]], model_answers: int
) -> dict[str, Any]:
    """What became of one turn, as its client saw it and as the events stream keeps it."""
    final = turn.finals[0] if turn.finals else None
    sequences = turn.sequences
    # Refused: an HTTP error, or an error event of the gateway's own (nothing of the turn is stored).
    refused = bool(turn.refused) or (final is not None and final[0] == "error" and not stored)
    completed = final is not None and final[0] == "completed"
    return {
        "turn_id": turn.turn_id,
        "http_status": turn.status,
        "final": final[0] if final else "",
        "error_code": final[1].get("error_code", "") if final else "",
        "refused": turn.refused or (final[1].get("error_message", "") if refused and final else ""),
        # Lost: neither a final event nor a refusal reached the client.
        "lost": final is None and not refused,
        "finals": len(turn.finals),
        "events_seen_twice": len(sequences) - len(set(sequences)),
        "in_order": sequences == list(range(len(sequences))),
        # Each piece of the answer once, in order: the streamed text is the answer or a start of it.
        "text_duplicated": not expected_text.startswith(turn.streamed_text)
        or (completed and final is not None and final[1].get("text") != expected_text),
        # What a client resuming from the start would read is what this one saw, final included.
        "stored_matches_seen": [_brief(*e) for e in stored] == [_brief(*e) for e in turn.events],
        "model_answers": model_answers,
        "dropped": turn.dropped,
        "resumed": turn.resumed,
        "final_after_nats_back_seconds": round(turn.final_at - back, 1) if final else None,
        "seen": [_brief(*e) for e in turn.events],
        "stored": [_brief(*e) for e in stored],
    }


def test_nats_stopped_mid_turn_ends_each_turn_once_without_repeating_text(
    stack: Stack, model_server: ScriptedProvider, scenario_report: ScenarioReport
) -> None:
    tag = uuid.uuid4().hex[:8]
    story, greeting = f"tell me a long story {tag}", f"hello again {tag}"

    def model(request: Recorded) -> Reply:
        decision = openai_decision("B", request.json)  # chitchat: one streamed answer
        if decision is not None:
            return decision
        if greeting in json.dumps(request.json["messages"]):
            return openai_text_stream(GREETING)
        return dataclasses.replace(openai_text_stream(STORY), chunk_delay=STORY_PIECE_SECONDS)

    model_server.reset()
    model_server.respond("/v1/chat/completions", model)
    state = stack.state()
    nats_pid = state.component("nats").pid if state else None
    assert nats_pid is not None
    stopped = threading.Event()
    times: dict[str, float] = {}

    def stop_nats_at_first_text(name: str, data: dict[str, Any]) -> None:
        if name == "text_delta" and not stopped.is_set():
            os.kill(nats_pid, signal.SIGSTOP)  # the bus hangs: no answer, no closed connection
            times["stopped"] = time.monotonic()
            stopped.set()

    tenant = f"chaos-chat-{tag}"
    with _client(stack, tenant) as first_client, _client(stack, tenant) as second_client:
        _use_scripted_model(first_client, model_server)
        try:
            with ThreadPoolExecutor(max_workers=2) as pool:
                first = pool.submit(_follow, first_client, Turn(story), stop_nats_at_first_text)
                assert stopped.wait(120), "the turn never streamed its first piece of text"
                time.sleep(SECOND_TURN_AFTER_SECONDS)
                second = pool.submit(_follow, second_client, Turn(greeting))
                time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - times["stopped"])))
                os.kill(nats_pid, signal.SIGCONT)
                times["back"] = time.monotonic()
                first_turn, second_turn = first.result(), second.result()
        finally:
            os.kill(nats_pid, signal.SIGCONT)
        time.sleep(2)  # a late duplicate answer would reach the model by now
        stored = {t.turn_id: _stored(first_client, t.turn_id) for t in (first_turn, second_turn) if t.turn_id}

    back = times["back"]
    mid = _verdict(
        first_turn, "".join(STORY), back, stored.get(first_turn.turn_id, []), _answers_to(model_server, story)
    )
    asked = _verdict(
        second_turn,
        "".join(GREETING),
        back,
        stored.get(second_turn.turn_id, []),
        _answers_to(model_server, greeting),
    )
    turns = {"mid_turn": mid, "asked_while_stopped": asked}
    # Duplicated: a second final event, an event or a piece of text shown twice, or a turn refused
    # to its client and answered all the same (asked again, it would be answered twice).
    duplicated = [
        name
        for name, t in turns.items()
        if t["finals"] > 1
        or t["events_seen_twice"]
        or t["text_duplicated"]
        or (t["refused"] and t["model_answers"])
    ]
    report = {
        "scenario": "nats stopped during a chat turn",
        "outage_seconds": OUTAGE_SECONDS,
        "turns": len(turns),
        "lost": [name for name, t in turns.items() if t["lost"]],
        "duplicated": duplicated,
        **turns,
    }
    scenario_report(report)

    # The turn being read ends with one final event, the one the events stream keeps, and its
    # answer holds each piece once, in order.
    assert not mid["lost"] and mid["finals"] == 1 and mid["in_order"], mid
    assert not mid["events_seen_twice"] and not mid["text_duplicated"], mid
    assert mid["stored_matches_seen"], mid
    # The turn asked for while the bus was stopped: answered once afterwards, or refused with a
    # reason and then not answered behind its client's back.
    assert not asked["lost"], asked
    if asked["refused"]:
        assert asked["model_answers"] == 0, asked
    else:
        assert asked["finals"] == 1 and asked["in_order"] and not asked["events_seen_twice"], asked
        assert not asked["text_duplicated"] and asked["stored_matches_seen"], asked
        assert asked["final"] == "completed" or asked["error_code"], asked
    assert report["lost"] == [] and report["duplicated"] == [], report
