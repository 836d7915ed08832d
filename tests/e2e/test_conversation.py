"""Asking questions of a real ingested knowledge base, end to end: gateway → NATS → conversation →
modelhub / toolrunner / retrieval over gRPC, and the turn's events back as server-sent events.

The chat model is the scripted OpenAI-compatible server (real HTTP on loopback, OpenAI's wire format)
registered in modelhub as a tenant's default; everything else is the stack `make up` runs. Each test
uses a tenant of its own (identity headers), so a default model set here reaches no other test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel

from .test_gateway_ingestion import create_kb, events, upload

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import (
    Recorded,
    Reply,
    ScriptedProvider,
    openai_decision,
    openai_text_stream,
    openai_tool_call_stream,
)

pytestmark = pytest.mark.e2e

HANDBOOK = (
    b"# Employee handbook\n\n"
    b"## Annual leave\n\n"
    b"Every employee gets 27 days of paid annual leave per calendar year. "
    b"Unused leave can be carried over until the end of March.\n\n"
    b"## Expenses\n\n"
    b"Taxi rides are reimbursed only after 22:00 or when carrying equipment.\n"
)
TIMEOUT = httpx.Timeout(30.0, read=120.0)


def tenant() -> dict[str, str]:
    """A tenant of its own, as an authenticating proxy names it (``client`` adds the proxy's secret)."""
    return {"x-ks-tenant-id": f"t{uuid.uuid4().hex[:10]}", "x-ks-user-id": "alice", "x-ks-role": "admin"}


def client(stack: Any, headers: dict[str, str]) -> httpx.Client:
    proxy = {"x-ks-proxy-secret": stack.config.extra_env["KS_GATEWAY_PROXY_SECRET"]}
    return httpx.Client(base_url=f"{stack.gateway_url}/api/v1", timeout=TIMEOUT, headers={**proxy, **headers})


def ready_kb(http: httpx.Client) -> tuple[str, str]:
    """A knowledge base holding the handbook, once it is ready: (kb id, document id)."""
    kb = create_kb(http)
    uploaded = upload(http, kb["id"], "handbook.md", HANDBOOK)
    assert uploaded.status_code == 201, uploaded.text
    document = uploaded.json()["document"]
    with http.stream("GET", f"/documents/{document['id']}/progress") as stream:
        statuses = [data["status"] for _, data in events(stream)]
    assert statuses[-1] == "ready", statuses
    return kb["id"], document["id"]


def ask(http: httpx.Client, message: str, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    with http.stream("POST", "/chat/turns", json={"message": message, **fields}) as response:
        assert response.status_code == 200, response.read()
        turn = list(events(response))
    assert [data["sequence"] for _, data in turn] == list(range(len(turn))), turn
    assert [name for name, _ in turn].count("completed") + [name for name, _ in turn].count("error") == 1, (
        turn
    )
    return turn


def use_scripted_model(http: httpx.Client, server: ScriptedProvider) -> str:
    created = http.post(
        "/models",
        json={
            "display_name": "scripted chat",
            "provider_id": "custom",
            "model_name": "scripted-chat",
            "types": ["knowledge_qa"],
            "base_url": f"{server.url}/v1",
            "api_key": "sk-e2e-scripted-0001",
        },
    )
    assert created.status_code == 201, created.text
    model_id: str = created.json()["id"]
    assert http.put("/models/defaults/knowledge_qa", json={"model_id": model_id}).status_code == 200
    return model_id


def test_without_a_chat_model_a_question_gets_the_passage_that_answers_it_cited(stack: Any) -> None:
    with client(stack, tenant()) as http:
        kb_id, document_id = ready_kb(http)
        turn = ask(http, "How many days of annual leave do employees get?", knowledge_base_ids=[kb_id])
        names = [name for name, _ in turn]
        assert names[:2] == ["started", "intent"] and names[-1] == "completed", turn
        final = turn[-1][1]
        assert final["answer_kind"] == "extracted"
        assert "27 days of paid annual leave per calendar year. [[c1]]" in final["text"]
        assert "Taxi" not in final["text"]
        [cited] = final["citations"]
        assert cited["handle"] == "c1" and cited["document_id"] == document_id
        assert cited["file_name"] == "handbook.md" and cited["knowledge_base_id"] == kb_id
        assert "Annual leave" in cited["heading_path"]


def test_a_question_runs_retrieval_through_the_tool_runner_and_cites_the_chunk(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()

    def model(request: Recorded) -> Reply:
        body = request.json
        decision = openai_decision("E", body)  # kb_search
        if decision is not None:
            return decision
        messages = body["messages"]
        if messages[-1]["role"] == "tool":
            return openai_text_stream(["Employees get 27 days", " of paid leave a year [[c1]]", " [[c7]]."])
        return openai_tool_call_stream("doc_retrieval", {"query": "annual leave days"})

    model_server.respond("/v1/chat/completions", model)
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        turn = ask(http, "How many days of annual leave do employees get?", knowledge_base_ids=[kb_id])
    names = [name for name, _ in turn]
    assert names[:5] == ["started", "intent", "tool_started", "tool_finished", "sources"], turn
    intent = turn[1][1]
    assert (intent["intent"], intent["route"]) == ("kb_search", "react")
    finished = turn[3][1]
    assert finished["tool_name"] == "doc_retrieval" and finished["tool_ok"] is True
    sources = turn[4][1]["citations"]
    assert sources[0]["handle"] == "c1" and sources[0]["document_id"] == document_id
    final = turn[-1][1]
    assert names[-1] == "completed", final
    assert final["text"] == "Employees get 27 days of paid leave a year [[c1]] ."
    assert final["removed_citations"] == 1
    [cited] = final["citations"]
    assert cited["handle"] == "c1" and cited["document_id"] == document_id
    # The model saw the passage the tool runner found, and only the tools this turn allows.
    requests = [r.json for r in model_server.requests_to("/v1/chat/completions") if r.json.get("tools")]
    tool_names = {t["function"]["name"] for t in requests[0]["tools"]}
    assert (
        "doc_retrieval" in tool_names
        and not {"web_search", "web_fetch", "query_knowledge_graph"} & tool_names
    )
    tool_message = requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "27 days" in json.dumps(tool_message["content"])


def test_a_greeting_is_answered_by_the_model_without_tools(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()

    def model(request: Recorded) -> Reply:
        decision = openai_decision("A", request.json)  # greeting
        if decision is not None:
            return decision
        return openai_text_stream(["Hello!", " Ask me about your documents."])

    model_server.respond("/v1/chat/completions", model)
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        turn = ask(http, "hello")
    assert [name for name, _ in turn] == ["started", "intent", "text_delta", "text_delta", "completed"]
    assert turn[-1][1]["text"] == "Hello! Ask me about your documents."
    # No tool runs: the answer's request carries the tool schemas (the cached prompt prefix) with calls off.
    [answer] = [r.json for r in model_server.requests_to("/v1/chat/completions") if r.json.get("tools")]
    assert answer.get("tool_choice") == "none" and answer["messages"][-1]["content"].endswith("hello")


def test_another_tenants_knowledge_base_yields_nothing(stack: Any) -> None:
    with client(stack, tenant()) as owner:
        kb_id, _ = ready_kb(owner)
    with client(stack, tenant()) as stranger:
        turn = ask(stranger, "How many days of annual leave do employees get?", knowledge_base_ids=[kb_id])
    final = turn[-1][1]
    assert "27 days" not in json.dumps(turn)
    assert final.get("citations", []) == []


def test_killing_the_conversation_in_the_tool_loop_loses_and_repeats_nothing(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    answers = 0
    in_second_call = threading.Event()
    lock = threading.Lock()

    def model(request: Recorded) -> Reply:
        nonlocal answers
        decision = openai_decision("E", request.json)
        if decision is not None:
            return decision
        if request.json["messages"][-1]["role"] != "tool":
            return openai_tool_call_stream("doc_retrieval", {"query": "annual leave days"})
        with lock:
            answers += 1
            first = answers == 1
        if first:
            in_second_call.set()  # the replica is waiting for this answer when it is killed
            return dataclasses.replace(openai_text_stream(["never shown"]), delay=5.0)
        return openai_text_stream(["Employees get 27 days", " of paid leave a year [[c1]]."])

    model_server.respond("/v1/chat/completions", model)
    killed: list[int] = []

    def kill_when_waiting() -> None:
        if in_second_call.wait(timeout=120):
            pid = stack.state().component("conversation").pid
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        killer = threading.Thread(target=kill_when_waiting)
        killer.start()
        turn = ask(http, "How many days of annual leave do employees get?", knowledge_base_ids=[kb_id])
        killer.join()
        assert killed, "the turn never reached its second model call"
        names = [name for name, _ in turn]
        # Every event once, in order (ask() checks the sequences), and one final event: the answer.
        assert names.count("started") == 1 and names.count("tool_started") == 1, names
        assert names[-1] == "completed", turn[-1]
        final = turn[-1][1]
        assert final["text"] == "Employees get 27 days of paid leave a year [[c1]]."
        assert final["citations"][0]["document_id"] == document_id
        assert "never shown" not in json.dumps(turn)
        assert answers == 2  # resumed at the model call it was waiting on, not from the start

        # A client that dropped after the tool call reconnects and gets the rest, each event once.
        tool_finished = next(data["sequence"] for name, data in turn if name == "tool_finished")
        with http.stream(
            "GET", f"/chat/turns/{final['turn_id']}/events", headers={"last-event-id": str(tool_finished)}
        ) as response:
            assert response.status_code == 200
            rest = list(events(response))
        assert [data["sequence"] for _, data in rest] == list(range(tool_finished + 1, len(turn)))
        assert rest[-1][1]["text"] == final["text"]
    assert stack.state().component("conversation").pid not in killed  # restarted by the supervisor


def test_a_session_keeps_its_turns_and_is_the_askers_alone(stack: Any) -> None:
    with client(stack, tenant()) as http:
        kb_id, _ = ready_kb(http)
        created = http.post("/sessions", json={})
        assert created.status_code == 201, created.text
        session = created.json()
        ask(
            http,
            "How many days of annual leave do employees get?",
            knowledge_base_ids=[kb_id],
            session_id=session["id"],
        )
        ask(http, "When do taxi rides get reimbursed?", knowledge_base_ids=[kb_id], session_id=session["id"])
        got = http.get(f"/sessions/{session['id']}").json()
        assert got["turn_count"] == 2 and got["title"] == "How many days of annual leave do employees get?"
        messages = http.get(f"/sessions/{session['id']}/messages", params={"oldest_first": True}).json()[
            "messages"
        ]
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
        assert "22:00" in messages[3]["content"][0]["text"]
        with client(stack, tenant()) as stranger:
            assert stranger.get(f"/sessions/{session['id']}").status_code == 404
            refused = stranger.post("/chat/turns", json={"message": "hi", "session_id": session["id"]})
            assert refused.status_code == 404, refused.text
            assert stranger.get(f"/sessions/{session['id']}/messages").status_code == 404
        assert http.delete(f"/sessions/{session['id']}").status_code == 204
        assert http.get(f"/sessions/{session['id']}").status_code == 404


def test_a_cancelled_turn_stops_and_says_so(stack: Any, model_server: ScriptedProvider) -> None:
    model_server.reset()

    def model(request: Recorded) -> Reply:
        decision = openai_decision("B", request.json)  # chitchat: one streamed answer
        if decision is not None:
            return decision
        slow = openai_text_stream(["Once upon a time", " there", " was", " a", " very", " long", " story"])
        return dataclasses.replace(slow, chunk_delay=1.0)

    model_server.respond("/v1/chat/completions", model)
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        seen: list[tuple[str, dict[str, Any]]] = []
        with http.stream("POST", "/chat/turns", json={"message": "tell me a long story"}) as response:
            for name, data in events(response):
                seen.append((name, data))
                if name == "text_delta" and len([n for n, _ in seen if n == "text_delta"]) == 1:
                    cancelled = http.post(f"/chat/turns/{data['turn_id']}/cancel")
                    assert cancelled.status_code == 200 and cancelled.json() == {"cancelled": True}
        names = [name for name, _ in seen]
        assert names[-1] == "cancelled" and names.count("cancelled") == 1, names
        assert seen[-1][1]["text"].startswith("Once upon a time") and "story" not in seen[-1][1]["text"]
        again = http.post(f"/chat/turns/{seen[0][1]['turn_id']}/cancel")
        assert again.json() == {"cancelled": False}


def test_memory_hears_what_the_user_asked_it_to_remember_and_which_documents_answers_cite(stack: Any) -> None:
    headers = tenant()
    with client(stack, headers) as http:
        kb_id, document_id = ready_kb(http)
        ask(http, "记住：我在财务部工作")
        for question in (
            "How many days of annual leave do employees get?",
            "Can unused annual leave be carried over?",
        ):
            turn = ask(http, question, knowledge_base_ids=[kb_id])
            assert turn[-1][1]["citations"][0]["document_id"] == document_id
    caller = Identity(headers["x-ks-tenant-id"], headers["x-ks-user-id"])

    async def read() -> tuple[Any, Any]:
        contract = CONTRACTS["memory"]
        async with open_channel(stack.grpc_addr("memory"), services=[contract.descriptor]) as channel:
            stub = contract.stub(channel)
            with bound_identity(caller):
                items = await stub.ListMemoryItems(mpb.ListMemoryItemsRequest())
                deadline = time.monotonic() + 30
                while True:  # turn completions reach memory through JetStream, a moment later
                    frequent = await stub.ListFrequentDocuments(mpb.ListFrequentDocumentsRequest())
                    if frequent.documents or time.monotonic() > deadline:
                        return items, frequent
                    await asyncio.sleep(0.2)

    items, frequent = asyncio.run(read())
    assert [i.content for i in items.items] == ["我在财务部工作"]
    [consulted] = frequent.documents
    assert (consulted.document_id, consulted.hit_count) == (document_id, 2)


def test_one_trace_runs_from_the_request_through_every_step_of_the_turn(
    stack: Any, otlp: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()

    def model(request: Recorded) -> Reply:
        decision = openai_decision("E", request.json)
        if decision is not None:
            return decision
        if request.json["messages"][-1]["role"] == "tool":
            return openai_text_stream(["27 days [[c1]]."])
        return openai_tool_call_stream("doc_retrieval", {"query": "annual leave"})

    model_server.respond("/v1/chat/completions", model)
    wanted = {
        ("gateway", "/api/v1/chat/turns"),
        ("conversation", "conversation.query_understand"),
        ("conversation", "conversation.agent"),
        ("conversation", "conversation.tools"),
        ("toolrunner", "ExecuteTool"),
        ("retrieval", "RetrievalService/Search"),
        ("modelhub", "ChatStream"),
        ("modelhub", "Decide"),
    }

    def server_span(spans: list[Any], service: str, part: str) -> Any:
        return next(
            (s for s in spans if s.service == service and s.kind == "SERVER" and part in s.name), None
        )

    def complete(spans: list[Any]) -> bool:
        # The gateway's request span ends (and is exported) only after the whole event stream was
        # sent, later than its inner "http send" spans whose names match too: wait for it by kind.
        return all(any(s.service == svc and part in s.name for s in spans) for svc, part in wanted) and (
            server_span(spans, "gateway", "/chat/turns") is not None
        )

    def problem_with(spans: list[Any], caller_span: str) -> str | None:
        """What the trace lacks, or None when it runs from the caller through every step."""
        missing = {w for w in wanted if not any(s.service == w[0] and w[1] in s.name for s in spans)}
        if missing:
            return f"missing {sorted(missing)} among {sorted({(s.service, s.name) for s in spans})}"
        by_id = {s.span_id: s for s in spans}

        def ancestors(span: Any) -> list[Any]:
            chain = []
            while span.parent_span_id in by_id:
                span = by_id[span.parent_span_id]
                chain.append(span)
            return chain

        request = server_span(spans, "gateway", "/chat/turns")
        execute = server_span(spans, "toolrunner", "ExecuteTool")
        search = server_span(spans, "retrieval", "Search")
        if request is None or execute is None or search is None:
            return f"a server span is missing: request {request}, execute {execute}, search {search}"
        if request.parent_span_id != caller_span:
            return f"the request span's parent is {request.parent_span_id}, not the caller's {caller_span}"
        tools_nodes = [s for s in spans if s.name == "conversation.tools"]
        if not any(node in ancestors(execute) and request in ancestors(node) for node in tools_nodes):
            chain = [a.name for a in ancestors(execute)]
            return f"ExecuteTool is not under a tools node under the request: {chain}"
        if execute not in ancestors(search):
            return f"Search is not under ExecuteTool: {[a.name for a in ancestors(search)]}"
        return None

    problems = []
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        kb_id, _ = ready_kb(http)
        # Spans are exported in batches, best effort: a trace a loaded machine let a batch of drop is
        # asked once more; one of the two must run whole from the request through every step.
        for _ in range(2):
            trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
            http.headers["traceparent"] = f"00-{trace_id}-{caller_span}-01"
            turn = ask(http, "How many days of annual leave do employees get?", knowledge_base_ids=[kb_id])
            assert turn[-1][0] == "completed", turn
            problem = problem_with(otlp.wait_for(trace_id, complete, timeout=60), caller_span)
            if problem is None:
                break
            problems.append(problem)
    assert len(problems) < 2, problems
