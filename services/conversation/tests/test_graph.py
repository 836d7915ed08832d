"""The conversation graph end to end inside one process: a turn's events, its answer and citations, as
a client would see them, for every path (generate, ReAct with tools, extract without a model) and every
way a turn can fail.

The peers are in-process stand-ins speaking the contract's messages (``peers.py``); each test scripts
what the model says. The same paths over the real services and NATS are in
``tests/e2e/test_conversation.py``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients.errors import ModelFailure, ResourceExhausted
from knowsphere_contracts.events import AnswerKind, ChatRequested, ChatTurnEvent, TurnCompleted, TurnEventKind
from knowsphere_conversation.domain.graph import AgentConfig, TurnLimits, build_graph
from knowsphere_conversation.domain.turns import IDENTITY_REQUIRED, EventsUnpublishable, Outcome, TurnRunner
from knowsphere_runtime.identity import Identity, bound_identity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import CALLER, Memory, Models, Search, Tools, from_text, text, tool_call


class Harness:
    def __init__(
        self,
        models: Models,
        tools: Tools | None = None,
        search: Search | None = None,
        memory: Memory | None = None,
    ) -> None:
        self.models = models
        self.tools = tools or Tools()
        self.search = search or Search()
        self.events: list[ChatTurnEvent] = []
        self.completed: list[TurnCompleted] = []
        self.graph = graph = build_graph(InMemorySaver())

        async def publish(event: ChatTurnEvent) -> None:
            self.events.append(event)

        async def announce(event: TurnCompleted) -> None:
            self.completed.append(event)

        self.runner = TurnRunner(
            lambda: graph,
            models=models,
            tools=self.tools,
            memory=memory or Memory(),
            search=self.search,
            publish=publish,
            publish_completed=announce,
            limits=TurnLimits(max_tool_rounds=3),
        )

    async def ask(
        self,
        message: str,
        *,
        turn_id: str = "t1",
        session: str = "s1",
        kbs: Sequence[str] = ("kb-1",),
        caller: Identity | None = CALLER,
    ) -> list[ChatTurnEvent]:
        start = len(self.events)
        with bound_identity(caller):
            await self.runner.run(
                ChatRequested(
                    turn_id=turn_id, session_id=session, message=message, knowledge_base_ids=list(kbs)
                )
            )
        events = self.events[start:]
        assert [e.sequence for e in events] == list(range(len(events)))
        assert [e.is_final for e in events] == [False] * (len(events) - 1) + [True], [e.kind for e in events]
        return events


def kinds(events: Sequence[ChatTurnEvent]) -> list[str]:
    return [e.kind.value for e in events]


def answer_with_tool(request: mpb.ChatStreamRequest) -> list[Any]:
    """First request: search; once a tool result is in the prompt: answer citing c1 (and a made-up c9)."""
    if request.messages[-1].role == mpb.CHAT_ROLE_TOOL:
        return text("Employees get 25 days", " of leave [[c", "1]]. Also 3 sick days [[c9]].")
    return tool_call("doc_retrieval", {"query": "annual leave"})


async def test_a_greeting_is_answered_without_tools() -> None:
    harness = Harness(Models(lambda r: text("Hello! How can I help?"), intent="A"))
    events = await harness.ask("hi there")
    assert kinds(events) == ["started", "intent", "text_delta", "completed"]
    assert events[1].intent == "greeting" and events[1].route == "generate"
    assert events[-1].text == "Hello! How can I help?" and events[-1].answer_kind is AnswerKind.GENERATED
    # No tool runs; the request carries the turn's tool schemas (the cached prefix) with calls off.
    assert harness.tools.executed == []
    [request] = harness.models.requests
    assert request.tool_choice.mode == mpb.TOOL_CHOICE_MODE_NONE and [t.name for t in request.tools] == [
        "doc_retrieval"
    ]


async def test_a_knowledge_question_searches_then_answers_citing_only_real_sources() -> None:
    harness = Harness(Models(answer_with_tool))
    events = await harness.ask("How many days of leave do I get?")
    assert kinds(events)[:5] == ["started", "intent", "tool_started", "tool_finished", "sources"]
    assert events[1].route == "react"
    finished = events[3]
    assert finished.tool_name == "doc_retrieval" and finished.tool_ok and finished.duration_ms is not None
    final = events[-1]
    assert final.kind is TurnEventKind.COMPLETED
    # The made-up [[c9]] is never shown; it is counted.
    assert final.text == "Employees get 25 days of leave [[c1]]. Also 3 sick days ."
    assert "".join(e.text or "" for e in events if e.kind is TurnEventKind.TEXT_DELTA) == final.text
    assert final.removed_citations == 1
    assert [(c.handle, c.chunk_id, c.file_name) for c in final.citations] == [
        ("c1", "chunk-1", "handbook.pdf")
    ]
    [announced] = harness.completed
    assert [(d.document_id, d.knowledge_base_id) for d in announced.cited_documents] == [
        ("doc-handbook", "kb-1")
    ]
    # The tool saw the turn's switches; the model saw only the tools ListTools returned.
    assert list(harness.tools.executed[0].context.switches.knowledge_base_ids) == ["kb-1"]
    assert [t.name for t in harness.models.requests[0].tools] == ["doc_retrieval"]


async def test_each_request_of_a_tool_loop_extends_the_previous_one() -> None:
    harness = Harness(Models(answer_with_tool))
    await harness.ask("How many days of leave do I get?")
    first, second = harness.models.requests
    assert list(second.messages)[: len(first.messages)] == list(first.messages)
    assert second.messages[-1].role == mpb.CHAT_ROLE_TOOL


async def test_a_follow_up_is_rewritten_and_cannot_reuse_the_previous_turns_citations() -> None:
    def agent(request: mpb.ChatStreamRequest) -> list[Any]:
        if request.purpose == "conversation.generate" or any(
            m.role == mpb.CHAT_ROLE_TOOL for m in request.messages[-1:]
        ):
            return text("As said before [[c1]].")
        if request.messages[-1].content[0].text.endswith("Question: And for part-timers?"):
            return text("As said before [[c1]].")
        return answer_with_tool(request)

    harness = Harness(Models(agent))
    await harness.ask("How many days of leave do I get?", turn_id="t1")
    events = await harness.ask("And for part-timers?", turn_id="t2")
    rewrites = [r for r in harness.models.requests if r.purpose == "conversation.rewrite"]
    assert len(rewrites) == 1 and "And for part-timers?" in rewrites[0].messages[-1].content[0].text
    assert events[1].rewritten_query == "rewritten: Latest question: And for part-timers?"
    # The previous turn's question and answer are in the history the model saw.
    main = [r for r in harness.models.requests if r.purpose == "conversation.agent"][-1]
    history = [m.content[0].text for m in main.messages if m.content]
    assert "How many days of leave do I get?" in history
    final = events[-1]
    assert final.text == "As said before ." and final.removed_citations == 1 and final.citations == []


async def test_a_tool_that_keeps_failing_ends_the_turn_with_one_error() -> None:
    harness = Harness(Models(answer_with_tool), tools=Tools(fail=True))
    events = await harness.ask("How many days of leave do I get?")
    assert kinds(events) == ["started", "intent", "tool_started", "tool_finished", "error"]
    assert events[3].tool_ok is False and events[3].attempts == 3
    assert events[-1].error_code == "tool_failed" and "retrieval is down" in (events[-1].error_message or "")


async def test_a_model_stream_that_breaks_mid_answer_ends_with_one_error_event() -> None:
    broken = ResourceExhausted(
        "429",
        model=ModelFailure(
            code=ModelErrorCode.RATE_LIMITED, user_message="The model is busy; retry in a minute."
        ),
    )
    harness = Harness(Models(lambda r: [from_text("Employees get"), broken], intent="B"))
    events = await harness.ask("tell me a joke")
    assert kinds(events) == ["started", "intent", "text_delta", "error"]
    assert events[-1].error_code == "rate_limited"
    assert events[-1].error_message == "The model is busy; retry in a minute."


async def test_without_a_chat_model_a_question_gets_cited_sentences_labelled_as_extracted() -> None:
    passage = rpb.SearchResult(
        chunk_id="chunk-7",
        document_id="doc-handbook",
        knowledge_base_id="kb-1",
        file_name="handbook.pdf",
        page=4,
        heading_path=["Leave", "Annual leave"],
        text="Annual leave is 25 days per year. Leave requests go to your manager. The canteen opens at 8.",
    )
    search = Search([passage])
    harness = Harness(Models(lambda r: [], missing=True), search=search)
    events = await harness.ask("How many days of annual leave per year?")
    assert kinds(events) == ["started", "intent", "sources", "text_delta", "completed"]
    final = events[-1]
    assert final.answer_kind is AnswerKind.EXTRACTED
    assert "Annual leave is 25 days per year. [[c1]]" in (final.text or "")
    assert "canteen" not in (final.text or "")
    assert "No chat model is configured" in (final.text or "")
    [source] = final.citations
    assert (source.chunk_id, source.page, source.heading_path) == ("chunk-7", 4, ["Leave", "Annual leave"])
    assert search.queries == ["How many days of annual leave per year?"]


@pytest.mark.parametrize(
    ("message", "kbs", "expected"),
    [
        ("你好", ("kb-1",), "你好！"),
        ("hello", (), "Hello!"),
        ("What is our leave policy?", (), "no knowledge base is selected"),
    ],
)
async def test_without_a_chat_model_greetings_and_questions_without_knowledge_bases_get_a_fixed_reply(
    message: str, kbs: tuple[str, ...], expected: str
) -> None:
    harness = Harness(Models(lambda r: [], missing=True))
    events = await harness.ask(message, kbs=kbs)
    assert events[-1].kind is TurnEventKind.COMPLETED and events[-1].answer_kind is AnswerKind.FIXED
    assert expected in (events[-1].text or "")
    assert harness.search.queries == []


async def test_without_a_chat_model_a_question_nothing_matches_says_so() -> None:
    harness = Harness(Models(lambda r: [], missing=True), search=Search([]))
    events = await harness.ask("How many days of annual leave per year?")
    assert events[-1].answer_kind is AnswerKind.FIXED
    assert events[-1].text == "The selected knowledge bases have no passage that matches this question."


async def test_a_turn_without_identity_ends_with_one_error_naming_it() -> None:
    harness = Harness(Models(answer_with_tool))
    [final] = await harness.ask("hello", caller=None)
    assert final.error_code == IDENTITY_REQUIRED
    assert harness.models.requests == []


async def test_another_users_session_id_is_another_conversation() -> None:
    seen: list[list[str]] = []

    def agent(request: mpb.ChatStreamRequest) -> list[Any]:
        seen.append([m.content[0].text for m in request.messages if m.content])
        return text("ok")

    harness = Harness(Models(agent, intent="B"))
    await harness.ask("my secret is 42", turn_id="t1", session="shared")
    await harness.ask(
        "what is my secret?", turn_id="t2", session="shared", caller=Identity("other", "mallory")
    )
    assert not any("my secret is 42" in m for m in seen[-1])


async def test_the_asker_background_and_handoff_reach_the_main_request_in_their_segments() -> None:
    seen: list[mpb.ChatStreamRequest] = []

    def agent(request: mpb.ChatStreamRequest) -> list[Any]:
        seen.append(request)
        return text("ok")

    harness = Harness(
        Models(agent, intent="B"),
        memory=Memory(background="Works in finance.", handoff="Original request: Q3 report"),
    )
    await harness.ask("hello", turn_id="t1")
    first = [m.content[0].text for m in seen[0].messages]
    assert not any("Original request" in t for t in first)  # a session's first turn has no summary
    await harness.ask("hello again", turn_id="t2")
    texts = [m.content[0].text for m in seen[-1].messages]
    assert "Works in finance." not in texts[0]  # never in the cached system segment
    assert "Original request: Q3 report" in texts[1]
    assert "Works in finance." in texts[-1] and texts[-1].endswith("Question: hello again")


class Crash(BaseException):
    """The process dying in the middle of a turn (nothing in the turn catches it)."""


class Log:
    """The turn event log as the events stream keeps it."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness

    async def read(self, turn_id: str) -> list[ChatTurnEvent]:
        return [e for e in self._harness.events if e.turn_id == turn_id]


