"""What a provider's prompt cache can reuse across the main requests of a session.

What a user notices (in latency and cost): each request of a tool loop repeats the one before it byte
for byte and only adds the call and its result; a new turn repeats everything of the previous request
above that turn's question (tools, system and task segments, handoff summary, history), even though
the asker's background changes from turn to turn; the history window moves a block of turns at a time,
so a long session loses its cached history once every few turns rather than on every turn; flipping
web search changes the request from the task segment on, never the system segment before it; and
after a compaction the request still repeats the tools, system and task segments.

Requests are compared as a provider receives them: tool schemas, then the messages, as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnCompleted, TurnEventKind
from knowsphere_conversation.domain import prompts
from knowsphere_conversation.domain.graph import TurnLimits, build_graph
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_runtime.identity import bound_identity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import CALLER, Memory, Models, Search, Tools, from_text, text, tool_call

MAIN_PURPOSES = ("conversation.agent", "conversation.generate")


class ChangingBackground(Memory):
    """Memory whose background block (with its own header, as memory renders it) changes every turn."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self.asked = 0

    async def background(self, knowledge_base_ids: Sequence[str], language: str) -> str:
        self.asked += 1
        return (
            "About the person asking (use it to resolve references; it is not the question):\n"
            f"Frequently consulted documents:\n- handbook.pdf (cited {self.asked} times)"
        )


class SwitchedTools(Tools):
    """The tool runner trimming its list by the turn's switches, as ListTools does."""

    async def list_tools(self, request: tpb.ListToolsRequest) -> tpb.ListToolsResponse:
        listed = await super().list_tools(request)
        schema = '{"properties":{"query":{"type":"string"}},"type":"object"}'
        if request.switches.web_search:
            listed.tools.append(
                tpb.ToolSpec(name="web_search", description="search the web", parameters_json_schema=schema)
            )
        listed.tools.append(
            tpb.ToolSpec(name="write_plan", description="plan", parameters_json_schema=schema)
        )
        return listed


def searching_agent(request: mpb.ChatStreamRequest) -> list[Any]:
    if request.messages[-1].role == mpb.CHAT_ROLE_TOOL:
        return text("Employees get 25 days of leave [[c1]].")
    return tool_call("doc_retrieval", {"query": "annual leave"})


class Session:
    def __init__(
        self, models: Models, memory: Memory, limits: TurnLimits, tools: Tools | None = None
    ) -> None:
        self.models = models
        self.events: list[ChatTurnEvent] = []
        graph = build_graph(InMemorySaver())

        async def publish(event: ChatTurnEvent) -> None:
            self.events.append(event)

        async def announce(event: TurnCompleted) -> None:
            return None

        self.runner = TurnRunner(
            lambda: graph,
            models=models,
            tools=tools or Tools(),
            memory=memory,
            search=Search(),
            publish=publish,
            publish_completed=announce,
            limits=limits,
        )
        self.turns: list[list[mpb.ChatStreamRequest]] = []

    async def ask(self, message: str, *, web_search: bool = False) -> list[mpb.ChatStreamRequest]:
        before = len(self.main())
        number = len(self.turns) + 1
        with bound_identity(CALLER):
            await self.runner.run(
                ChatRequested(
                    turn_id=f"t{number}",
                    session_id="s1",
                    message=message,
                    knowledge_base_ids=["kb-1"],
                    web_search=web_search,
                )
            )
        assert self.events[-1].kind is TurnEventKind.COMPLETED, self.events[-1]
        self.turns.append(self.main()[before:])
        return self.turns[-1]

    def main(self) -> list[mpb.ChatStreamRequest]:
        return [r for r in self.models.requests if r.purpose in MAIN_PURPOSES]


