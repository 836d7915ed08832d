"""Handoff compaction: the older part of a session replaced by a structured handoff document.

The conversation calls :func:`compact` when the previous request's prompt reached
:data:`TRIGGER_SHARE` of the context window (see :func:`should_compact`), then stores the result with
``PutSessionSummary(handoff=…, summary_upto_message_id=…)``. Steps:

1. **Cut** (:func:`choose_cut`): only at a message boundary, never between an assistant's tool calls and
   their results, never at or after the current question (the last user message); keeps about
   :data:`TARGET_SHARE` of the window of the newest messages. Messages up to the previous summary's
   ``summary_upto_message_id`` are already summarised and are not given again.
2. **Code-extracted parts**: the original request (the session's first user message) and the index of
   externalised tool results — every ``__refId`` found in the archived tool messages' JSON, with its
   tool name, ``__summary`` and message id. The model never writes these.
3. **Model parts** through a :class:`HandoffModel` (modelhub ``ChatStream`` with JSON output, see
   ``knowsphere_memory.adapters.modelhub``): phases done, abandoned paths, key facts, open questions.
   When the model fails, times out or returns something else than that JSON, a deterministic extract
   (no model) takes its place and the result says ``degraded=True`` with the reason — the conversation
   never stalls on it.

No I/O happens here besides awaiting the injected model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_memory.domain.tokens import MESSAGE_OVERHEAD_TOKENS, estimate_tokens
from knowsphere_telemetry import attributes

tracer = trace.get_tracer("knowsphere.memory")

TRIGGER_SHARE = 0.85
"""Compaction starts when the previous request's prompt reached this share of the context window."""
TARGET_SHARE = 0.30
"""Compaction keeps about this share of the context window of the newest messages."""

USER, ASSISTANT, TOOL, SYSTEM = "user", "assistant", "tool", "system"
MIN_HANDOFF_TOKENS = 256
"""The handoff document's allowance never goes below this, however small the window."""
MIN_QUOTE_CHARS = 40
"""Shorter answer quotes say nothing: the fitted extract drops them instead."""
STORED_KEY, REF_ID_KEY, SUMMARY_KEY = "__stored", "__refId", "__summary"


@dataclass(frozen=True)
class CompactionPolicy:
    """The numbers of a compaction; the conversation builds it from its settings."""

    trigger_share: float = TRIGGER_SHARE
    target_share: float = TARGET_SHARE
    handoff_share: float = 0.05
    """Part of ``target_share`` left for the handoff document: the cut keeps the newest messages within
    ``target_share - handoff_share`` of the window, so messages and document together come to about
    ``target_share``. The model is asked for at most this many tokens; the extract is shortened to fit."""
    transcript_max_tokens: int = 24_000
    """Tokens of the archived transcript given to the model (messages are shortened to fit)."""
    transcript_message_min_chars: int = 200
    """No message of the transcript is shortened below this many characters."""
    output_max_tokens: int = 2_000
    """max_tokens of the model call."""
    model_timeout_seconds: float = 60.0
    """The model's whole answer must arrive within this; otherwise the extract is used."""
    max_list_items: int = 50
    """Entries kept per list of the document (phases, facts …)."""
    max_field_chars: int = 2_000
    """Characters kept per text field of the document."""
    extract_answer_chars: int = 300
    """Characters of an answer a degraded phase summary quotes."""
    max_json_depth: int = 8
    """How deep a tool result's JSON is searched for ``__refId``."""


@dataclass(frozen=True)
class SessionMessage:
    """One message of the session as the conversation's checkpoint holds it (no system prompt)."""

    id: str
    role: str
    """``user``, ``assistant`` or ``tool`` (``system`` messages are never archived)."""
    content: str
    tool_call_ids: tuple[str, ...] = ()
    """For an assistant message: the ids of the tool calls it makes."""
    tool_call_id: str = ""
    """For a tool message: the id of the call it answers."""
    tool_name: str = ""
    """For a tool message: the tool that produced it."""

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.content) + MESSAGE_OVERHEAD_TOKENS