def restarted(harness: Harness, models: Models, tools: Tools) -> TurnRunner:
    """A new replica: new runner and peers, the same checkpoints and event stream."""

    async def publish(event: ChatTurnEvent) -> None:
        harness.events.append(event)

    async def announce(event: TurnCompleted) -> None:
        harness.completed.append(event)

    return TurnRunner(
        lambda: harness.graph,
        models=models,
        tools=tools,
        memory=Memory(),
        search=Search(),
        publish=publish,
        publish_completed=announce,
        limits=TurnLimits(),
        event_log=Log(harness),
    )


def shown_once(events: Sequence[ChatTurnEvent]) -> None:
    assert [e.sequence for e in events] == list(range(len(events)))
    assert sum(e.is_final for e in events) == 1 and events[-1].is_final
    assert kinds(events).count("started") == 1 and kinds(events).count("tool_started") == 1


async def test_a_turn_whose_replica_dies_in_the_tool_loop_resumes_and_shows_everything_once() -> None:
    class DyingTools(Tools):
        async def execute_tool(self, request: Any) -> Any:
            raise Crash

    harness = Harness(Models(answer_with_tool), tools=DyingTools())
    request = ChatRequested(
        turn_id="t-crash",
        session_id="s1",
        message="How many days of leave do I get?",
        knowledge_base_ids=["kb-1"],
    )
    with bound_identity(CALLER), pytest.raises(Crash):
        await harness.runner.run(request)
    assert kinds(harness.events) == ["started", "intent", "tool_started"]

    tools = Tools()
    with bound_identity(CALLER):
        result = await restarted(harness, Models(answer_with_tool), tools).run(request, redelivered=True)
    events = harness.events
    shown_once(events)
    assert result.final is events[-1] and events[-1].kind is TurnEventKind.COMPLETED
    assert events[-1].text == "Employees get 25 days of leave [[c1]]. Also 3 sick days ."
    assert [c.handle for c in events[-1].citations] == ["c1"]
    assert len(tools.executed) == 1  # the tool ran again on the new replica, the model did not start over
    assert len(harness.completed) == 1

    # Delivered once more (the ack was lost): answered already, nothing is shown or announced again.
    with bound_identity(CALLER):
        again = await restarted(harness, Models(answer_with_tool), Tools()).run(request, redelivered=True)
    assert again.final == events[-1] and len(harness.events) == len(events) and len(harness.completed) == 1


