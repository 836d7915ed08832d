"""The main request's layout: what a provider's prompt cache sees.

What a user notices (in latency and cost): a new turn's request shares the previous turns' bytes, and
flipping a switch (web search on) changes the request from the task segment on — never the system
segment before it — while the turn's own context sits after the history.
"""

from __future__ import annotations

import json

from knowsphere_conversation.domain import prompts
from knowsphere_conversation.domain.layout import Message, build_request_messages, finished_turns


def turn(turn_id: str, question: str, answer: str) -> list[Message]:
    return [
        Message(id=f"{turn_id}-q", turn_id=turn_id, role="user", content=question),
        Message(id=f"{turn_id}-a", turn_id=turn_id, role="assistant", content=answer, final=True),
    ]


def request(*, web: bool, history: list[Message], question: str, context: str = "") -> bytes:
    messages = build_request_messages(
        system=prompts.system_segment(prompts.DEFAULT_IDENTITY, [("pptx", "make slides")]),
        task=prompts.task_segment(knowledge_bases=1, web_search=web, knowledge_graph=False, language=""),
        handoff="",
        history=history,
        context=context,
        turn=[Message(id="q", turn_id="now", role="user", content=question)],
    )
    # As a provider receives it: the messages as JSON (OpenAI's chat format).
    body = [{"role": m.role, "content": [p.text for p in m.content]} for m in messages]
    return json.dumps(body, ensure_ascii=False).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_flipping_web_search_changes_bytes_only_from_the_task_segment_on() -> None:
    off = request(web=False, history=[], question="q")
    on = request(web=True, history=[], question="q")
    system = json.dumps(prompts.system_segment(prompts.DEFAULT_IDENTITY, [("pptx", "make slides")]))[1:-1]
    assert off != on
    assert common_prefix(off, on) > off.index(system.encode()) + len(system.encode())


def test_a_new_turn_repeats_the_previous_request_as_its_prefix_up_to_the_turn_context() -> None:
    history = turn("t1", "How many days of leave?", "25 days [[c1]].")
    first = request(
        web=False, history=[], question="How many days of leave?", context="Search query: leave days"
    )
    second = request(web=False, history=history, question="And sick days?", context="Search query: sick days")
    shared = common_prefix(first, second)
    # Everything up to the first turn's question is shared (system and task segments); the
    # previous turn then follows as history, so the next turn again shares all of it.
    assert shared >= first.index(b"Search query: leave days") - 40
    third = request(web=False, history=history + turn("t2", "And sick days?", "10 days."), question="q3")
    assert common_prefix(second, third) >= second.index(b"Search query: sick days") - 40


def test_the_history_is_the_last_finished_turns_verbatim_without_tool_steps() -> None:
    messages = turn("t1", "q1", "a1") + turn("t2", "q2", "a2") + turn("t3", "q3", "a3")
    messages.insert(1, Message(id="t1-call", turn_id="t1", role="assistant", content="", tool_calls=[]))
    messages.insert(
        2, Message(id="t1-tool", turn_id="t1", role="tool", content="raw result", tool_call_id="x")
    )
    messages.append(Message(id="now-q", turn_id="now", role="user", content="q4"))
    kept = finished_turns(messages, "now", keep_turns=2)
    assert [m["content"] for m in kept] == ["q2", "a2", "q3", "a3"]


def test_the_history_window_holds_at_most_keep_turns_and_moves_a_block_at_a_time() -> None:
    def window(finished: int, keep: int, slide: int) -> list[str]:
        messages = [m for n in range(1, finished + 1) for m in turn(f"t{n}", f"q{n}", f"a{n}")]
        return [m["content"] for m in finished_turns(messages, "now", keep, slide) if m["role"] == "user"]

    assert window(8, keep=8, slide=4) == [f"q{n}" for n in range(1, 9)]
    # One turn too many: the oldest four go at once, and the window starts at q5 until q13 arrives.
    assert [window(n, keep=8, slide=4)[0] for n in (9, 10, 11, 12, 13)] == ["q5", "q5", "q5", "q5", "q9"]
    assert max(len(window(n, keep=8, slide=4)) for n in range(30)) == 8
    assert min(len(window(n, keep=8, slide=4)) for n in range(8, 30)) == 5
    # The step is at most half the window; a step of one is the plain sliding window.
    assert window(3, keep=2, slide=4) == ["q2", "q3"]
    assert window(12, keep=8, slide=1) == [f"q{n}" for n in range(5, 13)]
    assert window(5, keep=0, slide=4) == []