def _message(message: mpb.ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": [p.text for p in message.content]}
    if message.tool_calls:
        out["tool_calls"] = [[c.id, c.name, c.arguments_json] for c in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def _tools(request: mpb.ChatStreamRequest) -> str:
    return json.dumps(
        [
            {"name": t.name, "description": t.description, "parameters": json.loads(t.parameters_json_schema)}
            for t in request.tools
        ]
    )


def rendered(request: mpb.ChatStreamRequest) -> bytes:
    """The request as a provider receives it: tool schemas, then the messages."""
    return (_tools(request) + json.dumps([_message(m) for m in request.messages])).encode()


def head(request: mpb.ChatStreamRequest, count: int) -> bytes:
    """The bytes the rendering of ``request`` opens with, up to the end of its first ``count`` messages."""
    return (_tools(request) + json.dumps([_message(m) for m in request.messages[:count]])[:-1]).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def question_index(request: mpb.ChatStreamRequest) -> int:
    """Where this turn's segment starts: its question (the last user message)."""
    return max(i for i, m in enumerate(request.messages) if m.role == mpb.CHAT_ROLE_USER)


def history_turns(request: mpb.ChatStreamRequest) -> int:
    return sum(1 for m in request.messages[1 : question_index(request)] if m.role == mpb.CHAT_ROLE_USER)


async def history_moves(slide_turns: int, turns: int = 13) -> tuple[list[int], list[int]]:
    """Runs a session of ``turns`` searched questions (keep_turns 8); returns the turns whose first
    request did not repeat the previous request down to the previous question, and each turn's
    history length. Checks on the way that a tool loop's requests extend each other."""
    session = Session(Models(searching_agent), ChangingBackground(), TurnLimits(slide_turns=slide_turns))
    moved: list[int] = []
    previous: mpb.ChatStreamRequest | None = None
    for number in range(1, turns + 1):
        first, *more = await session.ask(f"Question {number} about leave?")
        for earlier, later in zip([first, *more], more, strict=False):
            # A tool round only adds the call and its result.
            assert rendered(later).startswith(rendered(earlier)[:-1])
            assert later.messages[: len(earlier.messages)] == earlier.messages
        if previous is not None:
            shared = common_prefix(rendered(previous), rendered(first))
            # The tools, system and task segments are always repeated.
            assert shared >= len(head(previous, 1))
            if shared < len(head(previous, question_index(previous))):
                moved.append(number)
        previous = more[-1] if more else first
    return moved, [history_turns(requests[0]) for requests in session.turns]


async def test_each_request_repeats_the_previous_one_up_to_its_turn_and_the_history_moves_by_blocks() -> None:
    moved, lengths = await history_moves(slide_turns=4)
    # The 10th turn has 9 finished turns before it: the window drops the oldest four, then holds
    # its first turn for the next three turns; the 14th would drop four more.
    assert moved == [10]
    assert lengths == [0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8]
    # Moving by one turn keeps 8 turns but loses the cached history on every turn past the 9th.
    moved, lengths = await history_moves(slide_turns=1)
    assert moved == [10, 11, 12, 13]
    assert lengths[-4:] == [8, 8, 8, 8]


async def test_the_asker_background_is_placed_once_as_memory_renders_it_before_the_question() -> None:
    background = "About the person asking (use it to resolve references; it is not the question):\n- Finance"
    session = Session(Models(searching_agent), Memory(background=background), TurnLimits())
    [first, _] = await session.ask("How many days of leave?")
    assert first.messages[-1].content[0].text == f"{background}\n\nQuestion: How many days of leave?"


async def test_flipping_web_search_changes_the_request_from_the_task_segment_on_never_the_system() -> None:
    session = Session(Models(searching_agent), Memory(), TurnLimits(), tools=SwitchedTools())
    [_, off] = await session.ask("How many days of leave?")
    [on, _] = await session.ask("And on the web?", web_search=True)
    system = prompts.system_segment(prompts.DEFAULT_IDENTITY)
    before, after = off.messages[0].content[0].text, on.messages[0].content[0].text
    assert before.startswith(system) and after.startswith(system)
    assert before != after
    assert common_prefix(before.encode(), after.encode()) >= len(system.encode())
    assert "- web search: on" in after[len(system) :]
    # The tool schemas the switch does not touch are sent as before, in the same order.
    assert [t for t in on.tools if t.name != "web_search"] == list(off.tools)
    # The history after the task segment is the previous turn, as it would be without the flip.
    assert [m.content[0].text for m in on.messages[1:3]] == [
        "How many days of leave?",
        "Employees get 25 days of leave [[c1]].",
    ]


async def test_after_a_compaction_the_request_still_repeats_the_tools_system_and_task_segments() -> None:
    def agent(request: mpb.ChatStreamRequest) -> list[Any]:
        started = mpb.ChatStreamResponse(started=mpb.ChatStarted(context_window=10_000))
        usage = mpb.ChatStreamResponse(usage=mpb.TokenUsage(prompt_tokens=8600, completion_tokens=3))
        return [started, from_text("ok"), usage]

    memory = Memory(compacts_to="Original request: the leave policy")
    session = Session(Models(agent, intent="B"), memory, TurnLimits())
    [before] = await session.ask("first question")
    [after] = await session.ask("second question")
    assert memory.compactions and any(e.kind is TurnEventKind.COMPACTED for e in session.events)
    shared = common_prefix(rendered(before), rendered(after))
    # The handoff summary is new: it comes right after the system message, which is repeated whole.
    assert shared >= len(head(before, 1))
    assert after.messages[1].content[0].text.endswith("Original request: the leave policy")