async def test_an_answer_cut_mid_stream_is_not_shown_twice_when_the_turn_resumes() -> None:
    def dying(request: mpb.ChatStreamRequest) -> list[Any]:
        if request.messages[-1].role == mpb.CHAT_ROLE_TOOL:
            return [from_text("Employees get 25 days"), Crash()]
        return answer_with_tool(request)

    harness = Harness(Models(dying))
    request = ChatRequested(
        turn_id="t-cut",
        session_id="s1",
        message="How many days of leave do I get?",
        knowledge_base_ids=["kb-1"],
    )
    with bound_identity(CALLER), pytest.raises(Crash):
        await harness.runner.run(request)
    with bound_identity(CALLER):
        await restarted(harness, Models(answer_with_tool), Tools()).run(request, redelivered=True)
    events = harness.events
    shown_once(events)
    streamed = "".join(e.text or "" for e in events if e.kind is TurnEventKind.TEXT_DELTA)
    assert streamed == events[-1].text == "Employees get 25 days of leave [[c1]]. Also 3 sick days ."


async def test_a_bus_outage_mid_answer_pauses_the_turn_without_a_final_event_and_it_resumes_after() -> None:
    harness = Harness(Models(answer_with_tool))
    stored = harness.events

    async def stalled_bus(event: ChatTurnEvent) -> None:
        if event.kind is TurnEventKind.TEXT_DELTA:
            raise EventsUnpublishable(f"event {event.sequence} of turn {event.turn_id} not acknowledged")
        stored.append(event)

    async def announce(event: TurnCompleted) -> None:
        harness.completed.append(event)

    paused = TurnRunner(
        lambda: harness.graph,
        models=Models(answer_with_tool),
        tools=Tools(),
        memory=Memory(),
        search=Search(),
        publish=stalled_bus,
        publish_completed=announce,
        limits=TurnLimits(),
        event_log=Log(harness),
    )
    request = ChatRequested(
        turn_id="t-outage",
        session_id="s1",
        message="How many days of leave do I get?",
        knowledge_base_ids=["kb-1"],
    )
    with bound_identity(CALLER), pytest.raises(EventsUnpublishable):
        await paused.run(request)
    # Nothing final was said (no turn_failed with a sequence already used), nothing announced.
    assert not any(e.is_final for e in stored) and harness.completed == []

    with bound_identity(CALLER):
        result = await restarted(harness, Models(answer_with_tool), Tools()).run(request, redelivered=True)
    shown_once(stored)
    assert result.final is stored[-1] and stored[-1].kind is TurnEventKind.COMPLETED
    streamed = "".join(e.text or "" for e in stored if e.kind is TurnEventKind.TEXT_DELTA)
    assert streamed == stored[-1].text == "Employees get 25 days of leave [[c1]]. Also 3 sick days ."
    assert len(harness.completed) == 1


