"""Orchestrators through the conversation's real gRPC server and session store (SQLite and
PostgreSQL), and the turns of sessions bound to them.

What a user notices: a configuration that names an unknown or switched-off agent, or breaks its mode's
shape, is refused when saved with the field named; an agent an orchestrator runs cannot be deleted from
under it; another tenant sees none of it. A conditional orchestrator hands each question to the agent
its routes pick (a handoff event says which and why); a knowledge-base orchestrator answers from one
retrieval with cited passages and no tool loop; a mode that cannot answer yet ends the turn with a
clear error instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from peers import CALLER, Memory, Models, Search, Tools, text, tool_call
from world import World

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients.errors import FailedPrecondition, ModelFailure
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation.adapters.sessions_sql import SqlSessionStore
from knowsphere_conversation.api.grpc import (
    AgentServicer,
    ConversationServicer,
    OrchestratorServicer,
    build_binding,
)
from knowsphere_conversation.domain.graph import TurnLimits
from knowsphere_conversation.domain.orchestrators import ConfigError, Mode, parse_config
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving

STRANGER = Identity("globex", "mallory")


def config(values: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(values)
    return out


def by_prompt(request: mpb.ChatStreamRequest) -> list[Any]:
    """Each agent answers in its own words, so a test sees which one the turn ran."""
    system = request.messages[0].content[0].text
    if system.startswith("You are the billing desk"):
        return text("Billing here.")
    if system.startswith("You are the IT desk"):
        return text("IT here.")
    if request.tools and request.tool_choice.mode != mpb.TOOL_CHOICE_MODE_NONE:
        return tool_call("doc_retrieval", {"query": "leave"})
    return text("Employees get 25 days [[c1]], see also [[c9]].")


PASSAGE = rpb.SearchResult(
    chunk_id="chunk-7",
    document_id="doc-handbook",
    file_name="handbook.pdf",
    knowledge_base_id="kb-hr",
    page=4,
    heading_path=["Leave", "Annual"],
    text="Employees get 25 days of annual leave.",
    handle="h-7",
)


@pytest.fixture
async def service(store: SqlSessionStore) -> AsyncIterator[tuple[Any, World]]:
    search = Search([PASSAGE])
    world = World(store, Models(by_prompt, intent="E"), search)
    world.runner._agents = store  # type: ignore[attr-defined]  # as the wiring does
    servicer = ConversationServicer(store, world.history, world.cancel, world.forget, bindings=store)
    binding = build_binding(servicer, AgentServicer(store), OrchestratorServicer(store))
    async with serving("conversation", binding=binding) as channel:
        yield CONTRACTS["conversation"].stub(channel), world


async def make_agent(stub: Any, name: str, prompt: str, *, active: bool = True) -> pb.Agent:
    request = pb.CreateAgentRequest(name=name, system_prompt=prompt, active=active)
    return (await stub.CreateAgent(request)).agent


async def refused(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    assert error.value.code() == code, error.value.details()
    return error.value.details() or ""


def test_each_mode_checks_its_shape_and_names_the_field() -> None:
    conditional = parse_config(
        Mode.CONDITIONAL,
        {
            "routes": [{"condition": {"keywords": ["Invoice"]}, "agent_id": "a1"}],
            "default_agent_id": "a2",
        },
    )
    assert conditional.routes[0].condition.holds("where is my invoice?", None)  # type: ignore[union-attr]
    for mode, bad, field in (
        (Mode.SINGLE, {}, "config.agent_id"),
        (Mode.SINGLE, {"agent_id": "a", "extra": 1}, "config.extra"),
        (Mode.SUPERVISOR, {"supervisor_agent_id": "s", "worker_agent_ids": []}, "config.worker_agent_ids"),
        (
            Mode.SUPERVISOR,
            {"supervisor_agent_id": "s", "worker_agent_ids": ["w"], "max_hops": 99},
            "config.max_hops",
        ),
        (Mode.SUPERVISOR, {"supervisor_agent_id": "s", "worker_agent_ids": ["s"]}, "config.worker_agent_ids"),
        (Mode.COLLABORATION, {"agent_ids": ["a", "a"]}, "config.agent_ids[1]"),
        (
            Mode.COLLABORATION,
            {"agent_ids": ["a", "b"], "collaboration_strategy": "vote"},
            "config.collaboration_strategy",
        ),
        (
            Mode.CONDITIONAL,
            {"routes": [{"condition": {"regex": "("}, "agent_id": "a"}], "default_agent_id": "b"},
            "config.routes[0].condition.regex",
        ),
        (
            Mode.CONDITIONAL,
            {"routes": [{"condition": {"intents": ["weather"]}, "agent_id": "a"}], "default_agent_id": "b"},
            "config.routes[0].condition.intents[0]",
        ),
        (
            Mode.CONDITIONAL,
            {"routes": [{"condition": {}, "agent_id": "a"}], "default_agent_id": "b"},
            "config.routes[0].condition",
        ),
        (Mode.KNOWLEDGE_BASE, {"knowledge_base_ids": []}, "config.knowledge_base_ids"),
        (Mode.DEEP_AGENT, {"agent_id": "a", "backend": "local_shell"}, "config.backend"),
        (
            Mode.WORKFLOW,
            {"steps": [{"id": "a", "kind": "agent", "agent_id": "x", "next": [{"to": "zz"}]}]},
            "",
        ),
    ):
        with pytest.raises(ConfigError) as error:
            parse_config(mode, bad)
        assert error.value.field.startswith(field or "config.steps[0].next[0]"), (mode, error.value)


async def test_orchestrators_are_checked_when_saved_and_hold_their_agents(service: Any) -> None:
    stub, _ = service
    with bound_identity(CALLER):
        billing = await make_agent(stub, "billing", "You are the billing desk.")
        sleeper = await make_agent(stub, "sleeper", "Off.", active=False)
        create = pb.CreateOrchestratorRequest(
            name="front-desk",
            mode=pb.ORCHESTRATION_MODE_SINGLE,
            config=config({"agent_id": billing.id}),
            active=True,
        )
        made = (await stub.CreateOrchestrator(create)).orchestrator
        assert list(made.member_agent_ids) == [billing.id] and made.display_name == "front-desk"
        assert (
            await stub.GetOrchestrator(pb.GetOrchestratorRequest(orchestrator_id=made.id))
        ).orchestrator == made

        # Unknown and switched-off agents, a missing mode, a duplicate name, a mode not configurable yet.
        for request, field in (
            (
                pb.CreateOrchestratorRequest(name="x1", mode=1, config=config({"agent_id": "nope"})),
                "config.agent_id",
            ),
            (
                pb.CreateOrchestratorRequest(name="x2", mode=1, config=config({"agent_id": sleeper.id})),
                "not active",
            ),
            (pb.CreateOrchestratorRequest(name="x3", config=config({"agent_id": billing.id})), "mode"),
            (
                pb.CreateOrchestratorRequest(
                    name="x4",
                    mode=pb.ORCHESTRATION_MODE_SUPERVISOR,
                    config=config({"supervisor_agent_id": "s"}),
                ),
                "config.worker_agent_ids",
            ),
        ):
            assert field in await refused(stub.CreateOrchestrator(request), grpc.StatusCode.INVALID_ARGUMENT)
        again = pb.CreateOrchestratorRequest(
            name="front-desk", mode=1, config=config({"agent_id": billing.id})
        )
        assert "name" in await refused(stub.CreateOrchestrator(again), grpc.StatusCode.ALREADY_EXISTS)
        # An external orchestrator's shape is checked like any other (test_external.py covers the rest).
        external = pb.CreateOrchestratorRequest(
            name="dify",
            mode=pb.ORCHESTRATION_MODE_EXTERNAL,
            config=config({"integration_type": "dify", "api_url": "https://x", "api_key": "k"}),
        )
        assert "config.api_url" in await refused(
            stub.CreateOrchestrator(external), grpc.StatusCode.INVALID_ARGUMENT
        )
        flow = pb.CreateOrchestratorRequest(
            name="flow",
            mode=pb.ORCHESTRATION_MODE_WORKFLOW,
            config=config(
                {
                    "steps": [
                        {"id": "a", "kind": "agent", "agent_id": billing.id, "next": [{"to": "b"}]},
                        {"id": "b", "kind": "agent", "agent_id": "ghost"},
                    ]
                }
            ),
        )
        assert "config.steps[1].agent_id" in await refused(
            stub.CreateOrchestrator(flow), grpc.StatusCode.INVALID_ARGUMENT
        )

        # An agent an orchestrator runs cannot be deleted; once the orchestrator moves on, it can.
        message = await refused(
            stub.DeleteAgent(pb.DeleteAgentRequest(agent_id=billing.id)), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "front-desk" in message
        it = await make_agent(stub, "it-desk", "You are the IT desk.")
        moved = await stub.UpdateOrchestrator(
            pb.UpdateOrchestratorRequest(orchestrator_id=made.id, config=config({"agent_id": it.id}))
        )
        assert list(moved.orchestrator.member_agent_ids) == [it.id]
        await stub.DeleteAgent(pb.DeleteAgentRequest(agent_id=billing.id))
        listed = await stub.ListOrchestrators(pb.ListOrchestratorsRequest(mode=pb.ORCHESTRATION_MODE_SINGLE))
        assert [o.name for o in listed.orchestrators] == ["front-desk"]
        none = await stub.ListOrchestrators(pb.ListOrchestratorsRequest(mode=pb.ORCHESTRATION_MODE_WORKFLOW))
        assert list(none.orchestrators) == []

    with bound_identity(STRANGER):
        await refused(
            stub.GetOrchestrator(pb.GetOrchestratorRequest(orchestrator_id=made.id)),
            grpc.StatusCode.NOT_FOUND,
        )
        await refused(
            stub.DeleteOrchestrator(pb.DeleteOrchestratorRequest(orchestrator_id=made.id)),
            grpc.StatusCode.NOT_FOUND,
        )
        assert list((await stub.ListOrchestrators(pb.ListOrchestratorsRequest())).orchestrators) == []
        # Nor bind a session to it, which reads as missing.
        for request, what in (
            (pb.CreateSessionRequest(orchestrator_id=made.id), "orchestrator"),
            (pb.CreateSessionRequest(agent_id=it.id), "agent"),
        ):
            assert what in await refused(stub.CreateSession(request), grpc.StatusCode.NOT_FOUND)
        # Another tenant cannot build on this tenant's agents either.
        theirs = pb.CreateOrchestratorRequest(name="steal", mode=1, config=config({"agent_id": it.id}))
        assert "config.agent_id" in await refused(
            stub.CreateOrchestrator(theirs), grpc.StatusCode.INVALID_ARGUMENT
        )
    with bound_identity(CALLER):
        await stub.DeleteOrchestrator(pb.DeleteOrchestratorRequest(orchestrator_id=made.id))
        await stub.DeleteAgent(pb.DeleteAgentRequest(agent_id=it.id))


async def session_on(stub: Any, name: str, mode: int, values: dict[str, Any]) -> tuple[pb.Orchestrator, str]:
    request = pb.CreateOrchestratorRequest(name=name, mode=mode, config=config(values), active=True)
    orchestrator = (await stub.CreateOrchestrator(request)).orchestrator
    session = (await stub.CreateSession(pb.CreateSessionRequest(orchestrator_id=orchestrator.id))).session
    return orchestrator, session.id


async def test_a_conditional_orchestrator_hands_each_question_to_the_agent_its_routes_pick(
    service: Any,
) -> None:
    stub, world = service
    with bound_identity(CALLER):
        billing = await make_agent(stub, "billing", "You are the billing desk.")
        it = await make_agent(stub, "it-desk", "You are the IT desk.")
        general = await make_agent(stub, "general", "You are the front desk.")
        _, session = await session_on(
            stub,
            "router",
            pb.ORCHESTRATION_MODE_CONDITIONAL,
            {
                "routes": [
                    {"condition": {"keywords": ["invoice", "发票"]}, "agent_id": billing.id},
                    {"condition": {"regex": r"(?i)\bvpn\b"}, "agent_id": it.id},
                    {"condition": {"intents": ["greeting"]}, "agent_id": general.id},
                ],
                "default_agent_id": general.id,
            },
        )
        events = await world.ask(session, "Where is my INVOICE for March?", "t-route-1")
        [handoff] = [e for e in events if e.kind is TurnEventKind.HANDOFF]
        assert handoff.to_agent_id == billing.id and handoff.reason == "route 1 matched"
        assert [e.kind for e in events][:2] == [TurnEventKind.STARTED, TurnEventKind.HANDOFF]
        assert events[-1].kind is TurnEventKind.COMPLETED and events[-1].text == "Billing here."
        decisions = len(world.models.decisions)

        events = await world.ask(session, "my vpn drops every hour", "t-route-2")
        assert events[-1].text == "IT here."
        # Keyword and regex routes decided without asking the model for the intent first.
        assert len(world.models.decisions) == decisions + 1  # only query understanding's own

        world.models.intent = "A"  # a greeting
        events = await world.ask(session, "good morning", "t-route-3")
        [handoff] = [e for e in events if e.kind is TurnEventKind.HANDOFF]
        assert handoff.to_agent_id == general.id and handoff.reason == "route 3 matched"
        world.models.intent = "E"
        events = await world.ask(session, "how many leave days do I get?", "t-route-4")
        [handoff] = [e for e in events if e.kind is TurnEventKind.HANDOFF]
        assert handoff.to_agent_id == general.id and "default" in (handoff.reason or "")
        assert sum(e.is_final for e in world.events) == 4


async def test_a_knowledge_base_orchestrator_answers_from_one_retrieval_with_citations(service: Any) -> None:
    stub, world = service
    with bound_identity(CALLER):
        _, session = await session_on(
            stub, "hr-rag", pb.ORCHESTRATION_MODE_KNOWLEDGE_BASE, {"knowledge_base_ids": ["kb-hr"]}
        )
        events = await world.ask(session, "How many days of annual leave?", "t-rag-1")
    kinds = [e.kind for e in events]
    assert TurnEventKind.TOOL_STARTED not in kinds  # no tool loop
    [intent] = [e for e in events if e.kind is TurnEventKind.INTENT]
    assert intent.route == "retrieve"
    [sources] = [e for e in events if e.kind is TurnEventKind.SOURCES]
    assert [(c.handle, c.chunk_id, c.page) for c in sources.citations] == [("c1", "chunk-7", 4)]
    final = events[-1]
    assert final.kind is TurnEventKind.COMPLETED
    # The made-up [[c9]] names no passage: it is removed, and the real one is kept and cited.
    assert final.text == "Employees get 25 days [[c1]], see also ." and final.removed_citations == 1
    assert [c.file_name for c in final.citations] == ["handbook.pdf"]
    answer = world.models.requests[-1]
    assert answer.tool_choice.mode == mpb.TOOL_CHOICE_MODE_NONE
    prompt = "\n".join(part.text for message in answer.messages for part in message.content)
    assert "[c1] handbook.pdf, p. 4, Leave > Annual\nEmployees get 25 days of annual leave." in prompt


def scribe(request: mpb.ChatStreamRequest) -> list[Any]:
    """Looks things up when it may use tools, then answers."""
    if request.tools and request.messages[-1].role != mpb.CHAT_ROLE_TOOL:
        return tool_call("doc_retrieval", {"query": "leave"})
    return text("Noted: 25 days [[c1]].")


async def test_a_deep_agent_works_in_the_sessions_workspace_and_so_does_a_single_agent_with_skills(
    service: Any,
) -> None:
    stub, world = service
    world.models.agent = scribe
    with bound_identity(CALLER):
        plain = await make_agent(stub, "plain", "You are plain.")
        skilled = (
            await stub.CreateAgent(
                pb.CreateAgentRequest(
                    name="skilled", system_prompt="You write reports.", skill_names=["report"], active=True
                )
            )
        ).agent
        _, deep_session = await session_on(
            stub, "deep", pb.ORCHESTRATION_MODE_DEEP_AGENT, {"agent_id": plain.id}
        )
        _, skilled_session = await session_on(
            stub, "one", pb.ORCHESTRATION_MODE_SINGLE, {"agent_id": skilled.id}
        )
        _, plain_session = await session_on(stub, "two", pb.ORCHESTRATION_MODE_SINGLE, {"agent_id": plain.id})

        for session, turn in ((deep_session, "t-deep"), (skilled_session, "t-skilled")):
            events = await world.ask(session, "how many leave days do I have?", turn)
            assert events[-1].kind is TurnEventKind.COMPLETED and "25 days" in (events[-1].text or "")
            listed, executed = world.tools.listed[-1], world.tools.executed[-1]
            assert listed.workspace and executed.context.workspace and executed.context.session_id == session
            system = world.models.requests[-1].messages[0].content[0].text
            assert "deep agent" in system and "workspace_write" in system

        events = await world.ask(plain_session, "how many leave days do I have?", "t-plain")
        assert events[-1].kind is TurnEventKind.COMPLETED
        assert not world.tools.listed[-1].workspace and not world.tools.executed[-1].context.workspace
        assert "deep agent" not in world.models.requests[-1].messages[0].content[0].text


async def test_an_orchestrator_that_cannot_answer_ends_the_turn_with_a_clear_error(service: Any) -> None:
    stub, world = service
    with bound_identity(CALLER):
        boss = await make_agent(stub, "boss", "You lead.")
        supervisor, session = await session_on(
            stub, "team", pb.ORCHESTRATION_MODE_DEEP_AGENT, {"agent_id": boss.id}
        )
        await stub.UpdateOrchestrator(
            pb.UpdateOrchestratorRequest(orchestrator_id=supervisor.id, active=False)
        )
        [final] = [e for e in await world.ask(session, "plan my week", "t-mode-2") if e.is_final]
        assert final.error_code == "orchestrator_inactive" and "team" in (final.error_message or "")
        await stub.DeleteOrchestrator(pb.DeleteOrchestratorRequest(orchestrator_id=supervisor.id))
        [final] = [e for e in await world.ask(session, "plan my week", "t-mode-3") if e.is_final]
        assert final.error_code == "orchestrator_not_found"


class Crash(BaseException):
    """The process dying in the middle of a turn (nothing in the turn catches it)."""


def experts_script(request: mpb.ChatStreamRequest) -> list[Any]:
    system = request.messages[0].content[0].text
    last = request.messages[-1]
    if system.startswith("You are the law expert"):
        if last.role == mpb.CHAT_ROLE_TOOL:
            return text("The contract grants 25 days [[c1]].")
        return tool_call("doc_retrieval", {"query": "leave"})
    if system.startswith("You are the tax expert"):
        if last.role == mpb.CHAT_ROLE_TOOL:
            return text("Leave pay is taxed as salary [[c1]].")
        return tool_call("doc_retrieval", {"query": "tax"}, call_id="call-9")
    if system.startswith("You are the editor"):
        return text("Both agree: 25 days [[c1]], taxed as salary [[c2]].")
    raise AssertionError(f"unexpected prompt {system[:40]!r}")


def prompt_of(request: mpb.ChatStreamRequest) -> str:
    return "\n".join(part.text for message in request.messages for part in message.content)


def asked_by(models: Models, who: str) -> list[mpb.ChatStreamRequest]:
    return [r for r in models.requests if r.messages[0].content[0].text.startswith(who)]


async def collaboration(stub: Any, strategy: str) -> tuple[list[pb.Agent], str]:
    law = await make_agent(stub, "law", "You are the law expert.")
    tax = await make_agent(stub, "tax", "You are the tax expert.")
    editor = await make_agent(stub, "editor", "You are the editor.")
    _, session = await session_on(
        stub,
        f"panel-{strategy}",
        pb.ORCHESTRATION_MODE_COLLABORATION,
        {"agent_ids": [law.id, tax.id], "collaboration_strategy": strategy, "summary_agent_id": editor.id},
    )
    return [law, tax, editor], session


async def test_a_sequential_collaboration_hands_each_expert_the_earlier_answers_then_summarises(
    service: Any,
) -> None:
    stub, world = service
    world.models.agent = experts_script
    with bound_identity(CALLER):
        (law, tax, _), session = await collaboration(stub, "sequential")
        events = await world.ask(session, "How much leave do I get and how is it taxed?", "t-panel-1")
    handoffs = [(e.from_agent_id, e.to_agent_id, e.reason) for e in events if e.kind is TurnEventKind.HANDOFF]
    assert handoffs == [("", law.id, "expert 1 of 2"), (law.id, tax.id, "expert 2 of 2")]
    tools = [(e.kind.value, e.tool_call_id) for e in events if e.tool_call_id]
    assert tools == [
        ("tool_started", "e0-call-1"),
        ("tool_finished", "e0-call-1"),
        ("tool_started", "e1-call-9"),
        ("tool_finished", "e1-call-9"),
    ]
    # The tax expert saw the law expert's answer; the editor saw both, their sources numbered for the turn.
    assert "[law] said:\nThe contract grants 25 days [[c1]]." in prompt_of(
        asked_by(world.models, "You are the tax")[0]
    )
    [summary] = asked_by(world.models, "You are the editor")
    briefing = prompt_of(summary)
    assert "[law]\nThe contract grants 25 days [[c1]]." in briefing
    assert "[tax]\nLeave pay is taxed as salary [[c2]]." in briefing
    assert summary.tool_choice.mode == mpb.TOOL_CHOICE_MODE_NONE
    # Only the summary is the answer the user reads; both cited passages are its sources.
    streamed = "".join(e.text or "" for e in events if e.kind is TurnEventKind.TEXT_DELTA)
    final = events[-1]
    assert final.kind is TurnEventKind.COMPLETED and streamed == final.text
    assert final.text == "Both agree: 25 days [[c1]], taxed as salary [[c2]]."
    assert [(c.handle, c.chunk_id) for c in final.citations] == [("c1", "chunk-1"), ("c2", "chunk-1")]
    # The experts' answers count with the summary's (the scripted answers report 100 prompt tokens each).
    assert final.prompt_tokens == 300
    # The experts' working threads are gone once the turn is answered.
    for index in (0, 1):
        thread = f"{CALLER.tenant_id}/{CALLER.user_id}/{session}/t-panel-1-e{index}"
        state = await world.graph.aget_state({"configurable": {"thread_id": thread}})
        assert not state.values


async def test_a_parallel_collaboration_runs_its_experts_at_once_and_keeps_the_work_of_those_that_answer(
    service: Any,
) -> None:
    stub, world = service
    both_asking = asyncio.Event()
    waiting: set[str] = set()

    class Gate(Models):
        def chat_stream(self, request: mpb.ChatStreamRequest) -> AsyncIterator[mpb.ChatStreamResponse]:
            inner = super().chat_stream(request)

            async def events() -> AsyncIterator[mpb.ChatStreamResponse]:
                system = request.messages[0].content[0].text
                if request.purpose == "conversation.agent" and "expert" in system:
                    waiting.add(system)
                    if len(waiting) == 2:
                        both_asking.set()
                    # Sequential experts would wait here for ever: the second never comes.
                    await asyncio.wait_for(both_asking.wait(), 5)
                    if system.startswith("You are the tax expert"):
                        raise FailedPrecondition(
                            "provider down",
                            model=ModelFailure(
                                code=ModelErrorCode.MODEL_UNAVAILABLE, user_message="model down"
                            ),
                        )
                async for event in inner:
                    yield event

            return events()

    world.models = Gate(experts_script)
    world.runner._models = world.models  # type: ignore[attr-defined]
    with bound_identity(CALLER):
        (law, tax, _), session = await collaboration(stub, "parallel")
        events = await world.ask(session, "How much leave do I get and how is it taxed?", "t-panel-2")
    handoffs = [(e.to_agent_id, e.reason) for e in events if e.kind is TurnEventKind.HANDOFF]
    assert handoffs == [(law.id, "expert 1 of 2"), (tax.id, "expert 2 of 2")]
    assert both_asking.is_set()
    briefing = prompt_of(asked_by(world.models, "You are the editor")[0])
    assert "[law]\nThe contract grants 25 days [[c1]]." in briefing
    assert "[tax]\n(could not answer:" in briefing
    assert events[-1].kind is TurnEventKind.COMPLETED and sum(e.is_final for e in world.events) == 1


async def test_a_collaboration_whose_replica_dies_resumes_without_asking_a_finished_expert_again(
    service: Any, store: SqlSessionStore
) -> None:
    stub, world = service

    def dies_at_tax(request: mpb.ChatStreamRequest) -> list[Any]:
        if request.messages[0].content[0].text.startswith("You are the tax expert"):
            raise Crash
        return experts_script(request)

    world.models.agent = dies_at_tax
    with bound_identity(CALLER):
        _, session = await collaboration(stub, "sequential")
        request = ChatRequested(
            turn_id="t-panel-3", session_id=session, message="Leave and tax?", knowledge_base_ids=["kb-1"]
        )
        with pytest.raises(Crash):
            await world.runner.run(request)
        law_asked = len(asked_by(world.models, "You are the law"))

        class Log:
            async def read(self, turn_id: str) -> list[ChatTurnEvent]:
                return [e for e in world.events if e.turn_id == turn_id]

        models = Models(experts_script, intent="E")
        restarted = TurnRunner(
            lambda: world.graph,
            models=models,
            tools=Tools(),
            memory=Memory(),
            search=Search(),
            publish=world.runner._publish,  # type: ignore[attr-defined]
            publish_completed=world.runner._publish_completed,  # type: ignore[attr-defined]
            limits=TurnLimits(),
            event_log=Log(),
            sessions=store,
            agents=store,
        )
        result = await restarted.run(request, redelivered=True)
    events = [e for e in world.events if e.turn_id == "t-panel-3"]
    assert [e.sequence for e in events] == list(range(len(events)))
    assert sum(e.is_final for e in events) == 1 and result.final is events[-1]
    assert events[-1].text == "Both agree: 25 days [[c1]], taxed as salary [[c2]]."
    assert [e.kind for e in events].count(TurnEventKind.HANDOFF) == 2
    assert [e.tool_call_id for e in events if e.kind is TurnEventKind.TOOL_STARTED] == [
        "e0-call-1",
        "e1-call-9",
    ]
    # The law expert had answered before the crash: its answer was read, not asked again.
    assert law_asked == 2 and asked_by(models, "You are the law") == []


def supervising(request: mpb.ChatStreamRequest) -> list[Any]:
    system = request.messages[0].content[0].text
    if not system.startswith("You are the lead"):
        return experts_script(request)
    handed = [m for m in request.messages if m.role == mpb.CHAT_ROLE_TOOL]
    if not handed:
        return tool_call("transfer_to_law", {"task": "How many leave days?"}, call_id="call-a")
    if len(handed) == 1:
        return tool_call("transfer_to_tax", {"task": "How is leave pay taxed?"}, call_id="call-b")
    return text("Leave is 25 days [[c1]] and taxed as salary [[c2]].")


async def test_a_supervisor_hands_tasks_to_its_workers_and_answers_from_what_they_found(service: Any) -> None:
    stub, world = service
    world.models.agent = supervising
    with bound_identity(CALLER):
        law = await make_agent(stub, "law", "You are the law expert.")
        tax = await make_agent(stub, "tax", "You are the tax expert.")
        lead = await make_agent(stub, "lead", "You are the lead.")
        _, session = await session_on(
            stub,
            "desk",
            pb.ORCHESTRATION_MODE_SUPERVISOR,
            {"supervisor_agent_id": lead.id, "worker_agent_ids": [law.id, tax.id]},
        )
        events = await world.ask(session, "How much leave do I get and how is it taxed?", "t-sup-1")
    handoffs = [(e.from_agent_id, e.to_agent_id, e.reason) for e in events if e.kind is TurnEventKind.HANDOFF]
    assert handoffs == [
        (lead.id, law.id, "How many leave days?"),
        (law.id, lead.id, "answered"),
        (lead.id, tax.id, "How is leave pay taxed?"),
        (tax.id, lead.id, "answered"),
    ]
    tools = [e.tool_call_id for e in events if e.kind is TurnEventKind.TOOL_STARTED]
    assert tools == ["call-a-call-1", "call-b-call-9"]  # each worker's own tool calls, kept apart
    # Each worker got only its task; the supervisor read their answers with the sources renumbered.
    [law_asked, _] = asked_by(world.models, "You are the law")
    assert law_asked.messages[-1].content[0].text == "How many leave days?"
    last = asked_by(world.models, "You are the lead")[-1]
    results = [m.content[0].text for m in last.messages if m.role == mpb.CHAT_ROLE_TOOL]
    assert results == ["The contract grants 25 days [[c1]].", "Leave pay is taxed as salary [[c2]]."]
    tool_names = {t.name for t in last.tools}
    assert {"transfer_to_law", "transfer_to_tax", "doc_retrieval"} <= tool_names
    assert "pass on what they answered" in last.messages[0].content[0].text
    final = events[-1]
    assert final.kind is TurnEventKind.COMPLETED
    assert final.text == "Leave is 25 days [[c1]] and taxed as salary [[c2]]."
    assert [c.handle for c in final.citations] == ["c1", "c2"]


async def test_a_supervisor_that_keeps_handing_off_is_stopped_at_its_bound(service: Any) -> None:
    stub, world = service

    def loops(request: mpb.ChatStreamRequest) -> list[Any]:
        if request.messages[0].content[0].text.startswith("You are the lead"):
            rounds = sum(m.role == mpb.CHAT_ROLE_TOOL for m in request.messages)
            return tool_call("transfer_to_law", {"task": "again"}, call_id=f"call-{rounds}")
        return experts_script(request)

    world.models.agent = loops
    with bound_identity(CALLER):
        law = await make_agent(stub, "law", "You are the law expert.")
        lead = await make_agent(stub, "lead", "You are the lead.")
        _, session = await session_on(
            stub,
            "loop",
            pb.ORCHESTRATION_MODE_SUPERVISOR,
            {"supervisor_agent_id": lead.id, "worker_agent_ids": [law.id], "max_hops": 2},
        )
        events = await world.ask(session, "Leave?", "t-sup-2")
    assert [e.reason for e in events if e.kind is TurnEventKind.HANDOFF and e.to_agent_id == law.id] == [
        "again",
        "again",
    ]
    assert len(asked_by(world.models, "You are the law")) == 4  # two handoffs, two requests each
    last = asked_by(world.models, "You are the lead")[-1]
    assert last.messages[-1].content[0].text.startswith("The handoff limit of this turn is reached")
    assert sum(e.is_final for e in events) == 1 and events[-1].kind is TurnEventKind.COMPLETED


async def test_cancelling_a_collaboration_stops_its_experts_at_once(service: Any) -> None:
    stub, world = service
    working = asyncio.Event()

    class Stuck(Models):
        def chat_stream(self, request: mpb.ChatStreamRequest) -> AsyncIterator[mpb.ChatStreamResponse]:
            inner = super().chat_stream(request)

            async def events() -> AsyncIterator[mpb.ChatStreamResponse]:
                if request.messages[0].content[0].text.startswith("You are the tax expert"):
                    working.set()
                    await asyncio.sleep(60)  # an expert still thinking when the user gives up
                async for event in inner:
                    yield event

            return events()

    world.models = Stuck(experts_script)
    world.runner._models = world.models  # type: ignore[attr-defined]
    with bound_identity(CALLER):
        _, session = await collaboration(stub, "parallel")
        request = ChatRequested(
            turn_id="t-panel-cancel", session_id=session, message="Leave?", knowledge_base_ids=["kb-1"]
        )
        turn = asyncio.create_task(world.runner.run(request))
        await asyncio.wait_for(working.wait(), 5)
        started = asyncio.get_running_loop().time()
        assert world.runner.cancel("t-panel-cancel", CALLER) is True
        result = await turn
        assert asyncio.get_running_loop().time() - started < 1.0
    assert result.final is not None and result.final.kind is TurnEventKind.CANCELLED
    assert sum(e.is_final for e in world.events if e.turn_id == "t-panel-cancel") == 1


def workflow_script(request: mpb.ChatStreamRequest) -> list[Any]:
    system = request.messages[0].content[0].text
    asked = request.messages[-1].content[0].text
    if system.startswith("You are triage"):
        return text("small talk" if "weather" in asked else "a policy question")
    if system.startswith("You are the reviewer"):
        return text("revise")
    if system.startswith("You are the drafter"):
        return text("a draft")
    if system.startswith("You are the writer"):
        return text("You get 25 days [[c1]].")
    raise AssertionError(system)


TRIAGE_FLOW = {
    "steps": [
        {
            "id": "classify",
            "kind": "agent",
            "agent_id": "TRIAGE",
            "inputs": {"question": {"from": "turn.question"}},
            "outputs": {"answer": "text"},
            "next": [{"to": "lookup", "when": {"output": "answer", "contains": "policy"}}, {"to": "reply"}],
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
            "agent_id": "WRITER",
            "inputs": {
                "question": {"from": "turn.question"},
                "notes": {"from": "lookup.result", "optional": True},
            },
            "outputs": {"answer": "text"},
        },
    ]
}


async def test_a_workflow_runs_its_steps_along_the_edges_that_hold_and_its_last_agent_answers(
    service: Any,
) -> None:
    stub, world = service
    world.models.agent = workflow_script
    with bound_identity(CALLER):
        triage = await make_agent(stub, "triage", "You are triage.")
        writer = await make_agent(stub, "writer", "You are the writer.")
        flow = json.loads(json.dumps(TRIAGE_FLOW).replace("TRIAGE", triage.id).replace("WRITER", writer.id))
        _, session = await session_on(stub, "flow", pb.ORCHESTRATION_MODE_WORKFLOW, flow)
        events = await world.ask(session, "How many leave days do I get?", "t-flow-1")
        shown = [
            (e.kind.value, e.to_agent_id or e.tool_name, e.reason or "", e.tool_call_id)
            for e in events
            if e.kind in (TurnEventKind.HANDOFF, TurnEventKind.TOOL_STARTED)
        ]
        assert shown == [
            ("handoff", triage.id, "step classify", "w-classify-1"),
            ("tool_started", "doc_retrieval", "", "w-lookup-1"),
            ("handoff", writer.id, "step reply", "w-reply"),
        ]
        [looked_up] = world.runner._tools.executed  # type: ignore[attr-defined]
        assert looked_up.name == "doc_retrieval" and dict(looked_up.arguments) == {
            "query": "How many leave days do I get?"
        }
        answer = asked_by(world.models, "You are the writer")[-1]
        prompt = prompt_of(answer)
        assert "[step classify]\na policy question" in prompt
        assert "[step lookup]\n[c1] Employees get 25 days of annual leave." in prompt
        assert "notes:\n[c1] Employees get 25 days" in prompt
        final = events[-1]
        assert final.kind is TurnEventKind.COMPLETED and final.text == "You get 25 days [[c1]]."
        assert [(c.handle, c.chunk_id) for c in final.citations] == [("c1", "chunk-1")]

        # Another question takes the default edge: no lookup, and the optional notes are left out.
        events = await world.ask(session, "Nice weather today?", "t-flow-2")
        assert [e.tool_name for e in events if e.kind is TurnEventKind.TOOL_STARTED] == []
        assert "[step classify]\nsmall talk\n\nThis step's task:\nNice weather today?\n\n" in prompt_of(
            asked_by(world.models, "You are the writer")[-1]
        )
        assert events[-1].kind is TurnEventKind.COMPLETED


async def test_a_workflow_loop_stops_at_its_bound_with_a_clear_error(service: Any) -> None:
    stub, world = service
    world.models.agent = workflow_script
    with bound_identity(CALLER):
        drafter = await make_agent(stub, "drafter", "You are the drafter.")
        reviewer = await make_agent(stub, "reviewer", "You are the reviewer.")
        writer = await make_agent(stub, "writer", "You are the writer.")
        flow = {
            "max_iterations": 2,
            "steps": [
                {"id": "draft", "kind": "agent", "agent_id": drafter.id, "next": [{"to": "review"}]},
                {
                    "id": "review",
                    "kind": "agent",
                    "agent_id": reviewer.id,
                    "outputs": {"verdict": "text"},
                    "next": [
                        {"to": "draft", "when": {"output": "verdict", "equals": "revise"}},
                        {"to": "publish"},
                    ],
                },
                {"id": "publish", "kind": "agent", "agent_id": writer.id},
            ],
        }
        _, session = await session_on(stub, "loop-flow", pb.ORCHESTRATION_MODE_WORKFLOW, flow)
        events = await world.ask(session, "Write the memo", "t-flow-3")
    [final] = [e for e in events if e.is_final]
    assert final.error_code == "workflow_stopped" and "'draft' would run 3 times; the workflow allows 2" in (
        final.error_message or ""
    )
    assert len(asked_by(world.models, "You are the drafter")) == 2


async def test_a_turn_without_a_session_runs_the_orchestrator_it_names_and_only_its_tenants(
    service: Any,
) -> None:
    stub, world = service
    with bound_identity(CALLER):
        billing = await make_agent(stub, "billing", "You are the billing desk.")
        front = await make_agent(stub, "front", "You are the front desk.")
        request = pb.CreateOrchestratorRequest(
            name="api-router",
            mode=pb.ORCHESTRATION_MODE_CONDITIONAL,
            config=config(
                {
                    "routes": [{"condition": {"keywords": ["invoice"]}, "agent_id": billing.id}],
                    "default_agent_id": front.id,
                }
            ),
            active=True,
        )
        router = (await stub.CreateOrchestrator(request)).orchestrator
        asked = ChatRequested(turn_id="t-api-1", message="my invoice?", orchestrator_id=router.id)
        result = await world.runner.run(asked)
        assert result.final is not None and result.final.text == "Billing here."
    with bound_identity(STRANGER):
        result = await world.runner.run(
            ChatRequested(turn_id="t-api-2", message="my invoice?", orchestrator_id=router.id)
        )
    assert result.final is not None and result.final.error_code == "orchestrator_not_found"
    assert router.id in (result.final.error_message or "")
    with pytest.raises(ValueError, match="orchestrator_id"):
        ChatRequested(turn_id="t-api-3", message="hi", orchestrator_id=router.id, agent_id=billing.id)


class ModelCatalogue:
    """modelhub's models of the caller's tenant, as the agent checks look them up."""

    def __init__(self, **models: mpb.Model) -> None:
        self.models = models

    async def get_model(self, model_id: str) -> mpb.Model:
        if model_id not in self.models:
            from knowsphere_clients.errors import NotFound

            raise NotFound(f"model {model_id} not found")
        return self.models[model_id]


PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9"
    "awAAAABJRU5ErkJggg=="
)


async def test_vision_needs_a_model_that_reads_images_and_such_an_agent_gets_the_images_as_parts(
    store: SqlSessionStore,
) -> None:
    catalogue = ModelCatalogue(
        qa=mpb.Model(id="qa", display_name="Text only", types=[mpb.MODEL_TYPE_KNOWLEDGE_QA]),
        vlm=mpb.Model(id="vlm", display_name="Sees", types=[mpb.MODEL_TYPE_KNOWLEDGE_QA, mpb.MODEL_TYPE_VLM]),
    )
    world = World(store, Models(lambda r: text("A chart of sales."), intent="C"))
    world.runner._agents = store  # type: ignore[attr-defined]
    servicer = ConversationServicer(store, world.history, world.cancel, world.forget, bindings=store)
    agents = AgentServicer(store, models=catalogue)
    binding = build_binding(servicer, agents, OrchestratorServicer(store, models=catalogue))
    async with serving("conversation", binding=binding) as channel:
        stub = CONTRACTS["conversation"].stub(channel)
        with bound_identity(CALLER):

            def agent(name: str, model: str, types: list[str]) -> pb.CreateAgentRequest:
                return pb.CreateAgentRequest(
                    name=name,
                    system_prompt=f"You are {name}.",
                    model_id=model,
                    model_types=types,
                    active=True,
                )

            blind = await refused(
                stub.CreateAgent(agent("blind", "qa", ["LLM", "VISION"])), grpc.StatusCode.INVALID_ARGUMENT
            )
            assert "model_types" in blind and "does not read images" in blind and "Text only" in blind
            unknown = await refused(
                stub.CreateAgent(agent("odd", "qa", ["LLM", "SMELL"])), grpc.StatusCode.INVALID_ARGUMENT
            )
            assert "model_types" in unknown and "SMELL" in unknown
            missing = await refused(
                stub.CreateAgent(agent("lost", "gone", ["LLM", "VISION"])), grpc.StatusCode.INVALID_ARGUMENT
            )
            assert "model_id" in missing
            plain = (await stub.CreateAgent(agent("plain", "qa", []))).agent
            assert list(plain.model_types) == ["LLM"]
            seer = (await stub.CreateAgent(agent("seer", "vlm", ["LLM", "VISION"]))).agent
            # Moving a VISION agent to a text-only model is refused the same way.
            moved = pb.UpdateAgentRequest(agent_id=seer.id, model_id="qa")
            assert "model_types" in await refused(stub.UpdateAgent(moved), grpc.StatusCode.INVALID_ARGUMENT)

            _, session = await session_on(
                stub,
                "desk",
                pb.ORCHESTRATION_MODE_CONDITIONAL,
                {
                    "routes": [{"condition": {"keywords": ["chart"]}, "agent_id": seer.id}],
                    "default_agent_id": plain.id,
                },
            )
            await world.runner.run(
                ChatRequested(
                    turn_id="t-seen", session_id=session, message="what is in this chart?", images=[PIXEL]
                )
            )
            question = world.models.requests[-1].messages[-1]
            assert [p.WhichOneof("part") for p in question.content] == ["text", "image"]
            assert world.models.requests[-1].model_id == "vlm"
            await world.runner.run(
                ChatRequested(turn_id="t-told", session_id=session, message="and this one?", images=[PIXEL])
            )
            # The text-only agent gets what the vision model saw, never the image itself.
            question = world.models.requests[-1].messages[-1]
            assert [p.WhichOneof("part") for p in question.content] == ["text"]
            assert world.models.described and world.models.requests[-1].model_id == "qa"

            # The model of a VISION agent loses VISION: an orchestrator naming it is refused when saved.
            catalogue.models["vlm"] = mpb.Model(
                id="vlm", display_name="Sees", types=[mpb.MODEL_TYPE_KNOWLEDGE_QA]
            )
            again = pb.CreateOrchestratorRequest(
                name="again",
                mode=pb.ORCHESTRATION_MODE_SINGLE,
                config=config({"agent_id": seer.id}),
                active=True,
            )
            assert "config.agent_id" in await refused(
                stub.CreateOrchestrator(again), grpc.StatusCode.INVALID_ARGUMENT
            )


async def test_images_reach_every_vision_agent_of_a_collaboration_and_a_supervisors_worker(
    store: SqlSessionStore,
) -> None:
    catalogue = ModelCatalogue(
        qa=mpb.Model(id="qa", types=[mpb.MODEL_TYPE_KNOWLEDGE_QA]),
        vlm=mpb.Model(id="vlm", types=[mpb.MODEL_TYPE_KNOWLEDGE_QA, mpb.MODEL_TYPE_VLM]),
    )

    def team(request: mpb.ChatStreamRequest) -> list[Any]:
        system = request.messages[0].content[0].text
        if system.startswith("You are the boss") and request.messages[-1].role != mpb.CHAT_ROLE_TOOL:
            return tool_call("transfer_to_seer", {"task": "describe the chart"}, call_id="call-h")
        return text(f"{system.split('.')[0]} answers.")

    world = World(store, Models(team, intent="E"))
    world.runner._agents = store  # type: ignore[attr-defined]
    servicer = ConversationServicer(store, world.history, world.cancel, world.forget, bindings=store)
    binding = build_binding(servicer, AgentServicer(store, models=catalogue), OrchestratorServicer(store))
    async with serving("conversation", binding=binding) as channel:
        stub = CONTRACTS["conversation"].stub(channel)
        with bound_identity(CALLER):

            async def agent(name: str, model: str, types: list[str]) -> pb.Agent:
                request = pb.CreateAgentRequest(
                    name=name,
                    system_prompt=f"You are the {name}.",
                    model_id=model,
                    model_types=types,
                    active=True,
                )
                return (await stub.CreateAgent(request)).agent

            seer = await agent("seer", "vlm", ["LLM", "VISION"])
            reader = await agent("reader", "qa", ["LLM"])
            boss = await agent("boss", "qa", ["LLM"])
            _, panel = await session_on(
                stub,
                "panel",
                pb.ORCHESTRATION_MODE_COLLABORATION,
                {"agent_ids": [seer.id, reader.id], "collaboration_strategy": "parallel"},
            )
            _, crew = await session_on(
                stub,
                "crew",
                pb.ORCHESTRATION_MODE_SUPERVISOR,
                {"supervisor_agent_id": boss.id, "worker_agent_ids": [seer.id]},
            )
            for session, turn in ((panel, "t-panel"), (crew, "t-crew")):
                start = len(world.models.requests)
                await world.runner.run(
                    ChatRequested(
                        turn_id=turn, session_id=session, message="what does this show?", images=[PIXEL]
                    )
                )
                assert world.events[-1].kind is TurnEventKind.COMPLETED, world.events[-1]
                asked = world.models.requests[start:]
                by_model = {
                    r.model_id: [p.WhichOneof("part") for p in r.messages[-1].content]
                    for r in asked
                    if r.messages[-1].role == mpb.CHAT_ROLE_USER
                }
                # The VISION agent saw the image itself; the others only as text.
                assert "image" in by_model.get("vlm", []), (
                    turn,
                    by_model,
                    [(r.model_id, r.messages[-1].role) for r in asked],
                )
                assert all("image" not in parts for model, parts in by_model.items() if model != "vlm"), (
                    by_model
                )
