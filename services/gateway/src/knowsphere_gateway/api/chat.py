"""Chat turns over server-sent events (``POST /api/v1/chat/turns``).

A request becomes a ``ChatRequested`` on the bus; the turn's events come back through the gateway's
one subscriber of turn events (``bus``), and the request watches its turn id on that fan-out. Each
event is streamed as it comes; the stream ends with the turn's final event (``completed`` or
``error``), when no event arrives within the turn timeout (an ``error`` event ``turn_timeout``), or
when the client goes away.
"""

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Annotated

import structlog
from fastapi import APIRouter, Depends, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import Field

from knowsphere_contracts.events import (
    MAX_KNOWLEDGE_BASES_PER_TURN,
    MAX_MESSAGE_CHARS,
    MAX_SESSION_ID_CHARS,
    ChatRequested,
    ChatTurnEvent,
    TurnEventKind,
)
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.protojson import RequestBody
from knowsphere_runtime.bus import Fanout

log = structlog.get_logger(__name__)

TURN_TIMEOUT_CODE = "turn_timeout"


class ChatTurnRequest(RequestBody):
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="the user's question")
    knowledge_base_ids: list[str] = Field(
        default_factory=list, max_length=MAX_KNOWLEDGE_BASES_PER_TURN, description="knowledge bases to search"
    )
    session_id: str | None = Field(default=None, max_length=MAX_SESSION_ID_CHARS)
    web_search: bool = Field(default=False, description="let the answer use web search this turn")
    knowledge_graph: bool = Field(default=False, description="let the answer query the knowledge graph")
    language: str = Field(
        default="", max_length=35, description="answer language (BCP-47); empty: the question's"
    )


def _sse(event: ChatTurnEvent) -> ServerSentEvent:
    return ServerSentEvent(event=event.kind.value, id=str(event.sequence), data=event.model_dump(mode="json"))


def build_chat_router(
    bus: GatewayBus,
    events: Fanout[ChatTurnEvent],
    caller: Callable[..., Caller],
    turn_timeout_seconds: float,
) -> APIRouter:
    """``events`` is fed by the bus's subscriber of turn events; ``turn_timeout_seconds`` is the longest
    wait for a turn's next event."""
    router = APIRouter(prefix="/api/v1", tags=["chat"])

    @router.post(
        "/chat/turns",
        response_class=EventSourceResponse,
        responses={200: {"description": "the turn's events; the last one is `completed` or `error`"}},
    )
    async def chat_turn(
        body: ChatTurnRequest, request: Request, who: Annotated[Caller, Depends(caller)]
    ) -> AsyncIterator[ServerSentEvent]:
        """Ask a question; the turn's events stream back as server-sent events."""
        turn_id = uuid.uuid4().hex
        # Watching before the request is published, so no event of the turn is missed.
        async with events.watch(lambda event: event.turn_id == turn_id) as turn:
            with who.bound():  # the caller's identity travels in the message headers
                await bus.request_turn(
                    ChatRequested(
                        turn_id=turn_id,
                        session_id=body.session_id,
                        message=body.message,
                        knowledge_base_ids=body.knowledge_base_ids,
                        web_search=body.web_search,
                        knowledge_graph=body.knowledge_graph,
                        language=body.language,
                    )
                )
            expected = 0
            while True:
                try:
                    async with asyncio.timeout(turn_timeout_seconds):
                        event = await anext(turn)
                except TimeoutError:
                    yield _sse(
                        ChatTurnEvent(
                            turn_id=turn_id,
                            sequence=expected,
                            kind=TurnEventKind.ERROR,
                            error_code=TURN_TIMEOUT_CODE,
                            error_message=f"no answer within {turn_timeout_seconds:.0f} s; "
                            "is the conversation service running?",
                        )
                    )
                    return
                if event.sequence != expected:
                    log.warning(
                        "turn events out of order", turn_id=turn_id, expected=expected, got=event.sequence
                    )
                expected = event.sequence + 1
                yield _sse(event)
                if event.is_final or await request.is_disconnected():
                    return

    return router


__all__ = ["TURN_TIMEOUT_CODE", "ChatTurnRequest", "build_chat_router"]