async def test_a_second_turn_of_a_busy_session_waits_for_the_first() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: mpb.ChatStreamRequest) -> Any:
        started.set()
        await release.wait()
        for event in text("done"):
            yield event

    models = Models(lambda r: [], intent="B")
    models.chat_stream = slow  # type: ignore[method-assign,assignment]
    harness = Harness(models)
    first = ChatRequested(turn_id="t-a", session_id="same", message="one")
    second = ChatRequested(turn_id="t-b", session_id="same", message="two")
    with bound_identity(CALLER):
        running = asyncio.create_task(harness.runner.run(first))
        await started.wait()
        waiting = await harness.runner.run(second)
        release.set()
        done = await running
        after = await harness.runner.run(second)
    assert waiting.outcome is Outcome.BUSY and waiting.final is None
    assert done.outcome is Outcome.ANSWERED and after.outcome is Outcome.ANSWERED
    assert [e.turn_id for e in harness.events if e.is_final] == ["t-a", "t-b"]


async def test_explicit_statements_come_only_from_the_users_own_message() -> None:
    memory = Memory()
    harness = Harness(Models(answer_with_tool), memory=memory)
    await harness.ask("记住：我在财务部 — and how many days of leave do I get?")
    # The tool result and the answer went by without reaching memory; only the question did.
    assert memory.statements == ["记住：我在财务部 — and how many days of leave do I get?"]


