"""The OpenAI-compatible API (``/v1``) driven by the official ``openai`` client against the gateway's app.

The chat turn goes over FastStream's in-memory NATS broker to a stand-in for the conversation service
that answers with scripted turn events (the real conversation over real NATS is in
``tests/e2e/test_openai_api.py``); agents, knowledge bases and models come from tenant-scoped fakes on
real gRPC servers, through the real clients.

What a caller notices: ``model`` picks the caller's agent, the whole message history reaches the turn,
the answer keeps its ``[[cN]]`` markers and brings each cited source once as a ``url_citation``
annotation (streamed just before the chunk that first cites it), the final chunk lists the citations,
usage is the turn's; another tenant's agent or knowledge base is a 404 ``model_not_found``/``not_found``;
no token, a read-only token, and malformed or hostile requests are refused in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import grpc
import httpx
import httpx2
import openai
import pytest
from faststream.nats import NatsBroker, TestNatsBroker
from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere.ingestion.v1 import ingestion_pb2 as ipb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_contracts.events import (
    MAX_HISTORY_MESSAGES,
    MAX_IMAGE_REF_TOTAL_CHARS,
    MAX_MESSAGE_CHARS,
    ChatRequested,
    ChatTurnEvent,
    Citation,
    TurnEventKind,
)
from knowsphere_gateway.api.bus import build_bus
from knowsphere_gateway.domain.annotations import AnnotatedStream
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.streams import CHAT_REQUESTS

# Within one image's limit; two of them exceed what one message may carry.
BIG_IMAGE = "data:image/png;base64," + "A" * (MAX_IMAGE_REF_TOTAL_CHARS // 2)

ACME, GLOBEX = Identity("acme", "alice"), Identity("globex", "mallory")

LEGAL = cpb.Agent(
    id="agent-legal",
    name="legal",
    display_name="Legal desk",
    knowledge_base_ids=["kb-contracts"],
    active=True,
    create_time=Timestamp(seconds=1_700_000_000),
)
RETIRED = cpb.Agent(id="agent-old", name="retired", active=False)
HANDBOOK = Citation(
    handle="c1",
    chunk_id="chunk-7",
    document_id="doc-handbook",
    file_name="handbook.pdf",
    knowledge_base_id="kb-hr",
    page=4,
    heading_path=["Leave"],
    snippet="27 days of paid leave",
)
POLICY = Citation(
    handle="c2", chunk_id="chunk-9", document_id="doc-policy", knowledge_base_id="kb-hr", page=1
)
UNCITED = Citation(handle="c3", chunk_id="chunk-11", document_id="doc-other", knowledge_base_id="kb-hr")
ANSWER = ["Employees get 27 days", " of leave [[c1]]", " and carry it over [[c2]]", " until March [[c1]]."]


class Conversation:
    """The conversation service's agents: acme has ``legal`` (and a switched-off one); globex none."""

    agents: ClassVar = {ACME.tenant_id: [LEGAL, RETIRED], GLOBEX.tenant_id: []}

    async def GetAgent(self, request: cpb.GetAgentRequest, context: grpc.aio.ServicerContext) -> Any:
        for agent in self.agents[require_identity().tenant_id]:
            if agent.id == request.agent_id:
                return cpb.GetAgentResponse(agent=agent)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"agent {request.agent_id} not found")

    async def ListAgents(self, request: cpb.ListAgentsRequest, context: grpc.aio.ServicerContext) -> Any:
        return cpb.ListAgentsResponse(agents=self.agents[require_identity().tenant_id])

    cancelled: ClassVar[list[tuple[str, str]]] = []

    async def CancelTurn(self, request: cpb.CancelTurnRequest, context: grpc.aio.ServicerContext) -> Any:
        self.cancelled.append((require_identity().tenant_id, request.turn_id))
        return cpb.CancelTurnResponse(cancelled=True)


