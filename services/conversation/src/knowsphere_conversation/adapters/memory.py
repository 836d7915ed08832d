"""Memory as the graph's ``Memory``: the asker background and the session's handoff summary.

Both only enrich a turn, so a memory service that cannot answer (not built, unreachable, too slow)
leaves them empty and is logged; the turn goes on. Any other failure (a bad request) goes up.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from google.protobuf import json_format

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_clients import MemoryClient
from knowsphere_clients.errors import DeadlineExceeded, Unavailable, Unimplemented

log = structlog.get_logger(__name__)

OPTIONAL_FAILURES = (Unimplemented, Unavailable, DeadlineExceeded)


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

    async def handoff(self, session_id: str) -> str:
        try:
            response = await self._memory.get_session_summary(
                mpb.GetSessionSummaryRequest(session_id=session_id)
            )
        except OPTIONAL_FAILURES as error:
            log.warning("session summary unavailable; the turn goes on without it", error=str(error))
            return ""
        summary = response.summary
        if not summary.HasField("handoff"):
            return ""
        return render_handoff(summary.handoff)


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
