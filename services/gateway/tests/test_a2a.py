"""Every application as an A2A agent (``/a2a/{application_id}``), driven by the ``a2a-sdk``'s own client
against the gateway on a real loopback socket.

The turn goes over FastStream's in-memory NATS broker to a stand-in for the conversation service that
answers with scripted turn events; sessions, orchestrators and cancels come from a fake conversation
service on a real gRPC server that scopes sessions to their tenant and user, as the real one does
(the real conversation over real NATS is in ``tests/e2e/test_orchestration.py``).

What a caller notices: the card names the application and its endpoint; a streamed answer arrives in
pieces, ends ``completed`` with the whole answer and its sources; a follow-up in the same ``contextId``
continues the same session, and no other tenant's context can be named; another tenant, an
application's token for another application, a switched-off or unknown application all get the same
404, no token a 401; a failed turn fails the task with the turn's message; ``tasks/cancel`` cancels the
turn; the application's rate limit counts every call to its agent.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import AgentCardResolutionError, Client, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_data_parts, get_message_text
from a2a.server.context import ServerCallContext
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.types import Role as A2ARole
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from faststream.nats import NatsBroker, TestNatsBroker

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, Citation, TurnEventKind
from knowsphere_gateway.adapters.a2a_tasks import BoundedTaskStore
from knowsphere_gateway.adapters.applications_sql import SqlApplicationStore
from knowsphere_gateway.api.a2a_turns import ApplicationCall
from knowsphere_gateway.api.bus import build_bus
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.domain.applications import ApplicationRecord, Platform
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.streams import CHAT_REQUESTS

ACME, ACME_BOB, GLOBEX = Identity("acme", "alice"), Identity("acme", "bob"), Identity("globex", "mallory")
HANDBOOK = Citation(
    handle="c1",
    chunk_id="chunk-7",
    document_id="doc-handbook",
    file_name="handbook.pdf",
    knowledge_base_id="kb-hr",
    page=4,
    title="Employee handbook",
)
POLICY = Citation(handle="c2", chunk_id="chunk-9", document_id="doc-policy", knowledge_base_id="kb-hr")
ANSWER = ["Employees get 27 days", " of leave [[c", "1]] and carry it over [[c2]]."]


class Conversation:
    """Sessions scoped to their tenant and user, acme's orchestrators, and the cancels it was asked."""

    def __init__(self) -> None:
        self.sessions: dict[str, tuple[Identity, cpb.Session]] = {}
        self.cancelled: list[tuple[str, str]] = []

    async def CreateSession(self, request: cpb.CreateSessionRequest, context: Any) -> Any:
        session = cpb.Session(
            id=f"session-{len(self.sessions) + 1}",
            orchestrator_id=request.orchestrator_id,
            application_id=request.application_id,
            metadata=request.metadata,
        )
        self.sessions[session.id] = (require_identity(), session)
        return cpb.CreateSessionResponse(session=session)

    async def GetSession(self, request: cpb.GetSessionRequest, context: grpc.aio.ServicerContext) -> Any:
        found = self.sessions.get(request.session_id)
        who = require_identity()
        if found is None or (found[0].tenant_id, found[0].user_id) != (who.tenant_id, who.user_id):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"session {request.session_id} not found")
        assert found is not None
        return cpb.GetSessionResponse(session=found[1])

    async def GetOrchestrator(
        self, request: cpb.GetOrchestratorRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        if require_identity().tenant_id != ACME.tenant_id or request.orchestrator_id != "orch-hr":
            await context.abort(grpc.StatusCode.NOT_FOUND, "orchestrator not found")
        description = "Answers HR questions from the handbook."
        return cpb.GetOrchestratorResponse(
            orchestrator=cpb.Orchestrator(id="orch-hr", name="hr", description=description)
        )

    async def CancelTurn(self, request: cpb.CancelTurnRequest, context: Any) -> Any:
        self.cancelled.append((require_identity().tenant_id, request.turn_id))
        return cpb.CancelTurnResponse(cancelled=True)


Script = Callable[[ChatRequested], list[ChatTurnEvent]]


def cited_answer(request: ChatRequested) -> list[ChatTurnEvent]:
    events: list[dict[str, Any]] = [
        {"kind": TurnEventKind.STARTED},
        {"kind": TurnEventKind.SOURCES, "citations": [HANDBOOK, POLICY]},
        *({"kind": TurnEventKind.TEXT_DELTA, "text": piece} for piece in ANSWER),
        {"kind": TurnEventKind.COMPLETED, "text": "".join(ANSWER), "citations": [HANDBOOK, POLICY]},
    ]
    return [ChatTurnEvent(turn_id=request.turn_id, sequence=n, **e) for n, e in enumerate(events)]


def failing(request: ChatRequested) -> list[ChatTurnEvent]:
    return [
        ChatTurnEvent(turn_id=request.turn_id, sequence=0, kind=TurnEventKind.STARTED),
        ChatTurnEvent(
            turn_id=request.turn_id,
            sequence=1,
            kind=TurnEventKind.ERROR,
            error_code="rate_limited",
            error_message="The model is busy right now; please try again in a minute.",
        ),
    ]


def never_finishing(request: ChatRequested) -> list[ChatTurnEvent]:
    return [
        ChatTurnEvent(turn_id=request.turn_id, sequence=0, kind=TurnEventKind.STARTED),
        ChatTurnEvent(turn_id=request.turn_id, sequence=1, kind=TurnEventKind.TEXT_DELTA, text="Once upon"),
    ]


@dataclass
class Agents:
    """The gateway on a socket, its tenants' tokens, and what the conversation stand-ins heard."""

    base_url: str
    tokens: dict[str, str]
    applications: dict[str, ApplicationRecord]
    conversation: Conversation
    heard: list[tuple[str, ChatRequested]] = field(default_factory=list)

    def url(self, application: str) -> str:
        return f"{self.base_url}/a2a/{self.applications[application].id}"

    def http(self, who: str | None) -> httpx.AsyncClient:
        headers = {"authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.AsyncClient(headers=headers, timeout=10.0)

    @asynccontextmanager
    async def client(self, who: str, application: str = "hr-desk") -> AsyncIterator[Client]:
        async with self.http(who) as http:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
            client = await factory.create_from_url(self.url(application))
            yield client


def application(
    id: str, tenant: Identity, name: str, *, active: bool = True, burst: int = 100
) -> ApplicationRecord:
    now = datetime.now(UTC)
    return ApplicationRecord(
        id=id,
        tenant_id=tenant.tenant_id,
        name=name,
        display_name=name.replace("-", " ").title(),
        platform=Platform.API_SERVICE,
        orchestrator_id="orch-hr",
        active=active,
        rate_limit_per_second=0.01,
        rate_limit_burst=burst,
        created_by=tenant.user_id,
        create_time=now,
        update_time=now,
    )


@asynccontextmanager
async def agents_of(
    gateway: Any,
    tokens: TokenService,
    applications: SqlApplicationStore,
    listening: Any,
    script: Script = cited_answer,
) -> AsyncIterator[Agents]:
    broker: NatsBroker = build_broker("nats://unused:4222", client_name="test")
    events: Fanout[ChatTurnEvent] = Fanout()
    bus = build_bus(events)
    broker.include_router(bus.router)
    heard: list[tuple[str, ChatRequested]] = []

    @broker.subscriber(ChatRequested.subject, stream=CHAT_REQUESTS)
    async def turns(request: ChatRequested) -> None:
        heard.append((require_identity().tenant_id, request))
        for event in script(request):
            await broker.publish(
                event.model_dump(mode="json"),
                subject=ChatTurnEvent.subject_for(require_identity().tenant_id, event.turn_id),
            )

    records = {
        "hr-desk": application("app_hr", ACME, "hr-desk"),
        "retired": application("app_old", ACME, "retired", active=False),
        "sales": application("app_sales", ACME, "sales"),
        "tight": application("app_tight", ACME, "tight", burst=1),
        "globex-desk": application("app_globex", GLOBEX, "globex-desk"),
    }
    for record in records.values():
        await applications.add(record)
    conversation = Conversation()
    async with TestNatsBroker(broker):
        app = await gateway(
            conversation=conversation, bus=bus, chat_events=events, local_identity=None, chat_turn_timeout=2.0
        )
        day = timedelta(days=1)

        async def issue(who: Identity, role: Role = Role.MEMBER, application_id: str = "") -> str:
            issued = await tokens.issue(who, role, name="a2a", ttl=day, application_id=application_id)
            return issued.token

        issued = {
            "acme": await issue(ACME),
            "acme-bob": await issue(ACME_BOB),
            "acme-reader": await issue(ACME, Role.READ_ONLY),
            "hr-desk-token": await issue(ACME, application_id="app_hr"),
            "tight-token": await issue(ACME, application_id="app_tight"),
            "globex": await issue(GLOBEX, Role.ADMIN),
        }
        async with listening(app) as (host, port):
            yield Agents(f"http://{host}:{port}", issued, records, conversation, heard)


def question(text: str, context_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            role=A2ARole.ROLE_USER,
            message_id=uuid.uuid4().hex,
            context_id=context_id,
            parts=[Part(text=text)],
        )
    )


async def ask(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


def final_task(events: list[StreamResponse]) -> tuple[str, str, TaskState, Message]:
    """(task id, context id, final state, final status message) of a stream."""
    [last] = [e.status_update for e in events if e.HasField("status_update")][-1:]
    return last.task_id, last.context_id, last.status.state, last.status.message


async def test_the_card_names_the_application_and_a_streamed_answer_ends_with_its_sources(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    async with (
        agents_of(gateway, tokens, applications, listening) as agents,
        agents.http("acme") as http,
    ):
        card = (await http.get(f"{agents.url('hr-desk')}/.well-known/agent-card.json")).json()
        async with agents.client("acme") as client:
            events = await ask(client, question("How many days of leave do I get?"))

    assert card["name"] == "Hr Desk"
    assert card["description"] == "Answers HR questions from the handbook."  # the orchestrator's
    assert [(i["url"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [
        (agents.url("hr-desk"), "1.0"),
        (agents.url("hr-desk"), "0.3"),
    ]
    assert card["capabilities"]["streaming"] is True
    assert card["defaultInputModes"] == ["text/plain"]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]

    # The answer arrived in pieces, a marker never split across two...
    pieces = [
        get_artifact_text(e.artifact_update.artifact)
        for e in events
        if e.HasField("artifact_update") and not e.artifact_update.last_chunk
    ]
    assert pieces == ["Employees get 27 days", " of leave ", "[[c1]] and carry it over [[c2]]."]
    # ...and ended completed with the whole answer and its sources, in the artifact and the status.
    task_id, context_id, state, message = final_task(events)
    assert state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(message) == "Employees get 27 days of leave [[c1]] and carry it over [[c2]]."
    [answer] = [e.artifact_update.artifact for e in events if e.artifact_update.last_chunk]
    assert get_artifact_text(answer) == get_message_text(message)
    [sources] = get_data_parts(list(answer.parts))
    assert get_data_parts(list(message.parts)) == [sources]
    assert [
        (s["handle"], s["document_id"], s["chunk_id"], s["knowledge_base_id"], s["page"], s["title"])
        for s in sources["sources"]
    ] == [
        ("c1", "doc-handbook", "chunk-7", "kb-hr", 4, "Employee handbook"),
        ("c2", "doc-policy", "chunk-9", "kb-hr", 0, "c2"),
    ]
    assert sources["sources"][0]["url"] == f"{agents.base_url}/api/v1/documents/doc-handbook"
    # The turn ran as the caller, in a new session of the application, whose id is the context.
    [(tenant, turn)] = agents.heard
    assert tenant == ACME.tenant_id
    assert (turn.turn_id, turn.session_id) == (task_id, context_id)
    assert turn.message == "How many days of leave do I get?"
    owner, session = agents.conversation.sessions[context_id]
    assert (owner, session.application_id, session.orchestrator_id) == (ACME, "app_hr", "orch-hr")
    assert dict(session.metadata) == {"channel": "a2a"}


async def test_a_follow_up_in_the_same_context_continues_the_session_and_no_one_elses_can_be_named(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    async with agents_of(gateway, tokens, applications, listening) as agents:
        async with agents.client("acme") as client:
            _, context_id, _, _ = final_task(await ask(client, question("How many days of leave?")))
            _, again, state, _ = final_task(await ask(client, question("And after ten years?", context_id)))
        # The application's own token continues the same user's conversation too.
        async with agents.client("hr-desk-token") as client:
            _, third, _, _ = final_task(await ask(client, question("And part-time?", context_id)))
        refused: dict[str, Exception] = {}
        for who, application_name, context in (
            ("acme-bob", "hr-desk", context_id),  # another user of the tenant
            ("globex", "globex-desk", context_id),  # another tenant, on its own application
            ("acme", "sales", context_id),  # the caller's session, but another application's
            ("acme", "hr-desk", "session-that-never-was"),
        ):
            async with agents.client(who, application_name) as client:
                with pytest.raises(InvalidParamsError) as error:
                    await ask(client, question("What did I ask before?", context))
                refused[who + "/" + application_name] = error.value

    assert state == TaskState.TASK_STATE_COMPLETED
    assert again == third == context_id
    assert [turn.session_id for _, turn in agents.heard] == [context_id] * 3
    assert len(agents.conversation.sessions) == 1  # one conversation, continued
    for error in refused.values():
        assert "contextId" in error.message and "leave contextId out" in error.message
    assert len(agents.heard) == 3  # none of the refused messages became a turn


async def test_another_tenant_another_application_an_unknown_or_switched_off_one_is_404_and_no_token_401(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}
    answers: dict[tuple[str | None, str], tuple[int, int]] = {}
    async with agents_of(gateway, tokens, applications, listening) as agents:
        for who, application_id in (
            ("globex", "app_hr"),  # another tenant's application
            ("hr-desk-token", "app_sales"),  # an application's token, another application
            ("acme", "app_old"),  # switched off
            ("acme", "app_none"),  # never was
            (None, "app_hr"),  # no token
        ):
            async with agents.http(who) as http:
                url = f"{agents.base_url}/a2a/{application_id}"
                card = await http.get(f"{url}/.well-known/agent-card.json")
                call = await http.post(url, json=rpc)
            answers[(who, application_id)] = (card.status_code, call.status_code)
            if card.status_code == 404:
                assert card.json()["error"]["message"] == f"application {application_id} not found"
        async with agents.http("globex") as http:
            with pytest.raises(AgentCardResolutionError) as refused:
                await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(agents.url("hr-desk"))
        async with agents.http("acme-reader") as http:
            reader_card = await http.get(f"{agents.url('hr-desk')}/.well-known/agent-card.json")
            reader_call = await http.post(agents.url("hr-desk"), json=rpc)

    assert answers == {
        ("globex", "app_hr"): (404, 404),
        ("hr-desk-token", "app_sales"): (404, 404),
        ("acme", "app_old"): (404, 404),
        ("acme", "app_none"): (404, 404),
        (None, "app_hr"): (401, 401),
    }
    assert refused.value.status_code == 404
    assert agents.heard == [] and agents.conversation.sessions == {}
    # A read-only caller may read the card but not ask.
    assert (reader_card.status_code, reader_call.status_code) == (200, 403)


async def test_the_answer_is_also_sent_whole_and_read_back_with_the_method_names_of_a2a_0_3(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    message = {
        "role": "user",
        "messageId": "m1",
        "kind": "message",
        "parts": [{"kind": "text", "text": "How many days of leave?"}],
    }
    async with agents_of(gateway, tokens, applications, listening) as agents:
        async with agents.http("acme") as http:
            sent = await http.post(
                agents.url("hr-desk"),
                json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
            )
            task = sent.json()["result"]
            read = await http.post(
                agents.url("hr-desk"),
                json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}},
            )
        async with agents.http("acme-bob") as http:
            # Tasks are their caller's: another user of the tenant does not find it.
            elsewhere = await http.post(
                agents.url("hr-desk"),
                json={"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": task["id"]}},
            )

    assert task["status"]["state"] == "completed"
    assert read.json()["result"]["id"] == task["id"]
    [artifact] = read.json()["result"]["artifacts"]
    text, data = artifact["parts"]
    assert text["text"] == "".join(ANSWER)
    assert [s["document_id"] for s in data["data"]["sources"]] == ["doc-handbook", "doc-policy"]
    assert elsewhere.json()["error"]["code"] == -32001  # task not found


async def test_a_failed_turn_fails_the_task_with_its_friendly_message(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    async with (
        agents_of(gateway, tokens, applications, listening, failing) as agents,
        agents.client("acme") as client,
    ):
        events = await ask(client, question("How many days of leave?"))
    [last] = [e.status_update for e in events if e.HasField("status_update")][-1:]
    assert last.status.state == TaskState.TASK_STATE_FAILED
    assert get_message_text(last.status.message) == (
        "The model is busy right now; please try again in a minute."
    )
    assert dict(last.metadata) == {"error_code": "rate_limited"}


async def test_cancelling_the_task_cancels_its_turn_as_the_caller(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    async with (
        agents_of(gateway, tokens, applications, listening, never_finishing) as agents,
        agents.client("acme") as client,
    ):
        stream = client.send_message(question("Tell me a story"))
        async for event in stream:
            if event.HasField("artifact_update"):  # the first words arrived; the caller stops reading
                task_id = event.artifact_update.task_id
                break
        await stream.aclose()  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)
        assert agents.conversation.cancelled == []  # a reader going away leaves the task running
        running = await client.get_task(GetTaskRequest(id=task_id))
        assert running.status.state == TaskState.TASK_STATE_WORKING
        with pytest.raises(TaskNotFoundError):  # only its caller can cancel it
            async with agents.client("acme-bob") as other:
                await other.cancel_task(CancelTaskRequest(id=task_id))
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        read = await client.get_task(GetTaskRequest(id=task_id))

    assert cancelled.status.state == read.status.state == TaskState.TASK_STATE_CANCELED
    assert agents.conversation.cancelled == [(ACME.tenant_id, task_id)]


async def test_every_call_to_an_applications_agent_counts_against_its_rate_limit(
    gateway: Any, tokens: TokenService, applications: SqlApplicationStore, listening: Any
) -> None:
    async with agents_of(gateway, tokens, applications, listening) as agents:
        card = f"{agents.url('tight')}/.well-known/agent-card.json"
        async with agents.http("acme") as http:
            first, second = await http.get(card), await http.get(card)
            other = await http.get(f"{agents.url('hr-desk')}/.well-known/agent-card.json")
        async with agents.http("tight-token") as http:  # the application's own token: the same bucket
            own = await http.get(card)
    assert (first.status_code, second.status_code, own.status_code) == (200, 429, 429)
    assert other.status_code == 200  # another application's bucket is its own
    assert "through application tight" in second.json()["error"]["message"]
    assert int(second.headers["retry-after"]) >= 1


def caller_context(who: Identity, application_id: str) -> ServerCallContext:
    record = application(application_id, who, "x")
    return ServerCallContext(user=ApplicationCall(Caller(who), record, "http://gateway"))


async def test_the_task_store_is_scoped_to_its_caller_and_application_and_forgets_the_oldest() -> None:
    store = BoundedTaskStore(max_tasks=2)
    alice_hr, bob_hr, alice_sales = (
        caller_context(ACME, "app_hr"),
        caller_context(ACME_BOB, "app_hr"),
        caller_context(ACME, "app_sales"),
    )
    for task_id in ("t1", "t2"):
        await store.save(Task(id=task_id, context_id="c"), alice_hr)
    assert await store.get("t1", bob_hr) is None
    assert await store.get("t1", alice_sales) is None
    await store.save(Task(id="t1", context_id="c"), alice_hr)  # written again: now the newest
    await store.save(Task(id="t3", context_id="c"), alice_sales)
    assert len(store) == 2
    assert await store.get("t2", alice_hr) is None  # the oldest write, forgotten
    assert (await store.get("t1", alice_hr)) is not None
    assert (await store.get("t3", alice_sales)) is not None
    assert json.loads(alice_hr.user.user_name) == ["acme", "alice", "app_hr"]
