"""Per-session memory over gRPC: the handoff summary, its compaction, and the working memory.

The summary is written either by ``CompactSession`` — the conversation gives the session's messages and
the window, memory cuts, writes the handoff document (``knowsphere_memory.domain.handoff``, the model
through modelhub) and stores it — or directly by ``PutSessionSummary``; both store through one path,
so a retried write of the same content succeeds without a new revision and a stale expected revision is
ABORTED. The working memory keeps at most ``working_memory_max_qa`` Q&A points (the oldest are dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc
from opentelemetry import trace

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import SessionMessageRole
from knowsphere_memory.api import convert
from knowsphere_memory.api.requests import Clock, caller, optional_id, required_id, utc_now
from knowsphere_memory.domain.handoff import CompactionPolicy, HandoffModel, SessionMessage, compact
from knowsphere_memory.domain.ports import MemoryStore, RevisionConflict
from knowsphere_memory.domain.records import Owner, StoredSummary
from knowsphere_memory.settings import Settings
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid
from knowsphere_telemetry import attributes

HandoffModels = Callable[[str], HandoffModel | None]
"""The model writing handoff documents for a model id (empty: the tenant's default), or None when memory
has no model (compaction then uses the deterministic extract)."""


def no_handoff_model(model_id: str) -> HandoffModel | None:
    return None


def stale_revision(expected: int, stored: int) -> RequestError:
    return RequestError(
        grpc.StatusCode.ABORTED,
        f"expected_revision: {expected}; the stored revision is {stored}",
        field="expected_revision",
    )


class SessionsServicer:
    """GetSessionSummary, PutSessionSummary, CompactSession, GetWorkingMemory, PutWorkingMemory,
    DeleteSessionMemory."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: MemoryStore,
        clock: Clock = utc_now,
        handoff_models: HandoffModels = no_handoff_model,
    ) -> None:
        self._settings = settings
        self._store = store
        self._clock = clock
        self._handoff_models = handoff_models

    def _session(self, value: str) -> str:
        return required_id("session_id", value, self._settings.max_id_chars)

    async def GetSessionSummary(self, request: mpb.GetSessionSummaryRequest, context: Any) -> Any:
        async def work() -> mpb.GetSessionSummaryResponse:
            session = self._session(request.session_id)
            stored = await self._store.get_summary(caller(), session)
            return mpb.GetSessionSummaryResponse(summary=convert.session_summary(session, stored))

        return await answer(context, work)

    async def _write_summary(
        self,
        owner: Owner,
        session: str,
        handoff: mpb.HandoffDocument,
        upto: str,
        trigger_prompt_tokens: int,
        expected: int | None,
        *,
        handoff_field: str,
    ) -> StoredSummary:
        """The one path every summary is stored by: size checked, stale expectations ABORTED."""
        size = handoff.ByteSize()
        if size > self._settings.summary_max_bytes:
            raise invalid(handoff_field, f"{size} bytes; the limit is {self._settings.summary_max_bytes}")
        try:
            return await self._store.put_summary(
                owner, session, handoff, upto, trigger_prompt_tokens, expected, self._clock()
            )
        except RevisionConflict as conflict:
            raise stale_revision(conflict.expected, conflict.stored) from None

    async def PutSessionSummary(self, request: mpb.PutSessionSummaryRequest, context: Any) -> Any:
        async def work() -> mpb.PutSessionSummaryResponse:
            session = self._session(request.session_id)
            if not request.HasField("handoff"):
                raise invalid("handoff", "required")
            upto = required_id(
                "summary_upto_message_id", request.summary_upto_message_id, self._settings.max_id_chars
            )
            if request.trigger_prompt_tokens < 0:
                raise invalid("trigger_prompt_tokens", "must not be negative")
            expected = request.expected_revision if request.HasField("expected_revision") else None
            stored = await self._write_summary(
                caller(),
                session,
                request.handoff,
                upto,
                request.trigger_prompt_tokens,
                expected,
                handoff_field="handoff",
            )
            return mpb.PutSessionSummaryResponse(summary=convert.session_summary(session, stored))

        return await answer(context, work)

    def _session_messages(self, messages: Sequence[mpb.SessionMessage]) -> list[SessionMessage]:
        limit = self._settings.compaction_max_messages
        if not messages:
            raise invalid("messages", "at least one message is required")
        if len(messages) > limit:
            raise invalid("messages", f"{len(messages)} messages; the limit is {limit}")
        checked: list[SessionMessage] = []
        for i, message in enumerate(messages):
            required_id(f"messages[{i}].id", message.id, self._settings.max_id_chars)
            role = SessionMessageRole.from_number(message.role)
            if role is None:
                raise invalid(f"messages[{i}].role", "must be user, assistant, tool or system")
            checked.append(convert.session_message(message, role))
        return checked

    def _policy(self, context: Any) -> CompactionPolicy:
        """The compaction numbers from the settings; the model gets no longer than the caller's deadline
        allows (less a reserve for the extract and the write), so the caller always gets an answer."""
        settings = self._settings
        timeout = settings.compaction_model_timeout_seconds
        remaining = context.time_remaining()
        if remaining is not None:
            timeout = min(timeout, max(remaining - settings.compaction_deadline_reserve_seconds, 0.0))
        return CompactionPolicy(
            target_share=settings.compaction_target_share,
            handoff_share=settings.compaction_handoff_share,
            transcript_max_tokens=settings.compaction_transcript_max_tokens,
            output_max_tokens=settings.compaction_output_max_tokens,
            model_timeout_seconds=timeout,
        )

    async def CompactSession(self, request: mpb.CompactSessionRequest, context: Any) -> Any:
        async def work() -> mpb.CompactSessionResponse:
            settings = self._settings
            session = self._session(request.session_id)
            messages = self._session_messages(request.messages)
            if request.context_window <= 0:
                raise invalid("context_window", f"{request.context_window}; must be positive")
            if request.trigger_prompt_tokens < 0:
                raise invalid("trigger_prompt_tokens", "must not be negative")
            model_id = optional_id("model_id", request.model_id, settings.max_id_chars)
            owner = caller()
            stored = await self._store.get_summary(owner, session)
            revision = stored.revision if stored is not None else 0
            expected = request.expected_revision if request.HasField("expected_revision") else None
            if expected is not None and expected != revision:
                raise stale_revision(expected, revision)  # before spending a model call on it
            compaction = await compact(
                messages,
                request.context_window,
                self._handoff_models(model_id),
                previous=stored.handoff if stored is not None else None,
                previous_upto_message_id=stored.summary_upto_message_id if stored is not None else "",
                policy=self._policy(context),
            )
            if compaction is None:
                return mpb.CompactSessionResponse(
                    summary=convert.session_summary(session, stored), compacted=False
                )
            # The document carries the summary read above forward: a write that landed meanwhile must
            # not be overwritten, so the revision read is expected even when the caller gave none.
            written = await self._write_summary(
                owner,
                session,
                compaction.handoff,
                compaction.summary_upto_message_id,
                request.trigger_prompt_tokens,
                revision,
                handoff_field="messages",
            )
            span = trace.get_current_span()
            span.set_attribute(attributes.COMPACTION_HANDOFF_TOKENS, compaction.handoff_tokens)
            span.set_attribute(attributes.COMPACTION_SUMMARY_REVISION, written.revision)
            return mpb.CompactSessionResponse(
                summary=convert.session_summary(session, written),
                compacted=True,
                degraded=compaction.degraded,
                degraded_reason=compaction.degraded_reason,
                kept_tokens=compaction.kept_tokens,
                handoff_tokens=compaction.handoff_tokens,
            )

        return await answer(context, work)

    async def GetWorkingMemory(self, request: mpb.GetWorkingMemoryRequest, context: Any) -> Any:
        async def work() -> mpb.GetWorkingMemoryResponse:
            session = self._session(request.session_id)
            stored = await self._store.get_working_memory(caller(), session)
            return mpb.GetWorkingMemoryResponse(working_memory=convert.working_memory(session, stored))

        return await answer(context, work)

    async def PutWorkingMemory(self, request: mpb.PutWorkingMemoryRequest, context: Any) -> Any:
        async def work() -> mpb.PutWorkingMemoryResponse:
            settings = self._settings
            session = self._session(request.session_id)
            if len(request.plan) > settings.working_memory_max_plan_steps:
                raise invalid(
                    "plan",
                    f"{len(request.plan)} steps; the limit is {settings.working_memory_max_plan_steps}",
                )
            limit = settings.working_memory_max_text_chars
            for i, step in enumerate(request.plan):
                if len(step.text) > limit:
                    raise invalid(f"plan[{i}].text", f"{len(step.text)} characters; the limit is {limit}")
            for i, point in enumerate(request.recent_qa):
                for name in ("question", "answer_gist"):
                    text = getattr(point, name)
                    if len(text) > limit:
                        raise invalid(
                            f"recent_qa[{i}].{name}", f"{len(text)} characters; the limit is {limit}"
                        )
            kept = list(request.recent_qa)[-settings.working_memory_max_qa :]
            stored = await self._store.put_working_memory(
                caller(), session, request.plan, kept, self._clock()
            )
            return mpb.PutWorkingMemoryResponse(working_memory=convert.working_memory(session, stored))

        return await answer(context, work)

    async def DeleteSessionMemory(self, request: mpb.DeleteSessionMemoryRequest, context: Any) -> Any:
        async def work() -> mpb.DeleteSessionMemoryResponse:
            await self._store.delete_session(caller(), self._session(request.session_id))
            return mpb.DeleteSessionMemoryResponse()

        return await answer(context, work)
