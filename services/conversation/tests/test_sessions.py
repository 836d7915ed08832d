"""Sessions, their history and cancelling a turn, through the conversation's real gRPC server, with
the sessions on SQLite and on PostgreSQL and the history read from the graph's checkpoints.

What a user notices: a session they create is theirs alone (another user's id is NOT_FOUND); its
messages are the questions and answers of its turns, in order, with tool steps on request; deleting it
removes its history; a turn naming a session that is not theirs ends with ``session_not_found``;
turns are counted and the first question titles the session; a cancelled turn stops at once with
what was already said.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_contracts.events import ChatRequested, TurnEventKind
from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation.adapters.sessions_sql import SqlSessionStore
from knowsphere_conversation.api.grpc import AgentServicer, ConversationServicer, build_binding
from knowsphere_conversation.domain.turns import SESSION_NOT_FOUND
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import CALLER, Models, text, tool_call
from world import World

OTHER = Identity("acme", "bob")


def agent(request: mpb.ChatStreamRequest) -> list[Any]:
    if request.messages[-1].role == mpb.CHAT_ROLE_TOOL:
        return text("25 days [[c1]].")
    return tool_call("doc_retrieval", {"query": "leave"})


@pytest.fixture
async def service(store: SqlSessionStore) -> AsyncIterator[tuple[Any, World]]:
    world = World(store, Models(agent))
    servicer = ConversationServicer(store, world.history, world.cancel, world.forget, default_page_size=2)
    async with serving("conversation", binding=build_binding(servicer)) as channel:
        yield CONTRACTS["conversation"].stub(channel), world


async def test_a_session_is_its_owners_alone(service: Any) -> None:
    stub, _ = service
    with bound_identity(CALLER):
        created = (
            await stub.CreateSession(
                pb.CreateSessionRequest(title=" Leave questions ", metadata={"channel": "web"})
            )
        ).session
        assert (
            created.title == "Leave questions"
            and created.turn_count == 0
            and created.metadata["channel"] == "web"
        )
        got = (await stub.GetSession(pb.GetSessionRequest(session_id=created.id))).session
        assert got == created
        renamed = (
            await stub.UpdateSession(pb.UpdateSessionRequest(session_id=created.id, title="Leave"))
        ).session
        assert renamed.title == "Leave"
    with bound_identity(OTHER):
        for call in (
            stub.GetSession(pb.GetSessionRequest(session_id=created.id)),
            stub.UpdateSession(pb.UpdateSessionRequest(session_id=created.id, title="mine now")),
            stub.DeleteSession(pb.DeleteSessionRequest(session_id=created.id)),
            stub.ListMessages(pb.ListMessagesRequest(session_id=created.id)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        assert list((await stub.ListSessions(pb.ListSessionsRequest())).sessions) == []
    with bound_identity(CALLER):
        assert (await stub.GetSession(pb.GetSessionRequest(session_id=created.id))).session.title == "Leave"


async def test_messages_are_the_turns_questions_and_answers_and_deleting_the_session_removes_them(
    service: Any,
) -> None:
    stub, world = service
    with bound_identity(CALLER):
        session = (await stub.CreateSession(pb.CreateSessionRequest())).session
        await world.ask(session.id, "How many days of leave do I get?", "t1")
        await world.ask(session.id, "And sick days?", "t2")
        counted = (await stub.GetSession(pb.GetSessionRequest(session_id=session.id))).session
        assert counted.turn_count == 2 and counted.title == "How many days of leave do I get?"

        pages, token = [], ""
        while True:
            page = await stub.ListMessages(
                pb.ListMessagesRequest(session_id=session.id, oldest_first=True, page_token=token)
            )
            pages.append([(m.role, m.content[0].text) for m in page.messages])
            token = page.next_page_token
            if not token:
                break
        assert pages == [
            [
                (pb.MESSAGE_ROLE_USER, "How many days of leave do I get?"),
                (pb.MESSAGE_ROLE_ASSISTANT, "25 days [[c1]]."),
            ],
            [(pb.MESSAGE_ROLE_USER, "And sick days?"), (pb.MESSAGE_ROLE_ASSISTANT, "25 days [[c1]].")],
        ]
        newest = await stub.ListMessages(pb.ListMessagesRequest(session_id=session.id, page_size=1))
        assert newest.messages[0].turn_id == "t2" and newest.messages[0].role == pb.MESSAGE_ROLE_ASSISTANT
        # An answer keeps the sources it cites, so a reloaded conversation still shows them.
        [cited] = newest.messages[0].citations
        assert (cited.label, cited.index, cited.file_name, cited.document_id, cited.knowledge_base_id) == (
            "c1",
            1,
            "handbook.pdf",
            "doc-handbook",
            "kb-1",
        )
        assert cited.snippet == "Employees get 25 days of annual leave."
        everything = await stub.ListMessages(
            pb.ListMessagesRequest(
                session_id=session.id, oldest_first=True, include_tool_messages=True, page_size=50
            )
        )
        roles = [m.role for m in everything.messages if m.turn_id == "t1"]
        assert roles == [
            pb.MESSAGE_ROLE_USER,
            pb.MESSAGE_ROLE_ASSISTANT,
            pb.MESSAGE_ROLE_TOOL,
            pb.MESSAGE_ROLE_ASSISTANT,
        ]
        assert everything.messages[1].tool_calls[0].name == "doc_retrieval"

        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.ListMessages(pb.ListMessagesRequest(session_id=session.id, page_token="not-a-token"))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        await stub.DeleteSession(pb.DeleteSessionRequest(session_id=session.id))
        assert world.forgotten == [(f"{CALLER.tenant_id}/{CALLER.user_id}/{session.id}", session.id)]
        assert await world.history(world.forgotten[0][0]) == []
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.GetSession(pb.GetSessionRequest(session_id=session.id))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_turn_naming_a_session_that_is_not_the_askers_ends_with_session_not_found(
    service: Any,
) -> None:
    stub, world = service
    with bound_identity(OTHER):
        theirs = (await stub.CreateSession(pb.CreateSessionRequest())).session
    with bound_identity(CALLER):
        for session_id in (theirs.id, "no-such-session"):
            [final] = await world.ask(session_id, "hello", f"t-{session_id}")
            assert final.kind is TurnEventKind.ERROR and final.error_code == SESSION_NOT_FOUND
    assert world.models.requests == []  # no model was asked


async def test_sessions_list_newest_first_in_pages(service: Any) -> None:
    stub, world = service
    with bound_identity(CALLER):
        ids = [
            (await stub.CreateSession(pb.CreateSessionRequest(title=f"s{n}"))).session.id for n in range(3)
        ]
        await world.ask(ids[0], "hello", "t-first")  # now the most recently active
        first = await stub.ListSessions(pb.ListSessionsRequest())
        second = await stub.ListSessions(pb.ListSessionsRequest(page_token=first.next_page_token))
    assert [s.id for s in first.sessions] == [ids[0], ids[2]]
    assert [s.id for s in second.sessions] == [ids[1]] and second.next_page_token == ""


async def test_cancelling_a_turn_stops_it_with_what_was_said(store: SqlSessionStore) -> None:
    waiting = asyncio.Event()

    async def slow(request: mpb.ChatStreamRequest) -> Any:
        yield mpb.ChatStreamResponse(text_delta=mpb.TextDelta(text="Employees get"))
        waiting.set()
        await asyncio.sleep(60)
        yield mpb.ChatStreamResponse(text_delta=mpb.TextDelta(text=" never shown"))

    models = Models(lambda r: [], intent="B")
    models.chat_stream = slow  # type: ignore[method-assign,assignment]
    world = World(store, models)
    with bound_identity(CALLER):
        turn = asyncio.create_task(world.runner.run(ChatRequested(turn_id="t-long", message="tell me")))
        await waiting.wait()
        assert world.runner.cancel("t-long", OTHER) is False  # not the asker's turn
        started = asyncio.get_running_loop().time()
        assert world.runner.cancel("t-long", CALLER) is True
        result = await turn
        assert asyncio.get_running_loop().time() - started < 1.0
    final = result.final
    assert final is not None and final.kind is TurnEventKind.CANCELLED and final.is_final
    assert final.text == "Employees get"
    assert sum(e.is_final for e in world.events) == 1
    assert world.runner.cancel("t-long", CALLER) is False  # finished: nothing to cancel


@pytest.fixture
async def agents(store: SqlSessionStore) -> AsyncIterator[tuple[Any, World]]:
    world = World(store, Models(lambda r: text("as the agent says"), intent="B"))
    world.runner._agents = store  # type: ignore[attr-defined]  # as the wiring does
    servicer = ConversationServicer(store, world.history, world.cancel, world.forget, bindings=store)
    async with serving("conversation", binding=build_binding(servicer, AgentServicer(store))) as channel:
        yield CONTRACTS["conversation"].stub(channel), world


async def test_an_agent_is_data_its_sessions_turns_run_with(agents: Any) -> None:
    stub, world = agents
    with bound_identity(CALLER):
        agent = (
            await stub.CreateAgent(
                pb.CreateAgentRequest(
                    name="hr-helper",
                    system_prompt="You are the HR desk of ACME.",
                    model_id="model-hr",
                    model_parameters=pb.AgentModelParameters(temperature=0.2, max_tokens=300),
                    knowledge_base_ids=["kb-hr"],
                    active=True,
                )
            )
        ).agent
        session = (await stub.CreateSession(pb.CreateSessionRequest(agent_id=agent.id))).session
        await world.ask(session.id, "hello", "t-agent-1")
        request = world.models.requests[-1]
        assert request.model_id == "model-hr" and request.temperature == pytest.approx(0.2)
        assert request.max_tokens == 300
        assert request.messages[0].content[0].text.startswith("You are the HR desk of ACME.")

        # A change applies from the next turn; a switched-off agent refuses turns, naming itself.
        await stub.UpdateAgent(
            pb.UpdateAgentRequest(agent_id=agent.id, system_prompt="You are ACME's HR bot.")
        )
        await world.ask(session.id, "hello again", "t-agent-2")
        assert world.models.requests[-1].messages[0].content[0].text.startswith("You are ACME's HR bot.")
        await stub.UpdateAgent(pb.UpdateAgentRequest(agent_id=agent.id, active=False))
        [final] = [e for e in await world.ask(session.id, "still there?", "t-agent-3") if e.is_final]
        assert final.error_code == "agent_inactive" and "hr-helper" in (final.error_message or "")

        listed = await stub.ListAgents(pb.ListAgentsRequest())
        assert [a.name for a in listed.agents] == ["hr-helper"]
        with pytest.raises(grpc.aio.AioRpcError) as duplicate:
            await stub.CreateAgent(pb.CreateAgentRequest(name="hr-helper"))
        assert duplicate.value.code() == grpc.StatusCode.ALREADY_EXISTS
        for bad, field in (
            (pb.CreateAgentRequest(name="HR Helper"), "name"),
            (pb.CreateAgentRequest(name="ok-name", system_prompt="x" * 20_001), "system_prompt"),
            (
                pb.CreateAgentRequest(
                    name="ok-name", model_parameters=pb.AgentModelParameters(temperature=3)
                ),
                "temperature",
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CreateAgent(bad)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in (
                refused.value.details() or ""
            )
    with bound_identity(Identity("globex", "mallory")):
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await stub.GetAgent(pb.GetAgentRequest(agent_id=agent.id))
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        assert list((await stub.ListAgents(pb.ListAgentsRequest())).agents) == []
    with bound_identity(CALLER):
        await stub.DeleteAgent(pb.DeleteAgentRequest(agent_id=agent.id))
        [gone] = [e for e in await world.ask(session.id, "hello?", "t-agent-4") if e.is_final]
        assert gone.error_code == "agent_not_found"
