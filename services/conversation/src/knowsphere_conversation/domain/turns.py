"""One chat turn, from request to its final event.

The conversation graph (query understanding, ReAct deep reading, generation) is a capability
of its own; until it lands, a turn gathers evidence from retrieval (when the turn names knowledge
bases) and then ends with an error event saying which capability is missing. Every turn ends with
exactly one final event, whatever fails on the way: a request without the caller's identity gives
:data:`IDENTITY_REQUIRED` (every peer call acts as that caller), a peer that cannot serve its own code,
any other failure the generic :data:`TURN_FAILED`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_runtime.identity import IdentityError, require_identity

log = structlog.get_logger(__name__)


class CapabilityUnavailable(Exception):
    """A peer answered that the capability a turn needs is not available."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Search = Callable[[str, Sequence[str]], Awaitable[Sequence[rpb.SearchResult]]]
"""Ranked passages for a question from the given knowledge bases (retrieval's results)."""
Publish = Callable[[ChatTurnEvent], Awaitable[None]]

ANSWER_GENERATION_UNAVAILABLE = "answer_generation_unavailable"
ANSWER_GENERATION_PENDING = (
    "answer generation (the conversation graph) is not available yet; "
    "retrieval returned {count} passage(s) for this question"
)
IDENTITY_REQUIRED = "identity_required"
TURN_FAILED = "turn_failed"
TURN_FAILED_MESSAGE = "the turn failed unexpectedly; please try again"


class TurnRunner:
    """Runs turns against injected ``search`` and ``publish`` functions."""

    def __init__(self, search: Search, publish: Publish) -> None:
        self._search = search
        self._publish = publish

    async def run(self, request: ChatRequested) -> ChatTurnEvent:
        """Publishes the turn's events and returns its final one."""
        sequence = 0

        async def emit(kind: TurnEventKind, **fields: str) -> ChatTurnEvent:
            nonlocal sequence
            event = ChatTurnEvent(turn_id=request.turn_id, sequence=sequence, kind=kind, **fields)  # type: ignore[arg-type]
            await self._publish(event)
            sequence += 1  # only once delivered: the reader's sequence check stays meaningful
            return event

        try:
            require_identity()
        except IdentityError as error:
            return await emit(TurnEventKind.ERROR, error_code=IDENTITY_REQUIRED, error_message=str(error))
        try:
            await emit(TurnEventKind.STARTED)
            evidence = await self._gather(request)
        except CapabilityUnavailable as error:
            return await emit(TurnEventKind.ERROR, error_code=error.code, error_message=error.message)
        except Exception:
            log.exception("turn failed", turn_id=request.turn_id)
            return await emit(TurnEventKind.ERROR, error_code=TURN_FAILED, error_message=TURN_FAILED_MESSAGE)
        return await emit(
            TurnEventKind.ERROR,
            error_code=ANSWER_GENERATION_UNAVAILABLE,
            error_message=ANSWER_GENERATION_PENDING.format(count=len(evidence)),
        )

    async def _gather(self, request: ChatRequested) -> Sequence[rpb.SearchResult]:
        # A turn without knowledge bases has nothing to search (retrieval refuses an empty list).
        if not request.knowledge_base_ids:
            return ()
        return await self._search(request.message, request.knowledge_base_ids)