class Ingestion:
    kbs: ClassVar = {ACME.tenant_id: ["kb-contracts", "kb-hr"], GLOBEX.tenant_id: ["kb-globex"]}

    async def GetKnowledgeBase(self, request: ipb.GetKnowledgeBaseRequest, context: Any) -> Any:
        if request.knowledge_base_id not in self.kbs[require_identity().tenant_id]:
            await context.abort(grpc.StatusCode.NOT_FOUND, "knowledge base not found")
        return ipb.GetKnowledgeBaseResponse(knowledge_base=ipb.KnowledgeBase(id=request.knowledge_base_id))

    async def ListKnowledgeBases(self, request: ipb.ListKnowledgeBasesRequest, context: Any) -> Any:
        kbs = [ipb.KnowledgeBase(id=kb) for kb in self.kbs[require_identity().tenant_id]]
        return ipb.ListKnowledgeBasesResponse(knowledge_bases=kbs)


class ModelHub:
    def __init__(self) -> None:
        self.embedded: list[tuple[str, list[str]]] = []

    async def ListModels(self, request: mpb.ListModelsRequest, context: Any) -> Any:
        model = mpb.Model(id="model-bge", model_name="bge-small-zh", display_name="BGE small")
        return mpb.ListModelsResponse(models=[model])

    async def Embed(self, request: mpb.EmbedRequest, context: Any) -> Any:
        self.embedded.append((request.model_id, list(request.texts)))
        vectors = [mpb.Embedding(values=[0.5, -0.25, float(len(t))]) for t in request.texts]
        tokens = sum(len(t.split()) + 2 for t in request.texts)  # a stand-in's count: words + 2 per text
        return mpb.EmbedResponse(
            embeddings=vectors,
            model_id=request.model_id or "model-default",
            dimension=3,
            usage=mpb.TokenUsage(prompt_tokens=tokens, total_tokens=tokens),
        )


Script = Callable[[ChatRequested], list[ChatTurnEvent]]


def cited_answer(request: ChatRequested) -> list[ChatTurnEvent]:
    """Sources, the answer in deltas citing c1 twice and c2 once, then the completed event."""
    events: list[dict[str, Any]] = [
        {"kind": TurnEventKind.STARTED},
        {"kind": TurnEventKind.SOURCES, "citations": [HANDBOOK, POLICY, UNCITED]},
        *({"kind": TurnEventKind.TEXT_DELTA, "text": piece} for piece in ANSWER),
        {
            "kind": TurnEventKind.COMPLETED,
            "text": "".join(ANSWER),
            "citations": [HANDBOOK, POLICY],
            "prompt_tokens": 812,
            "completion_tokens": 31,
        },
    ]
    return [ChatTurnEvent(turn_id=request.turn_id, sequence=n, **e) for n, e in enumerate(events)]


def failing(code: str, message: str) -> Script:
    def script(request: ChatRequested) -> list[ChatTurnEvent]:
        return [
            ChatTurnEvent(turn_id=request.turn_id, sequence=0, kind=TurnEventKind.STARTED),
            ChatTurnEvent(
                turn_id=request.turn_id,
                sequence=1,
                kind=TurnEventKind.ERROR,
                error_code=code,
                error_message=message,
            ),
        ]

    return script


def never_finishing(request: ChatRequested) -> list[ChatTurnEvent]:
    """A turn that starts answering and then goes on for a long time (a slow model)."""
    return [
        ChatTurnEvent(turn_id=request.turn_id, sequence=0, kind=TurnEventKind.STARTED),
        ChatTurnEvent(turn_id=request.turn_id, sequence=1, kind=TurnEventKind.TEXT_DELTA, text="Once upon"),
    ]


@dataclass
class Heard:
    """What the conversation stand-in received: each request with its asker's tenant."""

    requests: list[tuple[str, ChatRequested]] = field(default_factory=list)


@dataclass
class Api:
    app: Any
    tokens: dict[str, str]
    heard: Heard
    modelhub: ModelHub

    def client(self, who: str = "acme", **options: Any) -> openai.AsyncOpenAI:
        # The client's own HTTP library (httpx2), in-process to the app.
        transport = httpx2.ASGITransport(app=self.app)
        return openai.AsyncOpenAI(
            api_key=self.tokens[who],
            base_url="http://gateway/v1",
            http_client=httpx2.AsyncClient(transport=transport),
            max_retries=0,
            **options,
        )

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://gateway")


