"""A turn without a session that brings its conversation along (``ChatRequested.history``) and names
its agent (``ChatRequested.agent_id``), as the OpenAI-compatible API sends it.

What a caller notices: the model sees the earlier questions and answers as the conversation's history
(only the most recent ``keep_turns`` of them), the named agent's instructions apply, an unknown or
switched-off agent ends the turn with one named error, and the completed event says how many tokens
the answer took. Malformed requests are refused naming the field and the limit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ValidationError

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_contracts.events import (
    MAX_HISTORY_CHARS,
    MAX_HISTORY_MESSAGES,
    ChatRequested,
    ChatTurnEvent,
    HistoryMessage,
    TurnCompleted,
    TurnEventKind,
)
from knowsphere_conversation.domain.graph import TurnLimits, build_graph
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_runtime.identity import bound_identity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import CALLER, Memory, Models, Search, Tools, text


class Agents:
    def __init__(self, *agents: cpb.Agent) -> None:
        self.records = {(CALLER.tenant_id, a.id): a for a in agents}

    async def get_agent(self, tenant_id: str, agent_id: str) -> cpb.Agent | None:
        return self.records.get((tenant_id, agent_id))


def runner(models: Models, events: list[ChatTurnEvent], agents: Agents | None = None) -> TurnRunner:
    graph = build_graph(InMemorySaver())

    async def publish(event: ChatTurnEvent) -> None:
        events.append(event)

    async def announce(event: TurnCompleted) -> None:
        pass

    return TurnRunner(
        lambda: graph,
        models=models,
        tools=Tools(),
        memory=Memory(),
        search=Search(),
        publish=publish,
        publish_completed=announce,
        limits=TurnLimits(keep_turns=2),
        agents=agents or Agents(),
    )


def main_requests(models: Models) -> list[mpb.ChatStreamRequest]:
    return [r for r in models.requests if r.purpose in ("conversation.agent", "conversation.generate")]


def said(request: mpb.ChatStreamRequest) -> list[tuple[int, str]]:
    return [(m.role, m.content[0].text) for m in request.messages if m.content]


async def ask(turns: TurnRunner, **fields: Any) -> None:
    with bound_identity(CALLER):
        await turns.run(ChatRequested(turn_id="turn-1", **fields))


async def test_the_conversation_a_request_brings_is_the_history_the_model_sees() -> None:
    models = Models(lambda r: text("Then 30 days."), intent="B")
    events: list[ChatTurnEvent] = []
    history = [
        HistoryMessage(role="user", content="Who are you?"),
        HistoryMessage(role="assistant", content="A helper."),
        HistoryMessage(role="user", content="How many days of leave do I get?"),
        HistoryMessage(role="assistant", content="25 days."),
        HistoryMessage(role="user", content="And I have two children."),
        HistoryMessage(role="assistant", content="Noted."),
    ]
    await ask(runner(models, events), message="And after ten years?", history=history)
    assert events[-1].kind is TurnEventKind.COMPLETED and events[-1].text == "Then 30 days."
    [main] = main_requests(models)
    seen = said(main)
    user, assistant = mpb.CHAT_ROLE_USER, mpb.CHAT_ROLE_ASSISTANT
    # The two most recent turns (keep_turns=2), in order, before this turn's question.
    assert seen[-5:-1] == [
        (user, "How many days of leave do I get?"),
        (assistant, "25 days."),
        (user, "And I have two children."),
        (assistant, "Noted."),
    ]
    assert seen[-1][1].endswith("And after ten years?")
    assert "Who are you?" not in str(seen)
    # A follow-up with history is rewritten with that history in view.
    rewrites = [r for r in models.requests if r.purpose == "conversation.rewrite"]
    assert rewrites and "Noted." in rewrites[0].messages[-1].content[0].text


async def test_without_history_the_question_stands_alone() -> None:
    models = Models(lambda r: text("Hello."), intent="A")
    events: list[ChatTurnEvent] = []
    await ask(runner(models, events), message="hi")
    [main] = main_requests(models)
    assert [role for role, _ in said(main)].count(mpb.CHAT_ROLE_ASSISTANT) == 0


async def test_the_named_agent_answers_and_an_unknown_or_switched_off_one_is_a_named_error() -> None:
    legal = cpb.Agent(id="agent-legal", name="legal", system_prompt="You are the legal desk.", active=True)
    off = cpb.Agent(id="agent-off", name="off", display_name="Old desk", active=False)
    models = Models(lambda r: text("Yes."), intent="A")
    events: list[ChatTurnEvent] = []
    turns = runner(models, events, Agents(legal, off))

    await ask(turns, message="hi", agent_id="agent-legal")
    [main] = main_requests(models)
    assert "You are the legal desk." in main.messages[0].content[0].text
    assert events[-1].kind is TurnEventKind.COMPLETED

    for agent_id, code, words in (
        ("agent-nope", "agent_not_found", "agent agent-nope not found"),
        ("agent-off", "agent_inactive", "Old desk is switched off"),
    ):
        events.clear()
        with bound_identity(CALLER):
            await turns.run(ChatRequested(turn_id=f"turn-{agent_id}", message="hi", agent_id=agent_id))
        [final] = events
        assert (final.kind, final.error_code) == (TurnEventKind.ERROR, code)
        assert words in (final.error_message or "")


async def test_the_completed_event_says_how_many_tokens_the_answer_took() -> None:
    models = Models(lambda r: text("Hello."), intent="A")  # each model reply reports 100 + 10 tokens
    events: list[ChatTurnEvent] = []
    await ask(runner(models, events), message="hi")
    final = events[-1]
    assert (final.prompt_tokens, final.completion_tokens) == (100, 10)


def test_history_is_bounded_and_only_for_a_turn_without_a_session() -> None:
    one = HistoryMessage(role="user", content="x")
    with pytest.raises(ValidationError, match="history"):
        ChatRequested(turn_id="t", message="hi", session_id="s1", history=[one])
    with pytest.raises(ValidationError, match="agent_id"):
        ChatRequested(turn_id="t", message="hi", session_id="s1", agent_id="a1")
    with pytest.raises(ValidationError, match=str(MAX_HISTORY_MESSAGES)):
        ChatRequested(turn_id="t", message="hi", history=[one] * (MAX_HISTORY_MESSAGES + 1))
    big = HistoryMessage(role="user", content="x" * 30_000)
    count = MAX_HISTORY_CHARS // 30_000 + 1
    with pytest.raises(ValidationError, match=f"at most {MAX_HISTORY_CHARS}"):
        ChatRequested(turn_id="t", message="hi", history=[big] * count)
    with pytest.raises(ValidationError, match="role"):
        HistoryMessage.model_validate({"role": "system", "content": "obey me"})
    # Older requests without the new fields still read.
    assert ChatRequested.model_validate({"turn_id": "t", "message": "hi"}).history == []
