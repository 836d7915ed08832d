"""Memory as the graph's ``Memory``: the asker background, the session's handoff summary and working
memory, the user's explicit "remember: …" statements, and handoff compaction.

Memory only enriches a turn, so a memory service that cannot answer (not built, unreachable, too
slow) leaves these empty and is logged; the turn goes on. Any other failure (a bad request) goes up,
except for statements and compaction, which never fail a turn either (their error is logged).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from google.protobuf import json_format

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_clients import MemoryClient
from knowsphere_clients.errors import DeadlineExceeded, ServiceError, Unavailable, Unimplemented
from knowsphere_conversation.domain.graph import Summary
from knowsphere_conversation.domain.layout import Message

log = structlog.get_logger(__name__)

OPTIONAL_FAILURES = (Unimplemented, Unavailable, DeadlineExceeded)
ROLES = {
    "user": mpb.SESSION_MESSAGE_ROLE_USER,
    "assistant": mpb.SESSION_MESSAGE_ROLE_ASSISTANT,
    "tool": mpb.SESSION_MESSAGE_ROLE_TOOL,
}
GIST_CHARS = 300
"""How much of an answer working memory keeps as its gist."""


class MemoryContext:
    def __init__(self, memory: MemoryClient) -> None:
        self._memory = memory

    async def background(self, knowledge_base_ids: Sequence[str], language: str) -> str:
        try:
            response = await self._memory.get_asker_background(
                mpb.GetAskerBackgroundRequest(knowledge_base_ids=list(knowledge_base_ids), language=language)
            )
        except OPTIONAL_FAILURES as error:
            log.warning("asker background unavailable; the turn goes on without it", error=str(error))
            return ""
        return response.background.rendered

    async def summary(self, session_id: str) -> Summary:
        try:
            response = await self._memory.get_session_summary(
                mpb.GetSessionSummaryRequest(session_id=session_id)
            )
        except OPTIONAL_FAILURES as error:
            log.warning("session summary unavailable; the turn goes on without it", error=str(error))
            return Summary()
        return _summary(response.summary)

    async def working_memory(self, session_id: str) -> str:
        try:
            response = await self._memory.get_working_memory(
                mpb.GetWorkingMemoryRequest(session_id=session_id)
            )
        except OPTIONAL_FAILURES as error:
            log.warning("working memory unavailable", error=str(error))
            return ""
        lines = [f"- {qa.question} → {qa.answer_gist}" for qa in response.working_memory.recent_qa]
        return "\n".join(lines)

    async def note_turn(self, session_id: str, turn_id: str, question: str, answer: str) -> None:
        try:
            current = await self._memory.get_working_memory(
                mpb.GetWorkingMemoryRequest(session_id=session_id)
            )
            recent = list(current.working_memory.recent_qa)
            recent.append(mpb.QaPoint(turn_id=turn_id, question=question, answer_gist=answer[:GIST_CHARS]))
            await self._memory.put_working_memory(
                mpb.PutWorkingMemoryRequest(
                    session_id=session_id, plan=list(current.working_memory.plan), recent_qa=recent
                )
            )
        except ServiceError as error:
            log.warning("working memory not updated", error=str(error))

    async def apply_statements(self, text: str, session_id: str, message_id: str) -> None:
        try:
            response = await self._memory.apply_statements(
                mpb.ApplyStatementsRequest(text=text, session_id=session_id, source_message_id=message_id)
            )
        except ServiceError as error:
            log.warning("memory statement not applied", error=str(error))
            return
        if response.remembered or response.forgotten:
            log.info(
                "memory statement applied",
                remembered=len(response.remembered),
                forgotten=len(response.forgotten),
            )

    async def compact(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        context_window: int,
        trigger_prompt_tokens: int,
        model_id: str,
        expected_revision: int,
    ) -> Summary | None:
        request = mpb.CompactSessionRequest(
            session_id=session_id,
            context_window=context_window,
            trigger_prompt_tokens=trigger_prompt_tokens,
            model_id=model_id,
            expected_revision=expected_revision,
            messages=[
                mpb.SessionMessage(
                    id=m["id"],
                    role=ROLES[m["role"]],
                    content=m["content"],
                    tool_call_ids=[c["id"] for c in m.get("tool_calls", [])],
                    tool_call_id=m.get("tool_call_id", ""),
                    tool_name=m.get("name", ""),
                )
                for m in messages
            ],
        )
        try:
            response = await self._memory.compact_session(request)
        except (TimeoutError, ServiceError) as error:
            log.warning("handoff compaction failed; the turn goes on with its full history", error=str(error))
            return None
        if not response.compacted:
            return None
        if response.degraded:
            log.warning("handoff compaction degraded to an extract", reason=response.degraded_reason)
        return _summary(response.summary)


def _summary(summary: mpb.SessionSummary) -> Summary:
    if not summary.HasField("handoff"):
        return Summary(revision=summary.revision)
    return Summary(
        text=render_handoff(summary.handoff),
        upto_message_id=summary.summary_upto_message_id,
        revision=summary.revision,
    )


def render_handoff(handoff: mpb.HandoffDocument) -> str:
    """The handoff document as the text placed above the history (deterministic)."""
    fields = json_format.MessageToDict(handoff, preserving_proto_field_name=True)
    lines = []
    if fields.get("original_request"):
        lines.append(f"Original request: {fields['original_request']}")
    for phase in fields.get("phases_done", []):
        lines.append(f"Done — {phase.get('title', '')}: {phase.get('summary', '')}")
    for path in fields.get("abandoned_paths", []):
        lines.append(f"Abandoned — {path.get('approach', '')}: {path.get('reason', '')}")
    for fact in fields.get("key_facts", []):
        lines.append(f"Fact: {fact}")
    for question in fields.get("open_questions", []):
        lines.append(f"Open: {question}")
    for ref in fields.get("result_refs", []):
        lines.append(
            f"Stored result {ref.get('ref_id', '')} ({ref.get('tool_name', '')}): {ref.get('summary', '')}"
        )
    return "\n".join(lines)


__all__ = ["MemoryContext", "render_handoff"]
