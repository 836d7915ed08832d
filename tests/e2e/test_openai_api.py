"""The OpenAI-compatible API of a running stack, driven by the official ``openai`` package: gateway →
NATS → conversation → modelhub / toolrunner / retrieval, with an API token as the client's key.

The chat model is the scripted OpenAI-compatible server registered in modelhub as the tenant's
default; it searches the handbook with the retrieval tool and answers citing it with ``[[c1]]``. The
tenant and its agent are made as an operator would: the agent over gRPC, the key through
``/api/v1/tokens``. Each test uses a tenant of its own.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel

from .test_conversation import client, ready_kb, tenant, use_scripted_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import Recorded, Reply, ScriptedProvider, openai_decision, openai_tool_call_stream

pytestmark = pytest.mark.e2e

ANSWER = ["Employees get 27 days", " of paid leave a year [[c1]]", " and may carry it over [[c1]]."]
USAGE = {"prompt_tokens": 640, "completion_tokens": 18, "total_tokens": 658}


def cited_answer_with_usage() -> Reply:
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000}
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in ANSWER
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**base, "choices": [], "usage": USAGE})
    return Reply.sse_data(chunks)


def search_then_cite(request: Recorded) -> Reply:
    body = request.json
    decision = openai_decision("E", body)  # kb_search
    if decision is not None:
        return decision
    if body["messages"][-1]["role"] == "tool":
        return cited_answer_with_usage()
    return openai_tool_call_stream("doc_retrieval", {"query": "annual leave days"})


def create_agent(stack: Any, headers: dict[str, str], kb_id: str) -> cpb.Agent:
    caller = Identity(headers["x-ks-tenant-id"], headers["x-ks-user-id"])

    async def create() -> cpb.Agent:
        contract = CONTRACTS["conversation"]
        async with open_channel(stack.grpc_addr("conversation"), services=[contract.descriptor]) as channel:
            with bound_identity(caller):
                created = await contract.stub(channel).CreateAgent(
                    cpb.CreateAgentRequest(
                        name="hr-desk",
                        display_name="HR desk",
                        system_prompt="You answer questions about the employee handbook.",
                        knowledge_base_ids=[kb_id],
                        active=True,
                    )
                )
        agent: cpb.Agent = created.agent
        return agent

    return asyncio.run(create())


def api_key(http: httpx.Client) -> str:
    created = http.post("/tokens", json={"name": "openai-client", "role": "member"})
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


def openai_client(stack: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, timeout=120.0, max_retries=0)


CONVERSATION: list[Any] = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Who decides about leave?"},
    {"role": "assistant", "content": "Your manager approves leave requests."},
    {"role": "user", "content": "How many days of annual leave do employees get?"},
]


def test_the_official_client_gets_a_cited_answer_with_usage_from_an_agent(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", search_then_cite)
    headers = tenant()
    with client(stack, headers) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        key = api_key(http)
    agent = create_agent(stack, headers, kb_id)
    with openai_client(stack, key) as ai:
        assert [m.id for m in ai.models.list().data] == ["knowsphere", "hr-desk"]
        completion = ai.chat.completions.create(model="hr-desk", messages=CONVERSATION)
        again = ai.chat.completions.create(model=agent.id, messages=CONVERSATION[-1:])
    message = completion.choices[0].message
    assert message.content == "".join(ANSWER)
    [annotation] = message.annotations or []
    cited = annotation.url_citation.model_dump()
    assert (cited["document_id"], cited["knowledge_base_id"], cited["file_name"]) == (
        document_id,
        kb_id,
        "handbook.md",
    )
    assert message.content[cited["start_index"] : cited["end_index"]] == "[[c1]]"
    assert cited["url"].endswith(f"/api/v1/documents/{document_id}")
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (640, 18)
    [listed] = (completion.model_extra or {})["citations"]
    assert listed["document_id"] == document_id and listed["chunk_id"] == cited["chunk_id"]
    assert again.choices[0].message.content == "".join(ANSWER)  # the agent's id names it too
    # The model saw the agent's instructions and the conversation's earlier turn.
    answering = next(
        r.json
        for r in model_server.requests_to("/v1/chat/completions")
        if r.json["messages"][-1]["role"] == "tool"
    )
    said = json.dumps(answering["messages"], ensure_ascii=False)
    assert "employee handbook" in said and "Your manager approves leave requests." in said
    assert "Answer briefly." not in said


def test_a_streamed_answer_announces_its_source_before_the_chunk_that_cites_it(
    stack: Any, model_server: ScriptedProvider
) -> None:
    model_server.reset()
    model_server.respond("/v1/chat/completions", search_then_cite)
    headers = tenant()
    with client(stack, headers) as http:
        use_scripted_model(http, model_server)
        kb_id, document_id = ready_kb(http)
        key = api_key(http)
    with openai_client(stack, key) as ai:
        stream = ai.chat.completions.create(
            model="knowsphere",
            messages=CONVERSATION,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"knowledge_base_ids": [kb_id]},
        )
        chunks = list(stream)
    content, announced = "", []
    for index, chunk in enumerate(chunks):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for annotation in (delta.model_extra or {}).get("annotations") or []:
            following = chunks[index + 1].choices[0].delta.content or ""
            announced.append((annotation["url_citation"], following))
        content += delta.content or ""
    assert content == "".join(ANSWER)
    [(cited, following)] = announced  # once, though cited twice
    assert cited["document_id"] == document_id and "[[c1]]" in following
    assert content[cited["start_index"] : cited["end_index"]] == "[[c1]]"
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert [c["document_id"] for c in (finish.model_extra or {})["citations"]] == [document_id]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 658


def test_another_tenants_agent_is_not_found_and_no_key_is_unauthorized(stack: Any) -> None:
    owner = tenant()
    with client(stack, owner) as http:
        kb_id, _ = ready_kb(http)
    agent = create_agent(stack, owner, kb_id)
    with client(stack, tenant()) as http:
        stranger_key = api_key(http)
    question: list[Any] = [{"role": "user", "content": "How many days of annual leave do employees get?"}]
    with openai_client(stack, stranger_key) as ai:
        for model in (agent.id, agent.name):
            with pytest.raises(openai.NotFoundError) as refused:
                ai.chat.completions.create(model=model, messages=question)
            assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            ai.chat.completions.create(
                model="knowsphere", messages=question, extra_body={"knowledge_base_ids": [kb_id]}
            )
    with openai_client(stack, "ks_not-a-real-token") as ai, pytest.raises(openai.AuthenticationError):
        ai.models.list()


def test_embeddings_from_the_builtin_model_report_the_tokens_it_read(stack: Any) -> None:
    with client(stack, tenant()) as http:
        key = api_key(http)
    with openai_client(stack, key) as ai:
        short = ai.embeddings.create(model="default", input="annual leave", encoding_format="float")
        longer = ai.embeddings.create(
            model="default",
            input=["annual leave", "employees get twenty-five days of annual leave each calendar year"],
            encoding_format="float",
        )
    assert len(short.data[0].embedding) == 384
    # The counts are the local model's: its word pieces plus the special tokens, per text.
    assert short.usage.prompt_tokens > 2
    assert longer.usage.prompt_tokens > 2 * short.usage.prompt_tokens
    assert longer.usage.total_tokens == longer.usage.prompt_tokens
