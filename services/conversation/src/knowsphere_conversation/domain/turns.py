"""One chat turn, from request to its final event.

The turn runs the conversation graph (:mod:`~knowsphere_conversation.domain.graph`) on the session's
checkpoint thread and streams its events. Every turn ends with exactly one final event, whatever fails
on the way: a request without the caller's identity gives :data:`IDENTITY_REQUIRED` (every peer call
acts as that caller), a model failure modelhub's friendly code and message, a peer that cannot serve
its own code, any other failure the generic :data:`TURN_FAILED`. A turn that completes also announces
the documents its answer cited (:class:`~knowsphere_contracts.events.TurnCompleted`), once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from opentelemetry import trace

from knowsphere_contracts.events import (
    ChatRequested,
    ChatTurnEvent,
    Citation,
    CitedDocument,
    TurnCompleted,
    TurnEventKind,
)
from knowsphere_conversation.domain.graph import (
    AgentConfig,
    Memory,
    Models,
    Search,
    Tools,
    TurnError,
    TurnLimits,
    TurnRuntime,
)
from knowsphere_conversation.domain.layout import Message
from knowsphere_runtime.identity import IdentityError, require_identity
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)


class CapabilityUnavailable(Exception):
    """A peer answered that the capability a turn needs is not available."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Publish = Callable[[ChatTurnEvent], Awaitable[None]]
PublishCompleted = Callable[[TurnCompleted], Awaitable[None]]

IDENTITY_REQUIRED = "identity_required"
TURN_FAILED = "turn_failed"
TURN_FAILED_MESSAGE = "the turn failed unexpectedly; please try again"


class TurnRunner:
    """Runs turns on the compiled graph ``graph()`` returns (compiled once its checkpoint store is open)
    with the given peers; ``publish`` sends each event."""

    def __init__(
        self,
        graph: Callable[[], Any],
        *,
        models: Models,
        tools: Tools,
        memory: Memory,
        search: Search,
        publish: Publish,
        publish_completed: PublishCompleted,
        limits: TurnLimits,
        agent: AgentConfig | None = None,
    ) -> None:
        self._graph = graph
        self._models = models
        self._tools = tools
        self._memory = memory
        self._search = search
        self._publish = publish
        self._publish_completed = publish_completed
        self._limits = limits
        self._agent = agent or AgentConfig()

    async def run(self, request: ChatRequested) -> ChatTurnEvent:
        """Publishes the turn's events and returns its final one."""
        sequence = 0

        async def emit(kind: TurnEventKind, **fields: Any) -> ChatTurnEvent:
            nonlocal sequence
            event = ChatTurnEvent(turn_id=request.turn_id, sequence=sequence, kind=kind, **fields)
            await self._publish(event)
            sequence += 1  # only once delivered: the reader's sequence check stays meaningful
            return event

        try:
            identity = require_identity()
        except IdentityError as error:
            return await emit(TurnEventKind.ERROR, error_code=IDENTITY_REQUIRED, error_message=str(error))
        span = trace.get_current_span()
        runtime = TurnRuntime(
            models=self._models,
            tools=self._tools,
            memory=self._memory,
            search=self._search,
            emit=emit,
            agent=self._agent,
            limits=self._limits,
            session_id=request.session_id or "",
            knowledge_base_ids=tuple(request.knowledge_base_ids),
            web_search=request.web_search,
            knowledge_graph=request.knowledge_graph,
            language=request.language,
        )
        # A session's checkpoint thread belongs to its tenant and user: another caller's session id
        # names another thread.
        thread = f"{identity.tenant_id}/{identity.user_id}/{request.session_id or request.turn_id}"
        question = Message(
            id=request.turn_id + "-q", turn_id=request.turn_id, role="user", content=request.message
        )
        try:
            await emit(TurnEventKind.STARTED)
            state = await self._graph().ainvoke(
                {"messages": [question], "turn_id": request.turn_id, "question": request.message},
                config={"configurable": {"thread_id": thread, "turn": runtime}},
            )
        except TurnError as error:
            span.set_attribute(attributes.ERROR_CODE, error.code)
            return await emit(TurnEventKind.ERROR, error_code=error.code, error_message=error.message)
        except CapabilityUnavailable as error:
            return await emit(TurnEventKind.ERROR, error_code=error.code, error_message=error.message)
        except Exception:
            log.exception("turn failed", turn_id=request.turn_id)
            return await emit(TurnEventKind.ERROR, error_code=TURN_FAILED, error_message=TURN_FAILED_MESSAGE)
        sources = [Citation(**s) for s in state.get("sources", [])]
        cited = [s for s in sources if s.handle in runtime.cited]
        span.set_attribute(attributes.ANSWER_KIND, runtime.answer_kind.value)
        span.set_attribute(attributes.CITATIONS_REMOVED, runtime.removed_citations)
        span.set_attribute(attributes.SOURCES_COUNT, len(sources))
        final = await emit(
            TurnEventKind.COMPLETED,
            text="".join(runtime.text),
            citations=cited,
            answer_kind=runtime.answer_kind,
            removed_citations=runtime.removed_citations,
        )
        await self._announce(request, cited, runtime)
        return final

    async def _announce(
        self, request: ChatRequested, cited: Sequence[Citation], runtime: TurnRuntime
    ) -> None:
        documents: dict[str, CitedDocument] = {}
        for source in cited:
            if source.document_id and source.knowledge_base_id:
                documents.setdefault(
                    source.document_id,
                    CitedDocument(
                        document_id=source.document_id,
                        knowledge_base_id=source.knowledge_base_id,
                        file_name=source.file_name,
                    ),
                )
        event = TurnCompleted(
            turn_id=request.turn_id,
            session_id=request.session_id,
            cited_documents=list(documents.values()),
            prompt_tokens=runtime.usage.get("prompt_tokens", 0),
            completion_tokens=runtime.usage.get("completion_tokens", 0),
        )
        try:
            await self._publish_completed(event)
        except Exception:
            # The answer is out; a lost announcement costs an affinity hit, not the turn.
            log.exception("turn completion not announced", turn_id=request.turn_id)


__all__ = ["IDENTITY_REQUIRED", "TURN_FAILED", "CapabilityUnavailable", "TurnRunner"]
