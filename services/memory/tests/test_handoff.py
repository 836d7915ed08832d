"""Handoff compaction: where the cut falls, what code extracts, and the degraded extract."""

from __future__ import annotations

import asyncio
import json

import pytest

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_memory.domain.handoff import (
    CompactionPolicy,
    SessionMessage,
    choose_cut,
    compact,
    extract_result_refs,
    refs_tokens,
    should_compact,
)
from knowsphere_telemetry import attributes

WINDOW = 1000


def user(mid: str, text: str) -> SessionMessage:
    return SessionMessage(mid, "user", text)


def assistant(mid: str, text: str, *calls: str) -> SessionMessage:
    return SessionMessage(mid, "assistant", text, tool_call_ids=calls)


def tool(mid: str, call: str, content: str, name: str = "doc_retrieval") -> SessionMessage:
    return SessionMessage(mid, "tool", content, tool_call_id=call, tool_name=name)


def stored(ref: str, summary: str) -> str:
    return json.dumps({"__stored": True, "__refId": ref, "__summary": summary, "__hint": "get_stored_data"})


def session(turns: int, words: int = 60) -> list[SessionMessage]:
    """``turns`` turns of question, tool call, stored tool result, answer; then the current question."""
    messages: list[SessionMessage] = []
    for t in range(turns):
        messages += [
            user(f"u{t}", f"question {t} " + "word " * words),
            assistant(f"a{t}c", "", f"call{t}"),
            tool(f"r{t}", f"call{t}", stored(f"ref-{t}", f"{t} policies found")),
            assistant(f"a{t}", f"answer {t} " + "word " * words),
        ]
    messages.append(user("current", "and what about travel?"))
    return messages


def refs_in(messages: list[SessionMessage]) -> list[str]:
    """The ref ids of the stored results among ``messages``, as :func:`session` writes them."""
    return [json.loads(m.content)["__refId"] for m in messages if m.role == "tool"]


class ScriptedModel:
    """Answers with the given text (or raises / hangs), recording what it was asked."""

    def __init__(self, answer: str | BaseException | None) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    async def complete_json(self, system: str, user: str, *, max_tokens: int) -> str:
        self.prompts.append(user)
        if self.answer is None:
            await asyncio.sleep(3600)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return str(self.answer)


GOOD = json.dumps(
    {
        "phases_done": [{"title": "Policy search", "summary": "Found 3 expense policies (ref-0)."}],
        "abandoned_paths": [{"approach": "web search", "reason": "not enabled"}],
        "key_facts": ["Expense cap is 5000 CNY"],
        "open_questions": ["travel policy?"],
        "result_refs": [{"ref_id": "invented-by-model"}],
    }
)


def test_compaction_triggers_at_85_percent_of_the_window() -> None:
    assert not should_compact(849, WINDOW)
    assert should_compact(850, WINDOW)
    assert not should_compact(10, 0)


def test_the_cut_keeps_about_30_percent_never_splits_a_tool_pair_nor_archives_the_question() -> None:
    messages = session(10)
    cut = choose_cut(messages, WINDOW)
    assert cut is not None
    assert cut.kept_tokens <= 0.30 * WINDOW
    assert messages[len(cut.archived)].role != "tool"
    archived_calls = {c for m in cut.archived for c in m.tool_call_ids}
    assert all(m.tool_call_id not in archived_calls for m in cut.kept if m.role == "tool")
    assert cut.kept[-1].id == "current" and "current" not in {m.id for m in cut.archived}
    assert list(cut.archived) + list(cut.kept) == messages


def test_every_boundary_the_cut_may_take_is_valid() -> None:
    messages = session(6)
    for share in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.9):
        cut = choose_cut(messages, WINDOW, target_share=share)
        assert cut is not None
        first_kept = cut.kept[0]
        assert first_kept.role != "tool"
        assert not (cut.archived[-1].role == "assistant" and cut.archived[-1].tool_call_ids)


def test_when_nothing_fits_the_target_everything_before_the_question_is_archived() -> None:
    messages = [*session(2, words=10), user("big", "x " * 10_000)]
    cut = choose_cut(messages, WINDOW)
    assert cut is not None and [m.id for m in cut.kept] == ["big"]


def test_nothing_to_archive_gives_no_cut() -> None:
    assert choose_cut([user("only", "hello")], WINDOW) is None
    assert choose_cut([], WINDOW) is None
    # Everything before the current question is already summarised.
    messages = session(3)
    assert choose_cut(messages, WINDOW, after_message_id="a2") is None


def test_a_span_already_summarised_is_not_given_again() -> None:
    messages = session(8)
    cut = choose_cut(messages, WINDOW, after_message_id="a3")
    assert cut is not None and cut.archived[0].id == "u4"


def test_result_refs_are_extracted_by_code_from_tool_messages_only() -> None:
    messages = [
        user("u", 'remember {"__refId": "from-user"}'),
        tool("t1", "c1", stored("ref-a", "12 rows")),
        tool(
            "t2",
            "c2",
            json.dumps({"items": [{"__refId": "ref-b", "__summary": "nested"}]}),
            name="grep_chunks",
        ),
        tool("t3", "c3", "not json"),
        tool("t4", "c4", stored("ref-a", "again")),
        assistant("a", '{"__refId": "from-assistant"}'),
    ]
    refs = extract_result_refs(messages)
    assert [(r.ref_id, r.tool_name, r.summary, r.message_id) for r in refs] == [
        ("ref-a", "doc_retrieval", "12 rows", "t1"),
        ("ref-b", "grep_chunks", "nested", "t2"),
    ]