@asynccontextmanager
async def api_of(gateway: Any, tokens: TokenService, script: Script = cited_answer) -> AsyncIterator[Api]:
    broker: NatsBroker = build_broker("nats://unused:4222", client_name="test")
    events: Fanout[ChatTurnEvent] = Fanout()
    bus = build_bus(events)
    broker.include_router(bus.router)
    heard = Heard()

    @broker.subscriber(ChatRequested.subject, stream=CHAT_REQUESTS)
    async def conversation(request: ChatRequested) -> None:
        heard.requests.append((require_identity().tenant_id, request))
        for event in script(request):
            await broker.publish(
                event.model_dump(mode="json"),
                subject=ChatTurnEvent.subject_for(require_identity().tenant_id, event.turn_id),
            )

    modelhub = ModelHub()
    async with TestNatsBroker(broker):
        app = await gateway(
            conversation=Conversation(),
            ingestion=Ingestion(),
            modelhub=modelhub,
            bus=bus,
            chat_events=events,
            local_identity=None,
            chat_turn_timeout=2.0,
        )
        day = timedelta(days=1)
        issued = {
            "acme": (await tokens.issue(ACME, Role.MEMBER, name="app", ttl=day)).token,
            "acme-reader": (await tokens.issue(ACME, Role.READ_ONLY, name="reader", ttl=day)).token,
            "globex": (await tokens.issue(GLOBEX, Role.ADMIN, name="globex", ttl=day)).token,
        }
        yield Api(app, issued, heard, modelhub)


CONVERSATION: list[Any] = [
    {"role": "system", "content": "You are a pirate."},
    {"role": "user", "content": "How many days of leave do I get?"},
    {"role": "assistant", "content": "25 days."},
    {"role": "user", "content": [{"type": "text", "text": "And after ten years?"}]},
]


async def test_a_completion_answers_with_the_named_agent_cites_its_sources_and_reports_usage(
    gateway: Any, tokens: TokenService
) -> None:
    async with api_of(gateway, tokens) as api:
        completion = await api.client().chat.completions.create(
            model="legal", messages=CONVERSATION, extra_body={"knowledge_base_ids": ["kb-hr"]}
        )
    [(tenant, request)] = api.heard.requests
    assert tenant == "acme"
    assert request.agent_id == "agent-legal" and request.message == "And after ten years?"
    # The history before the question, without the system message (the agent's instructions apply).
    assert [(m.role, m.content) for m in request.history] == [
        ("user", "How many days of leave do I get?"),
        ("assistant", "25 days."),
    ]
    assert request.knowledge_base_ids == ["kb-contracts", "kb-hr"]  # the agent's, then the extra one

    message = completion.choices[0].message
    assert message.content == "".join(ANSWER)  # the markers stay in the text
    assert completion.choices[0].finish_reason == "stop" and completion.model == "legal"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (812, 31)
    assert completion.usage.total_tokens == 843
    annotations = message.annotations or []
    assert [a.type for a in annotations] == ["url_citation", "url_citation"]
    first = annotations[0].url_citation.model_dump()
    assert message.content[first["start_index"] : first["end_index"]] == "[[c1]]"
    assert first["url"] == "http://gateway/api/v1/documents/doc-handbook" and first["title"] == "handbook.pdf"
    assert (first["document_id"], first["chunk_id"], first["knowledge_base_id"], first["page"]) == (
        "doc-handbook",
        "chunk-7",
        "kb-hr",
        4,
    )
    citations = (completion.model_extra or {})["citations"]
    assert [(c["handle"], c["document_id"]) for c in citations] == [
        ("c1", "doc-handbook"),
        ("c2", "doc-policy"),
    ]