def sized(window: int, prompt_tokens: int, pieces: tuple[str, ...] = ("ok",)) -> list[mpb.ChatStreamResponse]:
    started = mpb.ChatStreamResponse(started=mpb.ChatStarted(context_window=window))
    usage = mpb.ChatStreamResponse(usage=mpb.TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=3))
    return [started, *(from_text(p) for p in pieces), usage]


async def test_a_session_whose_last_prompt_filled_the_window_is_compacted_before_the_next_turn() -> None:
    prompts_seen: list[list[str]] = []
    fill = {"tokens": 1000}

    def agent(request: mpb.ChatStreamRequest) -> list[Any]:
        prompts_seen.append([m.content[0].text for m in request.messages if m.content])
        return sized(10_000, fill["tokens"], (f"answer {len(prompts_seen)}",))

    memory = Memory(compacts_to="Original request: the leave policy")
    harness = Harness(Models(agent, intent="B"), memory=memory)
    await harness.ask("first question", turn_id="t1")
    assert memory.compactions == []  # 10% of the window: nothing to do
    fill["tokens"] = 8600  # 86% of the window
    await harness.ask("second question", turn_id="t2")
    assert memory.compactions == []  # the trigger is the *previous* request's size
    events = await harness.ask("third question", turn_id="t3")
    [compaction] = memory.compactions
    assert compaction["context_window"] == 10_000 and compaction["trigger_prompt_tokens"] == 8600
    assert [m["content"] for m in compaction["messages"]][-1] == "third question"
    assert "compacted" in kinds(events)
    last = prompts_seen[-1]
    assert any("Original request: the leave policy" in text for text in last)
    # The compacted turns are no longer sent verbatim; the current question is.
    assert not any(text in ("first question", "answer 1", "second question") for text in last)
    assert last[-1].endswith("third question")