async def test_compaction_with_the_model_builds_the_handoff_document() -> None:
    model = ScriptedModel(GOOD)
    messages = session(10)
    result = await compact(messages, WINDOW, model)
    assert result is not None and not result.degraded
    doc = result.handoff
    assert doc.original_request.startswith("question 0")
    assert [p.title for p in doc.phases_done] == ["Policy search"]
    assert list(doc.key_facts) == ["Expense cap is 5000 CNY"]
    assert [a.approach for a in doc.abandoned_paths] == ["web search"]
    # The index comes from the archived tool messages, never from the model's text.
    archived = result.archived_messages
    assert [r.ref_id for r in doc.result_refs] == refs_in(messages[:archived])
    assert len(doc.result_refs) >= 5
    assert "invented-by-model" not in {r.ref_id for r in doc.result_refs}
    assert result.summary_upto_message_id == messages[archived - 1].id
    assert result.kept_tokens <= 0.30 * WINDOW
    assert 0 < result.window_share < 0.5
    assert "question 0" in model.prompts[0] and "and what about travel" not in model.prompts[0]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ConnectionError("modelhub away"), "model unavailable"),
        ("Sure! Here is a summary of the conversation.", "not the handoff JSON"),
        ('{"phases_done": []}', "not the handoff JSON"),
        ('{"phases_done": [{"summary": "no title"}]}', "not the handoff JSON"),
        (None, "did not answer within"),
    ],
)
async def test_without_a_usable_model_answer_the_extract_is_used_and_says_so(
    answer: str | BaseException | None, reason: str
) -> None:
    # Room for the whole extract: the fitting to the window is the next test's.
    policy = CompactionPolicy(model_timeout_seconds=0.2, target_share=1.0, handoff_share=1.0)
    messages = session(10)
    messages[5] = tool("r1", "call1", json.dumps({"error": "index unavailable"}), name="grep_chunks")
    result = await compact(messages, WINDOW, ScriptedModel(answer), policy=policy)
    assert result is not None and result.degraded and reason in result.degraded_reason
    doc = result.handoff
    assert doc.original_request.startswith("question 0")
    assert doc.phases_done[0].title.startswith("question 0")
    assert "answer: answer 0" in doc.phases_done[0].summary
    assert [(a.approach, a.reason) for a in doc.abandoned_paths] == [("grep_chunks", "index unavailable")]
    assert [r.ref_id for r in doc.result_refs][:1] == ["ref-0"]


async def test_the_extract_is_shortened_to_keep_the_window_share_near_the_target() -> None:
    window = 4000
    result = await compact(session(30), window, None)
    assert result is not None and result.degraded
    doc = result.handoff
    assert result.kept_tokens <= 0.25 * window
    # Everything but the index of stored results fits the handoff's 5%; the index is never shortened.
    assert result.handoff_tokens - refs_tokens(doc.result_refs) <= max(0.05 * window, 256)
    assert [r.ref_id for r in doc.result_refs] == refs_in(session(30)[: result.archived_messages])
    assert doc.phases_done[0].title.endswith("earlier phases (not summarised)")
    assert doc.phases_done[-1].title.startswith("question 2")  # the newest archived turns stay
    assert result.window_share < 0.40


async def test_no_model_degrades_without_waiting() -> None:
    result = await asyncio.wait_for(compact(session(10), WINDOW, None), 1)
    assert result is not None and result.degraded and "no model" in result.degraded_reason


async def test_a_second_compaction_carries_the_first_forward() -> None:
    messages = session(20)
    first = await compact(messages[:41], WINDOW, ScriptedModel(GOOD))
    assert first is not None
    second = await compact(
        messages,
        WINDOW,
        ScriptedModel(GOOD.replace("Policy search", "Travel search")),
        previous=first.handoff,
        previous_upto_message_id=first.summary_upto_message_id,
    )
    assert second is not None
    assert [p.title for p in second.handoff.phases_done] == ["Policy search", "Travel search"]
    refs = [r.ref_id for r in second.handoff.result_refs]
    assert refs == sorted(set(refs), key=refs.index)  # each once
    upto = [m.id for m in messages].index(second.summary_upto_message_id)
    assert refs == refs_in(messages[: upto + 1]) and len(refs) > len(first.handoff.result_refs)
    assert second.handoff.original_request == first.handoff.original_request


async def test_compaction_spans_name_their_steps(spans) -> None:  # type: ignore[no-untyped-def]
    await compact(session(10), WINDOW, ScriptedModel("junk"))
    names = {s.name for s in spans.get_finished_spans()}
    assert {
        "memory.compaction",
        "memory.compaction.cut",
        "memory.compaction.model",
        "memory.compaction.extract",
    } <= names
    [root] = [s for s in spans.get_finished_spans() if s.name == "memory.compaction"]
    assert root.attributes is not None and root.attributes[attributes.COMPACTION_DEGRADED] is True


def test_the_document_is_a_contract_message() -> None:
    assert mpb.HandoffDocument.DESCRIPTOR.full_name == "knowsphere.memory.v1.HandoffDocument"