async def test_a_stream_sends_each_source_once_just_before_the_chunk_that_first_cites_it(
    gateway: Any, tokens: TokenService
) -> None:
    async with api_of(gateway, tokens) as api:
        stream = await api.client().chat.completions.create(
            model="knowsphere", messages=CONVERSATION, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    [(_, request)] = api.heard.requests
    assert request.agent_id == ""  # the default agent
    assert request.knowledge_base_ids == ["kb-contracts", "kb-hr"]  # with none named: the tenant's

    content = ""
    announced: list[tuple[str, int, str]] = []  # (handle, where in the content, the chunk after it)
    for index, chunk in enumerate(chunks):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for annotation in (delta.model_extra or {}).get("annotations") or []:
            citation = annotation["url_citation"]
            following = chunks[index + 1].choices[0].delta.content or ""
            announced.append((citation["handle"], citation["start_index"], following))
        content += delta.content or ""
    assert content == "".join(ANSWER)
    # c1 once, though cited twice; c2 once; the uncited c3 never.
    assert [handle for handle, _, _ in announced] == ["c1", "c2"]
    for handle, start, following in announced:
        assert content[start : start + len(handle) + 4] == f"[[{handle}]]"
        assert f"[[{handle}]]" in following  # the very next chunk is the one that first cites it
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert [c["handle"] for c in (finish.model_extra or {})["citations"]] == ["c1", "c2"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.total_tokens == 843
    assert [c["handle"] for c in (last.model_extra or {})["citations"]] == ["c1", "c2"]
    assert len({c.id for c in chunks}) == 1 and chunks[0].choices[0].delta.role == "assistant"


async def test_a_plain_client_reading_only_the_text_gets_the_whole_answer(
    gateway: Any, tokens: TokenService
) -> None:
    async with api_of(gateway, tokens) as api, api.http() as http:
        response = await http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {api.tokens['acme']}"},
            json={"model": "legal", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in response.text.splitlines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "".join(ANSWER)
    assert [c["choices"][0]["finish_reason"] for c in chunks].count("stop") == 1


def test_a_marker_split_across_deltas_is_announced_before_the_chunk_that_completes_it() -> None:
    stream = AnnotatedStream(lambda source: f"/documents/{source.document_id}")
    stream.add_sources([HANDBOOK])
    first = stream.feed("27 days [[c")
    second = stream.feed("1]] of leave")
    assert [(p.content, p.annotations) for p in first] == [("27 days ", [])]
    [piece] = second
    assert piece.content == "[[c1]] of leave"
    [annotation] = piece.annotations
    assert (annotation["url_citation"]["start_index"], annotation["url_citation"]["end_index"]) == (8, 14)
    assert stream.feed(" [[c1]]")[0].annotations == []  # once
    assert "".join(p.content for p in stream.feed(" [[c") + stream.flush()) == " [[c"  # never lost


async def test_another_tenants_agent_or_knowledge_base_does_not_exist_for_the_caller(
    gateway: Any, tokens: TokenService
) -> None:
    async with api_of(gateway, tokens) as api:
        client = api.client("globex")
        question: list[Any] = [{"role": "user", "content": "What do the contracts say?"}]
        for model in ("legal", "agent-legal"):  # acme's agent by name and by id
            with pytest.raises(openai.NotFoundError) as refused:
                await client.chat.completions.create(model=model, messages=question)
            error = refused.value.body
            assert isinstance(error, dict)
            assert (error["code"], error["param"], error["type"]) == (
                "model_not_found",
                "model",
                "invalid_request_error",
            )
        with pytest.raises(openai.NotFoundError) as refused:
            await client.chat.completions.create(
                model="knowsphere", messages=question, extra_body={"knowledge_base_ids": ["kb-hr"]}
            )
        assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "knowledge_base_ids"
        with pytest.raises(openai.NotFoundError):  # switched off, in acme itself
            await api.client().chat.completions.create(model="retired", messages=question)
        models = await client.models.list()
    assert [m.id for m in models.data] == ["knowsphere"]  # globex sees none of acme's agents
    assert api.heard.requests == []  # nothing was asked


async def test_no_token_or_a_read_only_token_is_refused_in_openais_shape(
    gateway: Any, tokens: TokenService
) -> None:
    body = {"model": "legal", "messages": [{"role": "user", "content": "hi"}]}
    async with api_of(gateway, tokens) as api, api.http() as http:
        anonymous = await http.post("/v1/chat/completions", json=body)
        forged = await http.get("/v1/models", headers={"authorization": "Bearer ks_forged"})
        reader = {"authorization": f"Bearer {api.tokens['acme-reader']}"}
        read_only = await http.post("/v1/chat/completions", json=body, headers=reader)
        models = await http.get("/v1/models", headers=reader)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    assert anonymous.json()["error"]["type"] == "authentication_error"
    assert set(anonymous.json()["error"]) == {"message", "type", "code", "param"}
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "unauthenticated"
    assert read_only.status_code == 403 and read_only.json()["error"]["type"] == "permission_error"
    assert "member" in read_only.json()["error"]["message"]
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == ["knowsphere", "legal"]  # not the switched-off one
    assert api.heard.requests == []


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "model", "Field required"),
        ({"model": "legal", "messages": []}, "messages", "at least 1"),
        (
            {"model": "legal", "messages": [{"role": "assistant", "content": "hi"}]},
            "messages[0].role",
            "last",
        ),
        (
            {
                "model": "legal",
                "messages": [{"role": "tool", "content": "{}"}, {"role": "user", "content": "x"}],
            },
            "messages[0].role",
            "Input should be",
        ),
        (
            {"model": "legal", "messages": [{"role": "user", "content": "x" * (MAX_MESSAGE_CHARS + 1)}]},
            "messages[0].content",
            f"at most {MAX_MESSAGE_CHARS}",
        ),
        ({"model": "legal", "messages": [{"role": "user", "content": "  "}]}, "messages[0]", "empty"),
        (
            {"model": "legal", "messages": [{"role": "user", "content": "x"}], "tempreature": 1},
            "tempreature",
            "",
        ),
        ({"model": "legal", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "1"),
        (
            {
                "model": "legal",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}],
            },
            "tools",
            "not supported",
        ),
        (
            {
                "model": "legal",
                "messages": [{"role": "user", "content": "x"}],
                "knowledge_base_ids": [f"kb-{n}" for n in range(21)],
            },
            "knowledge_base_ids",
            "20",
        ),
        (
            {
                "model": "legal",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "what is this?"},
                            *[{"type": "image_url", "image_url": {"url": BIG_IMAGE}}] * 2,
                        ],
                    }
                ],
            },
            "messages[0].content",
            f"at most {MAX_IMAGE_REF_TOTAL_CHARS} in all",
        ),
    ],
)
async def test_a_malformed_request_is_a_400_naming_the_field(
    gateway: Any, tokens: TokenService, body: dict[str, Any], param: str, words: str
) -> None:
    async with api_of(gateway, tokens) as api, api.http() as http:
        response = await http.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {api.tokens['acme']}"}
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert words in error["message"] and param.split("[")[0] in error["message"]
    assert api.heard.requests == []