@dataclass(frozen=True)
class Cut:
    archived: tuple[SessionMessage, ...]
    kept: tuple[SessionMessage, ...]
    kept_tokens: int

    @property
    def upto_message_id(self) -> str:
        return self.archived[-1].id


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact` produced, ready for ``PutSessionSummary``."""

    handoff: mpb.HandoffDocument
    summary_upto_message_id: str
    degraded: bool
    degraded_reason: str
    archived_messages: int
    kept_messages: int
    kept_tokens: int
    handoff_tokens: int
    context_window: int

    @property
    def window_share(self) -> float:
        """Share of the context window the handoff plus the kept messages take."""
        return (self.kept_tokens + self.handoff_tokens) / self.context_window


class HandoffModel(Protocol):
    """A chat model answering one JSON object (``knowsphere_memory.adapters.modelhub`` over modelhub)."""

    async def complete_json(self, system: str, user: str, *, max_tokens: int) -> str: ...


def should_compact(prompt_tokens: int, context_window: int, trigger_share: float = TRIGGER_SHARE) -> bool:
    """True when the previous request's prompt reached ``trigger_share`` of the window."""
    return context_window > 0 and prompt_tokens >= trigger_share * context_window


# --- 1. the cut ---------------------------------------------------------------------------------------


def _unsummarised(messages: Sequence[SessionMessage], after_message_id: str) -> list[SessionMessage]:
    own = [m for m in messages if m.role != SYSTEM]
    if after_message_id:
        for index, message in enumerate(own):
            if message.id == after_message_id:
                return own[index + 1 :]
    return own


def choose_cut(
    messages: Sequence[SessionMessage],
    context_window: int,
    *,
    target_share: float = TARGET_SHARE,
    after_message_id: str = "",
) -> Cut | None:
    """Where to cut ``messages`` (oldest first): the earliest boundary whose kept suffix fits in
    ``target_share`` of the window, else the latest allowed one. None when nothing can be archived.

    Messages up to ``after_message_id`` (the previous summary's last message) are left out; when that id
    is not among ``messages``, all of them count as not yet summarised.
    """
    if context_window <= 0:
        raise ValueError(f"context_window: {context_window}; must be positive")
    pending = _unsummarised(messages, after_message_id)
    current = max((i for i, m in enumerate(pending) if m.role == USER), default=-1)
    if current <= 0:
        return None
    suffix = [0] * (len(pending) + 1)
    for i in range(len(pending) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + pending[i].tokens
    budget = target_share * context_window
    allowed: list[int] = []
    open_calls: set[str] = set()
    for i, message in enumerate(pending):
        # A cut before message i: every call made before i has its result before i.
        if 0 < i <= current and not open_calls and message.role != TOOL:
            allowed.append(i)
        if message.role == ASSISTANT:
            open_calls.update(message.tool_call_ids)
        elif message.role == TOOL:
            open_calls.discard(message.tool_call_id)
    if not allowed:
        return None
    index = next((i for i in allowed if suffix[i] <= budget), allowed[-1])
    return Cut(tuple(pending[:index]), tuple(pending[index:]), suffix[index])


# --- 2. parts extracted by code -----------------------------------------------------------------------------


def _json_of(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def _stored_objects(value: Any, depth: int) -> Iterator[dict[str, Any]]:
    if depth < 0:
        return
    if isinstance(value, dict):
        if isinstance(value.get(REF_ID_KEY), str) and value[REF_ID_KEY]:
            yield value
            return
        for inner in value.values():
            yield from _stored_objects(inner, depth - 1)
    elif isinstance(value, list):
        for inner in value:
            yield from _stored_objects(inner, depth - 1)


def extract_result_refs(
    messages: Sequence[SessionMessage], *, max_depth: int = 8
) -> list[mpb.StoredResultRef]:
    """Every externalised result (``__refId``) in the tool messages, in order, each ref id once."""
    refs: list[mpb.StoredResultRef] = []
    seen: set[str] = set()
    for message in messages:
        if message.role != TOOL:
            continue
        for stored in _stored_objects(_json_of(message.content), max_depth):
            ref_id = stored[REF_ID_KEY]
            if ref_id in seen:
                continue
            seen.add(ref_id)
            summary = stored.get(SUMMARY_KEY)
            refs.append(
                mpb.StoredResultRef(
                    ref_id=ref_id,
                    tool_name=message.tool_name,
                    summary=summary if isinstance(summary, str) else "",
                    message_id=message.id,
                )
            )
    return refs


def original_request(messages: Sequence[SessionMessage], previous: mpb.HandoffDocument | None) -> str:
    if previous is not None and previous.original_request:
        return previous.original_request
    return next((m.content for m in messages if m.role == USER), "")


# --- 3. the model's parts, or the extract -------------------------------------------------------------------


class _Phase(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(min_length=1)
    summary: str = ""


class _Abandoned(BaseModel):
    model_config = ConfigDict(extra="ignore")
    approach: str = Field(min_length=1)
    reason: str = ""


class _ModelParts(BaseModel):
    model_config = ConfigDict(extra="ignore")
    phases_done: list[_Phase] = Field(min_length=1)
    abandoned_paths: list[_Abandoned] = Field(default_factory=list)
    key_facts: list[str] = Field(default_factory=list)
    open_questions: list[str] = Field(default_factory=list)


SYSTEM_PROMPT = """You write the handoff document of a conversation whose older part leaves the prompt.
Answer with one JSON object and nothing else:
{"phases_done": [{"title": "...", "summary": "..."}],
 "abandoned_paths": [{"approach": "...", "reason": "..."}],
 "key_facts": ["..."],
 "open_questions": ["..."]}
- phases_done: what was done, phase by phase, in order; keep ids, names, numbers and conclusions.
- abandoned_paths: approaches tried and given up, with why.
- key_facts: facts and decisions later turns rely on (restate still-valid ones from the earlier handoff).
- open_questions: questions still unanswered.
Do not invent references to stored results; they are indexed separately.
Write in the language of the conversation."""

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def parse_model_parts(text: str) -> _ModelParts | None:
    """The model's JSON answer, or None when it is not the handoff JSON (fenced JSON is accepted)."""
    body = _FENCE.sub("", text.strip())
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        return _ModelParts.model_validate_json(body[start : end + 1])
    except (ValidationError, ValueError):
        return None


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _render_message(message: SessionMessage, limit: int) -> str:
    head = f"[{message.role}"
    if message.tool_name:
        head += f" {message.tool_name}"
    head += f" #{message.id}]"
    return f"{head} {_shorten(message.content, limit)}"


def render_transcript(archived: Sequence[SessionMessage], policy: CompactionPolicy) -> str:
    """The archived messages as text for the model, shortened evenly to the transcript budget."""
    total = sum(m.tokens for m in archived)
    if total <= policy.transcript_max_tokens:
        return "\n".join(_render_message(m, len(m.content)) for m in archived)
    ratio = policy.transcript_max_tokens / total
    return "\n".join(
        _render_message(m, max(policy.transcript_message_min_chars, int(len(m.content) * ratio)))
        for m in archived
    )


def _user_prompt(
    archived: Sequence[SessionMessage], previous: mpb.HandoffDocument | None, policy: CompactionPolicy
) -> str:
    parts = []
    if previous is not None and (previous.phases_done or previous.key_facts):
        earlier = {
            "phases_done": [{"title": p.title, "summary": p.summary} for p in previous.phases_done],
            "key_facts": list(previous.key_facts),
            "open_questions": list(previous.open_questions),
        }
        parts.append("Earlier handoff (already summarised):\n" + json.dumps(earlier, ensure_ascii=False))
    parts.append("Messages to hand off:\n" + render_transcript(archived, policy))
    return "\n\n".join(parts)


def _turns(messages: Sequence[SessionMessage]) -> list[list[SessionMessage]]:
    turns: list[list[SessionMessage]] = []
    for message in messages:
        if message.role == USER or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def _tool_error(message: SessionMessage) -> str | None:
    data = _json_of(message.content)
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return None


def extract_parts(
    archived: Sequence[SessionMessage],
    policy: CompactionPolicy,
    *,
    answer_chars: int | None = None,
    title_chars: int = 120,
) -> _ModelParts:
    """The deterministic extract used without a model: one phase per turn (question, tools used, the
    start of the answer), failed tool calls as abandoned paths, an unanswered last question as open."""
    phases: list[_Phase] = []
    abandoned: list[_Abandoned] = []
    open_questions: list[str] = []
    turns = _turns(archived)
    for index, turn in enumerate(turns):
        question = next((m.content for m in turn if m.role == USER), "")
        tools = list(dict.fromkeys(m.tool_name for m in turn if m.role == TOOL and m.tool_name))
        answers = [m.content for m in turn if m.role == ASSISTANT and m.content.strip()]
        summary = []
        if tools:
            summary.append("tools: " + ", ".join(tools))
        quote = policy.extract_answer_chars if answer_chars is None else answer_chars
        if answers and quote > 0:
            summary.append("answer: " + _shorten(answers[-1], quote))
        title = _shorten(question or "(continued)", title_chars)
        phases.append(_Phase(title=title, summary="; ".join(summary)))
        for message in turn:
            error = _tool_error(message) if message.role == TOOL else None
            if error:
                abandoned.append(_Abandoned(approach=message.tool_name or "tool call", reason=error))
        if index == len(turns) - 1 and question and not answers:
            open_questions.append(question)
    if not phases:
        phases.append(_Phase(title="(no messages)"))
    return _ModelParts(phases_done=phases, abandoned_paths=abandoned, open_questions=open_questions)


def _document(
    request: str,
    parts: _ModelParts,
    refs: Sequence[mpb.StoredResultRef],
    previous: mpb.HandoffDocument | None,
    policy: CompactionPolicy,
    *,
    keep_previous_facts: bool,
) -> mpb.HandoffDocument:
    cap, limit = policy.max_field_chars, policy.max_list_items
    doc = mpb.HandoffDocument(original_request=_shorten(request, cap))
    if previous is not None:
        doc.phases_done.extend(previous.phases_done)
        doc.abandoned_paths.extend(previous.abandoned_paths)
        doc.result_refs.extend(previous.result_refs)
        if keep_previous_facts:
            doc.key_facts.extend(previous.key_facts)
    doc.phases_done.extend(
        mpb.HandoffPhase(title=_shorten(p.title, cap), summary=_shorten(p.summary, cap))
        for p in parts.phases_done
    )
    doc.abandoned_paths.extend(
        mpb.AbandonedPath(approach=_shorten(a.approach, cap), reason=_shorten(a.reason, cap))
        for a in parts.abandoned_paths
    )
    known = {r.ref_id for r in doc.result_refs}
    doc.result_refs.extend(r for r in refs if r.ref_id not in known)
    doc.key_facts.extend(_shorten(f, cap) for f in parts.key_facts if f.strip())
    doc.open_questions.extend(_shorten(q, cap) for q in parts.open_questions if q.strip())
    # Newest entries are kept when a list is over its limit (the index of results is never cut: it is
    # the only way back to them).
    for name in ("phases_done", "abandoned_paths", "key_facts", "open_questions"):
        entries = getattr(doc, name)
        if len(entries) > limit:
            del entries[: len(entries) - limit]
    return doc


def document_tokens(doc: mpb.HandoffDocument) -> int:
    texts = [doc.original_request, *doc.key_facts, *doc.open_questions]
    texts += [f"{p.title} {p.summary}" for p in doc.phases_done]
    texts += [f"{a.approach} {a.reason}" for a in doc.abandoned_paths]
    texts += [f"{r.ref_id} {r.tool_name} {r.summary}" for r in doc.result_refs]
    return sum(estimate_tokens(t) for t in texts)


EXTRACT_SIZES = ((300, 120), (150, 80), (75, 60), (0, 40))
"""(answer quote, question title) characters the fitted extract tries, longest first."""


def refs_tokens(refs: Sequence[mpb.StoredResultRef]) -> int:
    return sum(estimate_tokens(f"{r.ref_id} {r.tool_name} {r.summary}") for r in refs)


def _fitted_extract(
    request: str,
    archived: Sequence[SessionMessage],
    refs: Sequence[mpb.StoredResultRef],
    previous: mpb.HandoffDocument | None,
    policy: CompactionPolicy,
    budget: int,
) -> mpb.HandoffDocument:
    """The extract's document within ``budget`` tokens besides the result index (never shortened: it is
    the only way back to the stored results): shorter quotes and titles first, then the oldest phases
    folded into one line that says how many questions it stands for."""
    doc = mpb.HandoffDocument()
    for quote, title in EXTRACT_SIZES:
        parts = extract_parts(archived, policy, answer_chars=quote, title_chars=title)
        doc = _document(request, parts, refs, previous, policy, keep_previous_facts=True)
        allowance = budget + refs_tokens(doc.result_refs)
        if document_tokens(doc) <= allowance:
            return doc
    folded = 0
    while len(doc.phases_done) > 1 and document_tokens(doc) > allowance:
        del doc.phases_done[0]
        folded += 1
    if folded:
        doc.phases_done.insert(0, mpb.HandoffPhase(title=f"{folded + 1} earlier phases (not summarised)"))
        del doc.phases_done[1]
    return doc


async def _model_parts(
    model: HandoffModel | None,
    archived: Sequence[SessionMessage],
    previous: mpb.HandoffDocument | None,
    policy: CompactionPolicy,
    max_tokens: int,
) -> tuple[_ModelParts | None, str]:
    """The model's parts, or None with the reason it could not give them."""
    if model is None:
        return None, "no model configured for compaction"
    with tracer.start_as_current_span("memory.compaction.model") as span:
        try:
            async with asyncio.timeout(policy.model_timeout_seconds):
                text = await model.complete_json(
                    SYSTEM_PROMPT,
                    _user_prompt(archived, previous, policy),
                    max_tokens=max_tokens,
                )
        except TimeoutError:
            reason = f"model did not answer within {policy.model_timeout_seconds:g} s"
        except Exception as error:  # any failure of the model call degrades; the turn goes on
            reason = f"model unavailable: {type(error).__name__}: {_shorten(str(error), 200)}"
        else:
            parts = parse_model_parts(text)
            if parts is not None:
                return parts, ""
            reason = "model answer is not the handoff JSON"
        span.set_attribute(attributes.COMPACTION_DEGRADED, True)
        return None, reason


async def compact(
    messages: Sequence[SessionMessage],
    context_window: int,
    model: HandoffModel | None,
    *,
    previous: mpb.HandoffDocument | None = None,
    previous_upto_message_id: str = "",
    policy: CompactionPolicy | None = None,
) -> Compaction | None:
    """The handoff of the session's older messages, or None when nothing can be archived yet.

    ``messages``: the session, oldest first, current question included. ``previous`` and
    ``previous_upto_message_id``: the stored summary (``GetSessionSummary``), carried forward so no span
    is summarised twice. ``model``: None degrades at once (no model call).
    """
    policy = policy or CompactionPolicy()
    with tracer.start_as_current_span("memory.compaction") as span:
        span.set_attribute(attributes.COMPACTION_CONTEXT_WINDOW, context_window)
        with tracer.start_as_current_span("memory.compaction.cut"):
            cut = choose_cut(
                messages,
                context_window,
                target_share=max(policy.target_share - policy.handoff_share, 0.0),
                after_message_id=previous_upto_message_id,
            )
        if cut is None:
            span.set_attribute(attributes.COMPACTION_ARCHIVED_MESSAGES, 0)
            return None
        refs = extract_result_refs(cut.archived, max_depth=policy.max_json_depth)
        request = original_request(cut.archived, previous)
        budget = max(int(policy.handoff_share * context_window), MIN_HANDOFF_TOKENS)
        parts, reason = await _model_parts(
            model, cut.archived, previous, policy, min(policy.output_max_tokens, budget)
        )
        degraded = parts is None
        if parts is not None:
            doc = _document(request, parts, refs, previous, policy, keep_previous_facts=False)
        else:
            with tracer.start_as_current_span("memory.compaction.extract"):
                doc = _fitted_extract(request, cut.archived, refs, previous, policy, budget)
        result = Compaction(
            handoff=doc,
            summary_upto_message_id=cut.upto_message_id,
            degraded=degraded,
            degraded_reason=reason,
            archived_messages=len(cut.archived),
            kept_messages=len(cut.kept),
            kept_tokens=cut.kept_tokens,
            handoff_tokens=document_tokens(doc),
            context_window=context_window,
        )
        span.set_attribute(attributes.COMPACTION_ARCHIVED_MESSAGES, result.archived_messages)
        span.set_attribute(attributes.COMPACTION_KEPT_TOKENS, result.kept_tokens)
        span.set_attribute(attributes.COMPACTION_RESULT_REFS, len(doc.result_refs))
        span.set_attribute(attributes.COMPACTION_DEGRADED, degraded)
        return result


__all__ = [
    "TARGET_SHARE",
    "TRIGGER_SHARE",
    "Compaction",
    "CompactionPolicy",
    "Cut",
    "HandoffModel",
    "SessionMessage",
    "choose_cut",
    "compact",
    "extract_result_refs",
    "should_compact",
]