async def test_each_finished_turn_is_noted_in_working_memory_for_query_understanding() -> None:
    memory = Memory()
    harness = Harness(Models(answer_with_tool), memory=memory)
    await harness.ask("How many days of leave do I get?", turn_id="t1")
    assert memory.notes == [
        (
            "t1",
            "How many days of leave do I get?",
            "Employees get 25 days of leave [[c1]]. Also 3 sick days .",
        )
    ]


async def test_an_image_link_is_described_for_the_turn_and_kept_out_of_the_question_text() -> None:
    models = Models(lambda r: text("It shows sales rising."), intent="C")
    harness = Harness(models)
    events = await harness.ask("这张图说明了什么趋势？ https://example.com/q3-sales.png")
    assert events[-1].kind is TurnEventKind.COMPLETED
    [described] = models.described
    assert described.image.url == "https://example.com/q3-sales.png"
    assert "(The message has an image attached.)" in models.decisions[0].messages[0].content[0].text
    assert "https://example.com" not in models.decisions[0].messages[0].content[0].text
    question = models.requests[-1].messages[-1]
    assert "The attached image shows: a bar chart" in question.content[0].text
    assert len(question.content) == 1  # the default agent's model reads no images: only their description


async def test_an_agent_whose_model_reads_images_gets_them_as_image_parts() -> None:
    models = Models(lambda r: text("A chart."), intent="C")
    harness = Harness(models)
    harness.runner._agent = AgentConfig(vision=True)  # type: ignore[attr-defined]
    data_url = (
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9"
        "awAAAABJRU5ErkJggg=="
    )
    with bound_identity(CALLER):
        await harness.runner.run(
            ChatRequested(turn_id="t-img", session_id="s1", message="what is this?", images=[data_url])
        )
    question = models.requests[-1].messages[-1]
    assert [p.WhichOneof("part") for p in question.content] == ["text", "image"]
    assert question.content[1].image.url == data_url
    state = await harness.graph.aget_state({"configurable": {"thread_id": "acme/alice/s1"}})
    kept = [m["content"] for m in state.values["messages"] if m["role"] == "user"]
    assert kept == ["what is this? [image image/png]"]  # the history keeps no image bytes


async def test_an_image_without_a_vision_model_ends_the_turn_with_a_friendly_error() -> None:
    models = Models(lambda r: text("never"), vision=None)
    harness = Harness(models)
    events = await harness.ask("what is in https://example.com/photo.jpg ?")
    assert events[-1].kind is TurnEventKind.ERROR and events[-1].error_code == "vision_unavailable"
    assert "Add a model of type VLM" in (events[-1].error_message or "")
    assert models.requests == []


async def test_something_that_is_not_an_image_is_refused_naming_the_field() -> None:
    harness = Harness(Models(lambda r: text("never")))
    with bound_identity(CALLER):
        result = await harness.runner.run(
            ChatRequested(turn_id="t-bad", message="look", images=["ftp://x/y.png"])
        )
    assert result.final is not None and result.final.error_code == "invalid_input"
    assert (result.final.error_message or "").startswith("images: ")


async def test_a_deep_agent_takes_the_tool_path_even_without_a_knowledge_base_but_not_for_a_greeting() -> (
    None
):
    models = Models(answer_with_tool)
    harness = Harness(models)
    harness.runner._agent = AgentConfig(workspace=True, tool_names=("doc_retrieval",))  # type: ignore[attr-defined]
    events = await harness.ask("Draft a plan for the audit", kbs=())
    assert events[1].route == "react" and events[-1].kind is TurnEventKind.COMPLETED
    listed = harness.tools.listed[-1]
    # A deep agent plans whatever tools it was given, in its workspace.
    assert listed.workspace and list(listed.tool_names) == ["doc_retrieval", "write_plan"]
    assert harness.tools.executed[-1].context.workspace
    models.intent = "A"  # a greeting
    events = await harness.ask("hello", turn_id="t2")
    assert events[1].route == "generate"

    plain = Harness(Models(answer_with_tool))
    events = await plain.ask("Draft a plan for the audit", kbs=())
    assert events[1].route == "generate" and not plain.tools.executed