async def test_a_long_conversation_brings_its_newest_messages_within_the_limit(
    gateway: Any, tokens: TokenService
) -> None:
    turns = MAX_HISTORY_MESSAGES  # twice as many messages as travel
    messages: list[Any] = [
        {"role": role, "content": f"{role} {n}"} for n in range(turns) for role in ("user", "assistant")
    ] + [{"role": "user", "content": "the question"}]
    async with api_of(gateway, tokens) as api:
        await api.client().chat.completions.create(model="legal", messages=messages)
    [(_, request)] = api.heard.requests
    assert len(request.history) == MAX_HISTORY_MESSAGES
    assert request.history[-1].content == f"assistant {turns - 1}"  # the newest, in order
    assert request.history[0].content == f"user {turns - MAX_HISTORY_MESSAGES // 2}"


async def test_a_turn_that_fails_is_an_openai_error_streamed_or_not(
    gateway: Any, tokens: TokenService
) -> None:
    question: list[Any] = [{"role": "user", "content": "hi"}]
    async with api_of(gateway, tokens, failing("rate_limited", "the model is busy; try again")) as api:
        client = api.client()
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(model="legal", messages=question)
        assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "rate_limited"
        stream: Any = await client.chat.completions.create(model="legal", messages=question, stream=True)
        with pytest.raises(openai.APIError, match="the model is busy"):
            async for _ in stream:
                pass


