"""One chat turn, from request to its final event.

The conversation graph (query understanding, ReAct deep reading, generation) is a capability
of its own; until it lands, a turn gathers evidence from retrieval and then ends with an error
event saying which capability is missing. Every turn ends with exactly one final event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind


class CapabilityUnavailable(Exception):
    """A peer answered that the capability a turn needs is not available."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Evidence:
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    text: str


Search = Callable[[str, Sequence[str]], Awaitable[list[Evidence]]]
Publish = Callable[[ChatTurnEvent], Awaitable[None]]

ANSWER_GENERATION_PENDING = (
    "answer generation (the conversation graph) is not available yet; "
    "retrieval returned {count} passage(s) for this question"
)


class TurnRunner:
    """Runs turns against injected ``search`` and ``publish`` functions."""

    def __init__(self, search: Search, publish: Publish) -> None:
        self._search = search
        self._publish = publish

    async def run(self, request: ChatRequested) -> ChatTurnEvent:
        sequence = 0

        async def emit(kind: TurnEventKind, **fields: object) -> ChatTurnEvent:
            nonlocal sequence
            event = ChatTurnEvent(turn_id=request.turn_id, sequence=sequence, kind=kind, **fields)  # type: ignore[arg-type]
            sequence += 1
            await self._publish(event)
            return event

        await emit(TurnEventKind.STARTED)
        try:
            evidence = await self._search(request.message, request.knowledge_base_ids)
        except CapabilityUnavailable as error:
            return await emit(TurnEventKind.ERROR, error_code=error.code, error_message=error.message)
        return await emit(
            TurnEventKind.ERROR,
            error_code="answer_generation_unavailable",
            error_message=ANSWER_GENERATION_PENDING.format(count=len(evidence)),
        )
