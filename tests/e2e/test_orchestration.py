"""Orchestrators end to end: agents and an orchestrator created through the gateway, a session bound to
it, and its turns run by the conversation over NATS with the scripted OpenAI-wire model (real HTTP on
loopback) and the real retrieval of an ingested knowledge base.

What a user notices: a conditional orchestrator's question is answered by the agent its routes pick,
and the stream says so (``handoff``); a knowledge-base orchestrator answers from the passages of one
retrieval, cited, without a tool loop; another tenant can neither read the orchestrator nor bind a
session to it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_data_parts
from a2a.types import AgentCard, Message, Part, Role, SendMessageRequest, StreamResponse, TaskState

from .test_conversation import TIMEOUT, ask, client, ready_kb, tenant, use_scripted_model

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


def scripted(request: Recorded) -> Reply:
    body = request.json
    decision = openai_decision("E", body)  # kb_search
    if decision is not None:
        return decision
    system = json.dumps(body["messages"][0]["content"])
    if "billing desk" in system:
        return openai_text_stream(["Billing here:", " your invoice is on its way."])
    if "Passages found in the knowledge bases" in json.dumps(body["messages"]):
        return openai_text_stream(["Employees get 27 days", " of paid leave [[c1]]."])
    return openai_text_stream(["The front desk answers."])


def test_a_conditional_orchestrator_routes_and_a_knowledge_base_one_cites(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", scripted)
    owner = tenant()
    with client(stack, owner) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        agents = {}
        for name, prompt in (("billing", "You are the billing desk."), ("front", "You are the front desk.")):
            created = http.post("/agents", json={"name": name, "system_prompt": prompt})
            assert created.status_code == 201, created.text
            agents[name] = created.json()["id"]
        routed = http.post(
            "/orchestrators",
            json={
                "name": "router",
                "mode": "conditional",
                "config": {
                    "routes": [{"condition": {"keywords": ["invoice"]}, "agent_id": agents["billing"]}],
                    "default_agent_id": agents["front"],
                },
            },
        )
        assert routed.status_code == 201, routed.text
        assert routed.json()["member_agent_ids"] == [agents["billing"], agents["front"]]
        bad = http.post(
            "/orchestrators",
            json={"name": "broken", "mode": "single", "config": {"agent_id": "no-such-agent"}},
        )
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "config.agent_id", bad.text

        session = http.post("/sessions", json={"orchestrator_id": routed.json()["id"]}).json()["id"]
        turn = ask(http, "Where is my invoice for March?", session_id=session)
        names = [name for name, _ in turn]
        assert names[:2] == ["started", "handoff"], turn
        assert turn[1][1]["to_agent_id"] == agents["billing"]
        assert turn[-1][1]["text"] == "Billing here: your invoice is on its way."
        turn = ask(http, "Who do I talk to about parking?", session_id=session)
        assert turn[1][1]["to_agent_id"] == agents["front"] and "default" in turn[1][1]["reason"]
        assert turn[-1][1]["text"] == "The front desk answers."

        # The orchestrator as an application of the OpenAI-compatible API, with a token of its own.
        app = http.post(
            "/applications",
            json={"name": "billing-api", "platform": "api_service", "orchestrator_id": routed.json()["id"]},
        )
        assert app.status_code == 201, app.text
        token = http.post(
            "/tokens", json={"name": "billing app", "role": "member", "application_id": app.json()["id"]}
        )
        assert token.status_code == 201, token.text
        bearer = {"authorization": f"Bearer {token.json()['token']}"}
        with httpx.Client(base_url=stack.gateway_url, timeout=TIMEOUT, headers=bearer) as openai:
            models = [m["id"] for m in openai.get("/v1/models").json()["data"]]
            assert models == ["billing-api"], models
            completion = openai.post(
                "/v1/chat/completions",
                json={
                    "model": "billing-api",
                    "messages": [{"role": "user", "content": "Is my invoice paid?"}],
                },
            )
            assert completion.status_code == 200, completion.text
            answer = completion.json()["choices"][0]["message"]["content"]
            assert answer == "Billing here: your invoice is on its way."
            other = openai.post(
                "/v1/chat/completions",
                json={"model": "knowsphere", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert other.status_code == 400 and other.json()["error"]["param"] == "model", other.text

        rag = http.post(
            "/orchestrators",
            json={"name": "handbook", "mode": "knowledge_base", "config": {"knowledge_base_ids": [kb_id]}},
        )
        assert rag.status_code == 201, rag.text
        session = http.post("/sessions", json={"orchestrator_id": rag.json()["id"]}).json()["id"]
        turn = ask(http, "How many days of annual leave do employees get?", session_id=session)
        names = [name for name, _ in turn]
        assert "tool_started" not in names and names[-1] == "completed", turn
        [intent] = [data for name, data in turn if name == "intent"]
        assert intent["route"] == "retrieve"
        final = turn[-1][1]
        assert final["text"] == "Employees get 27 days of paid leave [[c1]]."
        [cited] = final["citations"]
        assert cited["document_id"] == document_id and cited["file_name"] == "handbook.md"
        # The answer's request held the passage retrieval found, with the tool calls switched off.
        answer = [
            r.json
            for r in model_server.requests_to("/v1/chat/completions")
            if "Passages found" in json.dumps(r.json["messages"])
        ][-1]
        assert "27 days of paid annual leave" in json.dumps(answer["messages"])
        assert answer.get("tool_choice") == "none"
        orchestrator_id = rag.json()["id"]

    with client(stack, tenant()) as stranger:
        assert stranger.get(f"/orchestrators/{orchestrator_id}").status_code == 404
        assert stranger.post("/sessions", json={"orchestrator_id": orchestrator_id}).status_code == 404
        assert stranger.get("/orchestrators").json()["orchestrators"] == []


def team(request: Recorded) -> Reply:
    body = request.json
    decision = openai_decision("E", body)  # kb_search
    if decision is not None:
        return decision
    messages = body["messages"]
    system = json.dumps(messages[0]["content"])
    last = messages[-1]["role"]
    if "law expert" in system:
        if last == "tool":
            return openai_text_stream(["27 days a year [[c1]]."])
        return openai_tool_call_stream("doc_retrieval", {"query": "annual leave days"})
    if "expenses expert" in system:
        return openai_text_stream(["Taxis are paid after 22:00."])
    if "the editor" in system:
        return openai_text_stream(["Leave is 27 days [[c1]]; taxis are paid after 22:00."])
    if "the lead" in system:
        if last == "tool":
            return openai_text_stream(["Leave: 27 days a year [[c1]]."])
        return openai_tool_call_stream(
            "transfer_to_law", {"task": "How many leave days a year?"}, call_id="call_a"
        )
    raise AssertionError(system)


def test_a_supervisor_and_a_collaboration_answer_through_their_agents_with_citations(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", team)
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        agents = {}
        for name, prompt in (
            ("law", "You are the law expert."),
            ("expenses", "You are the expenses expert."),
            ("editor", "You are the editor."),
            ("lead", "You are the lead."),
        ):
            created = http.post(
                "/agents", json={"name": name, "system_prompt": prompt, "knowledge_base_ids": [kb_id]}
            )
            assert created.status_code == 201, created.text
            agents[name] = created.json()["id"]

        def session_for(name: str, mode: str, config: dict[str, Any]) -> str:
            made = http.post("/orchestrators", json={"name": name, "mode": mode, "config": config})
            assert made.status_code == 201, made.text
            return str(http.post("/sessions", json={"orchestrator_id": made.json()["id"]}).json()["id"])

        session = session_for(
            "desk", "supervisor", {"supervisor_agent_id": agents["lead"], "worker_agent_ids": [agents["law"]]}
        )
        turn = ask(http, "How much leave do I get?", session_id=session, knowledge_base_ids=[kb_id])
        handoffs = [(d["from_agent_id"], d["to_agent_id"]) for name, d in turn if name == "handoff"]
        assert handoffs == [(agents["lead"], agents["law"]), (agents["law"], agents["lead"])], turn
        assert [d["tool_call_id"] for name, d in turn if name == "tool_started"] == ["call_a-call_scripted"]
        final = turn[-1][1]
        assert turn[-1][0] == "completed" and final["text"] == "Leave: 27 days a year [[c1]].", turn
        assert [c["document_id"] for c in final["citations"]] == [document_id]

        session = session_for(
            "panel",
            "collaboration",
            {"agent_ids": [agents["law"], agents["expenses"]], "summary_agent_id": agents["editor"]},
        )
        turn = ask(http, "Leave days and taxi rules?", session_id=session, knowledge_base_ids=[kb_id])
        assert [d["to_agent_id"] for name, d in turn if name == "handoff"] == [
            agents["law"],
            agents["expenses"],
        ]
        final = turn[-1][1]
        assert turn[-1][0] == "completed", turn
        assert final["text"] == "Leave is 27 days [[c1]]; taxis are paid after 22:00."
        assert [c["document_id"] for c in final["citations"]] == [document_id]
        # The expenses expert saw the law expert's answer; the editor saw both.
        bodies = [json.dumps(r.json["messages"]) for r in model_server.requests_to("/v1/chat/completions")]
        assert any("expenses expert" in b and "[law] said:" in b and "27 days a year" in b for b in bodies)
        assert any(
            "the editor" in b and "[expenses]" in b and "Taxis are paid after 22:00." in b for b in bodies
        )


def flow(request: Recorded) -> Reply:
    body = request.json
    decision = openai_decision("E", body)
    if decision is not None:
        return decision
    system = json.dumps(body["messages"][0]["content"])
    if "You are triage" in system:
        return openai_text_stream(["a policy question"])
    if "You are the writer" in system:
        return openai_text_stream(["Employees get 27 days [[c1]]."])
    raise AssertionError(system)


def test_a_workflow_runs_a_retrieval_step_and_its_last_agent_answers_cited(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", flow)
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        ids = {}
        for name, prompt in (("triage", "You are triage."), ("writer", "You are the writer.")):
            ids[name] = http.post("/agents", json={"name": name, "system_prompt": prompt}).json()["id"]
        steps = [
            {
                "id": "classify",
                "kind": "agent",
                "agent_id": ids["triage"],
                "outputs": {"answer": "text"},
                "next": [
                    {"to": "lookup", "when": {"output": "answer", "contains": "policy"}},
                    {"to": "reply"},
                ],
            },
            {
                "id": "lookup",
                "kind": "tool",
                "tool_name": "doc_retrieval",
                "inputs": {"query": {"from": "turn.question"}},
                "outputs": {"result": "text"},
                "next": [{"to": "reply"}],
            },
            {
                "id": "reply",
                "kind": "agent",
                "agent_id": ids["writer"],
                "inputs": {
                    "question": {"from": "turn.question"},
                    "notes": {"from": "lookup.result", "optional": True},
                },
            },
        ]
        made = http.post(
            "/orchestrators", json={"name": "flow", "mode": "workflow", "config": {"steps": steps}}
        )
        assert made.status_code == 201, made.text
        broken = http.post(
            "/orchestrators",
            json={
                "name": "broken",
                "mode": "workflow",
                "config": {"steps": [{**steps[0], "next": [{"to": "x"}]}]},
            },
        )
        assert broken.status_code == 400 and broken.json()["error"]["field"] == "config.steps[0].next[0]"
        session = http.post("/sessions", json={"orchestrator_id": made.json()["id"]}).json()["id"]
        turn = ask(http, "How many days of annual leave?", session_id=session, knowledge_base_ids=[kb_id])
    steps_shown = [(name, d.get("tool_call_id")) for name, d in turn if name in ("handoff", "tool_finished")]
    assert steps_shown == [
        ("handoff", "w-classify-1"),
        ("tool_finished", "w-lookup-1"),
        ("handoff", "w-reply"),
    ]
    [finished] = [d for name, d in turn if name == "tool_finished"]
    assert finished["tool_ok"] is True
    final = turn[-1][1]
    assert turn[-1][0] == "completed" and final["text"] == "Employees get 27 days [[c1]].", turn
    assert [c["document_id"] for c in final["citations"]] == [document_id]
    writer = [
        r.json
        for r in model_server.requests_to("/v1/chat/completions")
        if "You are the writer" in json.dumps(r.json)
    ]
    assert "27 days of paid annual leave" in json.dumps(writer[-1]["messages"])


def handbook_desk(request: Recorded) -> Reply:
    body = request.json
    decision = openai_decision("E", body)  # kb_search
    if decision is not None:
        return decision
    question = json.dumps(body["messages"][-1]["content"])
    if "ten years" in question:
        return openai_text_stream(["After ten years it stays", " at 27 days [[c1]]."])
    if "Passages found in the knowledge bases" in json.dumps(body["messages"]):
        return openai_text_stream(["Employees get 27 days", " of paid leave [[c1]]."])
    return openai_text_stream(["The handbook does not say."])


def test_an_application_answers_as_an_a2a_agent_citing_its_sources_and_continues_its_context(
    stack: Any, model_server: ScriptedProvider
) -> None:
    """The a2a-sdk's client against the gateway: the card with a bearer token, a streamed cited
    answer, a follow-up in the same contextId that the model answers with the first turn in view;
    another tenant (and, in the stack's local mode, no token) gets 404, an unknown token 401, a
    switched-off application 404."""
    model_server.reset()
    model_server.respond("/v1/chat/completions", handbook_desk)
    with client(stack, tenant()) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        rag = http.post(
            "/orchestrators",
            json={
                "name": "handbook",
                "description": "Answers from the employee handbook.",
                "mode": "knowledge_base",
                "config": {"knowledge_base_ids": [kb_id]},
            },
        )
        assert rag.status_code == 201, rag.text
        made = {
            name: http.post(
                "/applications",
                json={"name": name, "platform": "api_service", "orchestrator_id": rag.json()["id"], **extra},
            )
            for name, extra in (("handbook-agent", {}), ("retired-agent", {"active": False}))
        }
        assert all(a.status_code == 201 for a in made.values()), {n: a.text for n, a in made.items()}
        agent_id, retired_id = (made[n].json()["id"] for n in ("handbook-agent", "retired-agent"))
        member = http.post("/tokens", json={"name": "a2a caller", "role": "member"})
        assert member.status_code == 201, member.text
    with client(stack, tenant()) as stranger:
        foreign = stranger.post("/tokens", json={"name": "stranger", "role": "member"}).json()["token"]
    agent_url = f"{stack.gateway_url}/a2a/{agent_id}"

    def question(text: str, context_id: str = "") -> SendMessageRequest:
        parts = [Part(text=text)]
        message = Message(
            role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id, parts=parts
        )
        return SendMessageRequest(message=message)

    async def converse() -> tuple[AgentCard, list[StreamResponse], list[StreamResponse]]:
        headers = {"authorization": f"Bearer {member.json()['token']}"}
        async with httpx.AsyncClient(headers=headers, timeout=TIMEOUT) as h:
            card = await A2ACardResolver(h, agent_url).get_agent_card()
            agent = ClientFactory(ClientConfig(httpx_client=h, streaming=True)).create(card)
            first = [e async for e in agent.send_message(question("How many days of annual leave?"))]
            context_id = first[-1].status_update.context_id
            again = question("And after ten years?", context_id)
            return card, first, [e async for e in agent.send_message(again)]

    card, first, second = asyncio.run(converse())

    assert card.name == "handbook-agent" and card.description == "Answers from the employee handbook."
    assert card.capabilities.streaming and card.supported_interfaces[0].url == agent_url
    assert list(card.security_requirements[0].schemes) == ["bearer"]
    streamed = [e.artifact_update for e in first if e.HasField("artifact_update")]
    assert len(streamed) >= 2 and streamed[-1].last_chunk  # pieces, then the whole answer
    done = first[-1].status_update
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(streamed[-1].artifact) == "Employees get 27 days of paid leave [[c1]]."
    [sources] = get_data_parts(list(done.status.message.parts))
    [cited] = sources["sources"]
    assert (cited["handle"], cited["document_id"], cited["knowledge_base_id"]) == ("c1", document_id, kb_id)
    assert cited["chunk_id"] and cited["title"]
    # The follow-up continued the same session: the model saw the first question and answer.
    again = second[-1].status_update
    assert again.context_id == done.context_id and again.status.state == TaskState.TASK_STATE_COMPLETED
    last = [
        r.json
        for r in model_server.requests_to("/v1/chat/completions")
        if "Passages found in the knowledge bases" in json.dumps(r.json["messages"])
    ][-1]
    assert "ten years" in json.dumps(last["messages"][-1])
    seen = json.dumps(last["messages"])
    assert "How many days of annual leave?" in seen and "Employees get 27 days of paid leave" in seen
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": again.task_id}}
    with httpx.Client(timeout=TIMEOUT) as plain:
        for token, url, status in (
            (foreign, agent_url, 404),
            # The stack's gateway is in local mode: no token is its local tenant, not the owner.
            (None, agent_url, 404),
            (member.json()["token"], f"{stack.gateway_url}/a2a/{retired_id}", 404),
            ("ks_not-a-token", agent_url, 401),
        ):
            headers = {"authorization": f"Bearer {token}"} if token else {}
            card_answer = plain.get(f"{url}/.well-known/agent-card.json", headers=headers)
            rpc_answer = plain.post(url, json=rpc, headers=headers)
            assert (card_answer.status_code, rpc_answer.status_code) == (status, status), rpc_answer.text


COUNTER_SKILL = {
    "SKILL.md": "---\ndescription: Counts the lines of the notes.\n---\nWrite notes.md, then run count.py.",
    "count.py": (
        "import os\n"
        "lines = open('/workspace/input/notes.md').read().splitlines()\n"
        "os.makedirs('/workspace/output', exist_ok=True)\n"
        "open('/workspace/output/count.txt', 'w').write(str(len(lines)))\n"
        "print(len(lines))\n"
    ),
}


def deep_scribe(request: Recorded) -> Reply:
    """A deep agent's steps: write notes, run the skill on them, answer; next turn, read the result."""
    body = request.json
    decision = openai_decision("E", body)
    if decision is not None:
        return decision
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    done = [m for m in messages[last_user:] if m["role"] == "tool"]
    if "count file" in json.dumps(messages[last_user]["content"]):
        if not done:
            return openai_tool_call_stream("workspace_read", {"path": "output/count.txt"}, call_id="call_r")
        return openai_text_stream(["The count file says ", done[-1]["content"].split("\t")[-1].strip()])
    if not done:
        notes = {"path": "notes.md", "content": "revenue up\ncosts flat\nhiring paused\n"}
        return openai_tool_call_stream("workspace_write", notes, call_id="call_w")
    if len(done) == 1:
        run = {"skill": "counter", "script": "count.py"}
        return openai_tool_call_stream("execute_skill_script", run, call_id="call_x")
    return openai_text_stream(
        ["Your notes have ", json.loads(done[-1]["content"])["stdout"].strip(), " lines."]
    )


def test_a_deep_agent_keeps_notes_in_its_workspace_and_its_skill_script_reads_them(
    stack: Any, model_server: ScriptedProvider
) -> None:
    from knowsphere_toolrunner.skills.store import SkillStore

    model_server.reset()
    model_server.respond("/v1/chat/completions", deep_scribe)
    owner = tenant()
    skills = SkillStore(stack.config.service_data_dir("toolrunner")).tenant_dir(owner["x-ks-tenant-id"])
    for relative, content in COUNTER_SKILL.items():
        (skills / "counter" / relative).parent.mkdir(parents=True, exist_ok=True)
        (skills / "counter" / relative).write_text(content)
    with client(stack, owner) as http:
        use_scripted_model(http, model_server)
        scribe = http.post(
            "/agents",
            json={"name": "scribe", "system_prompt": "You are the scribe.", "skill_names": ["counter"]},
        )
        assert scribe.status_code == 201, scribe.text
        made = http.post(
            "/orchestrators",
            json={"name": "deep", "mode": "deep_agent", "config": {"agent_id": scribe.json()["id"]}},
        )
        assert made.status_code == 201, made.text
        session = http.post("/sessions", json={"orchestrator_id": made.json()["id"]}).json()["id"]
        first = ask(http, "Note this week's points and count them", session_id=session)
        second = ask(http, "What does the count file say?", session_id=session)
    tools = [(d["tool_name"], d.get("tool_ok")) for name, d in first if name == "tool_finished"]
    assert tools == [("workspace_write", True), ("execute_skill_script", True)], first
    assert first[-1][0] == "completed" and first[-1][1]["text"] == "Your notes have 3 lines.", first
    # The next turn finds the script's output in the same session's workspace.
    assert [d["tool_name"] for name, d in second if name == "tool_finished"] == ["workspace_read"]
    assert second[-1][1]["text"] == "The count file says 3", second
    offered = {
        t["function"]["name"] for t in model_server.requests_to("/v1/chat/completions")[-1].json["tools"]
    }
    assert {"workspace_write", "workspace_read", "execute_skill_script", "write_plan"} <= offered


def test_an_external_orchestrator_relays_an_n8n_workflows_answer_through_the_gateway(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond(
        "/webhook/desk", lambda request: Reply(json={"output": "n8n says: 27 days of leave."})
    )
    owner = tenant()
    with client(stack, owner) as http:
        base_url = f"http://127.0.0.1:{model_server.port}/webhook/desk"
        made = http.post(
            "/orchestrators",
            json={
                "name": "n8n-desk",
                "mode": "external",
                "config": {"provider": "n8n", "base_url": base_url, "api_key": "Bearer n8n-secret-123456"},
            },
        )
        assert made.status_code == 201, made.text
        assert "n8n-secret" not in made.text  # the key is write-only
        metadata = http.post(
            "/orchestrators",
            json={
                "name": "meta",
                "mode": "external",
                "config": {"provider": "n8n", "base_url": "http://169.254.169.254/x"},
            },
        )
        session = http.post("/sessions", json={"orchestrator_id": made.json()["id"]}).json()["id"]
        turn = ask(http, "How many days of leave?", session_id=session)
        with client(stack, tenant()) as stranger:
            foreign = stranger.get(f"/orchestrators/{made.json()['id']}")
    assert metadata.status_code == 400 and metadata.json()["error"]["field"] == "config.base_url"
    assert turn[-1][0] == "completed" and turn[-1][1]["text"] == "n8n says: 27 days of leave.", turn
    [call] = model_server.requests_to("/webhook/desk")
    assert call.json["chatInput"] == "How many days of leave?" and call.json["sessionId"] == session
    assert call.headers.get("authorization") == "Bearer n8n-secret-123456"
    assert foreign.status_code == 404