async def test_a_client_that_stops_reading_a_stream_cancels_its_turn(
    gateway: Any, tokens: TokenService, listening: Any
) -> None:
    Conversation.cancelled.clear()
    async with api_of(gateway, tokens, never_finishing) as api, listening(api.app) as (host, port):
        client = openai.AsyncOpenAI(
            api_key=api.tokens["acme"], base_url=f"http://{host}:{port}/v1", max_retries=0
        )
        stream = await client.chat.completions.create(
            model="knowsphere", messages=[{"role": "user", "content": "Tell me a story"}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break  # the first words arrived; the user closes the window
        await stream.close()
        await client.close()
        (asked,) = api.heard.requests
        for _ in range(50):
            if Conversation.cancelled:
                break
            await asyncio.sleep(0.05)
        # Cancelled as its asker, before the turn's own timeout (2 s here) would have ended it.
        assert Conversation.cancelled == [(ACME.tenant_id, asked[1].turn_id)]


async def test_a_finished_answer_cancels_nothing(gateway: Any, tokens: TokenService) -> None:
    Conversation.cancelled.clear()
    async with api_of(gateway, tokens) as api:
        async with api.client() as client:
            await client.chat.completions.create(
                model="knowsphere", messages=[{"role": "user", "content": "How many days of leave?"}]
            )
        await asyncio.sleep(0.2)
    assert Conversation.cancelled == []


async def test_models_list_the_default_and_the_tenants_active_agents(
    gateway: Any, tokens: TokenService
) -> None:
    async with api_of(gateway, tokens) as api:
        models = await api.client().models.list()
    assert [(m.id, m.object, m.owned_by) for m in models.data] == [
        ("knowsphere", "model", "knowsphere"),
        ("legal", "model", "acme"),
    ]
    legal = models.data[1]
    assert legal.created == 1_700_000_000 and (legal.model_extra or {})["agent_id"] == "agent-legal"


async def test_embeddings_come_from_modelhub_as_floats_or_base64(gateway: Any, tokens: TokenService) -> None:
    async with api_of(gateway, tokens) as api:
        client = api.client()
        # The client asks for base64 unless told otherwise, and decodes it.
        default = await client.embeddings.create(model="default", input=["leave", "expenses!"])
        named = await client.embeddings.create(model="bge-small-zh", input="hi", encoding_format="float")
        with pytest.raises(openai.NotFoundError):
            await client.embeddings.create(model="no-such-model", input="hi")
        with pytest.raises(openai.BadRequestError, match="input"):
            await client.embeddings.create(model="default", input=[[1, 2, 3]])
        with pytest.raises(openai.BadRequestError, match="dimensions"):
            await client.embeddings.create(model="default", input="hi", dimensions=1024)
        async with api.http() as http:
            raw = await http.post(
                "/v1/embeddings",
                json={"model": "default", "input": "hi", "encoding_format": "base64"},
                headers={"authorization": f"Bearer {api.tokens['acme']}"},
            )
    assert [d.embedding for d in default.data] == [[0.5, -0.25, 5.0], [0.5, -0.25, 9.0]]
    assert [d.index for d in default.data] == [0, 1] and default.model == "default"
    assert named.data[0].embedding == [0.5, -0.25, 2.0]
    # Usage is what modelhub counted for the call.
    assert (default.usage.prompt_tokens, default.usage.total_tokens) == (6, 6)
    assert named.usage.prompt_tokens == 3
    assert api.modelhub.embedded[:2] == [("", ["leave", "expenses!"]), ("model-bge", ["hi"])]
    packed = base64.b64decode(raw.json()["data"][0]["embedding"])
    assert struct.unpack("<3f", packed) == (0.5, -0.25, 2.0)


async def test_the_openapi_document_declares_openais_error_shape_on_every_v1_route(
    gateway: Any, tokens: TokenService
) -> None:
    async with api_of(gateway, tokens) as api:
        document = api.app.openapi()
    error = {"$ref": "#/components/schemas/OpenAIError"}
    for path, method in (("/v1/chat/completions", "post"), ("/v1/models", "get"), ("/v1/embeddings", "post")):
        responses = document["paths"][path][method]["responses"]
        for status in ("400", "401", "403", "404", "default"):
            assert responses[status]["content"]["application/json"]["schema"] == error, (path, status)
        assert "422" not in responses
    chat = document["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert chat["application/json"]["schema"] == {"$ref": "#/components/schemas/ChatCompletion"}
    chunk = chat["text/event-stream"]["schema"]
    assert "$ref" not in json.dumps(chunk) and "annotations" in json.dumps(chunk)
