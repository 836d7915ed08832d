"""Chat turns over server-sent events (``POST /api/v1/chat/turns``).

A request becomes a ``ChatRequested`` on the bus; the turn's events come back through the gateway's
one subscriber of turn events (``bus``), and the request watches its turn id on that fan-out. Each
event is streamed as it comes, with its sequence as the SSE id; the stream ends with the turn's final
event (``completed`` or ``error``), when no event arrives within the turn timeout (an ``error`` event
``turn_timeout``), or when the client goes away.

A client whose connection dropped resumes with ``GET /api/v1/chat/turns/{turn_id}/events`` and the
last sequence it saw (the SSE ``Last-Event-ID`` header, or ``after``): the events kept in the
``KS_CHAT_EVENTS`` stream after that one, then the live ones, each once. Only the turn's own asker can
read them; for anyone else the turn does not exist (404).

A turn without a session asked with an application's token runs the application's orchestrator
(``ChatRequested.orchestrator_id``); with a session, the session's own.
"""

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

import structlog
from fastapi import APIRouter, Depends, Header, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import Field, field_validator

from knowsphere_clients import ConversationClient
from knowsphere_contracts.events import (
    MAX_IMAGE_REF_CHARS,
    MAX_IMAGES_PER_MESSAGE,
    MAX_KNOWLEDGE_BASES_PER_TURN,
    MAX_MESSAGE_CHARS,
    MAX_SESSION_ID_CHARS,
    ChatRequested,
    ChatTurnEvent,
    TurnEventKind,
    check_images_total,
)
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import (
    GUARDED_RESPONSES,
    SERVICE_RESPONSES,
    HttpError,
    as_json_errors,
    error_response,
)
from knowsphere_gateway.api.protojson import JsonBool, RequestBody
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity_token import stored_message_identity

StoredEvents = Callable[[str, str], Awaitable[list[tuple[bytes, dict[str, str]]]]]
"""The events kept for a (tenant id, turn id), oldest first, as (JSON, headers)."""

log = structlog.get_logger(__name__)

TURN_TIMEOUT_CODE = "turn_timeout"
BUS_UNAVAILABLE_CODE = "bus_unavailable"
"""The final event of a turn whose request the bus would not take (it was never queued)."""

# The streams' errors before the first event are JSON.
STREAM_ERRORS = as_json_errors({**GUARDED_RESPONSES, **SERVICE_RESPONSES})


class ChatTurnRequest(RequestBody):
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="the user's question")
    knowledge_base_ids: list[str] = Field(
        default_factory=list, max_length=MAX_KNOWLEDGE_BASES_PER_TURN, description="knowledge bases to search"
    )
    session_id: str | None = Field(default=None, max_length=MAX_SESSION_ID_CHARS)
    web_search: JsonBool = Field(default=False, description="let the answer use web search this turn")
    knowledge_graph: JsonBool = Field(default=False, description="let the answer query the knowledge graph")
    language: str = Field(
        default="", max_length=35, description="answer language (BCP-47); empty: the question's"
    )
    images: list[Annotated[str, Field(min_length=1, max_length=MAX_IMAGE_REF_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_IMAGES_PER_MESSAGE,
        description="images to ask about: http(s) or data:image/…;base64 URLs (links in the text count too)",
    )

    _images_total = field_validator("images")(check_images_total)


def _sse(event: ChatTurnEvent) -> ServerSentEvent:
    return ServerSentEvent(event=event.kind.value, id=str(event.sequence), data=event.model_dump(mode="json"))


def _unqueued_event(turn_id: str, seconds: float) -> ChatTurnEvent:
    return ChatTurnEvent(
        turn_id=turn_id,
        sequence=0,
        kind=TurnEventKind.ERROR,
        error_code=BUS_UNAVAILABLE_CODE,
        error_message=f"the message bus did not take the question within {seconds:.0f} s; please try again",
    )


def _timeout_event(turn_id: str, sequence: int, seconds: float) -> ChatTurnEvent:
    return ChatTurnEvent(
        turn_id=turn_id,
        sequence=sequence,
        kind=TurnEventKind.ERROR,
        error_code=TURN_TIMEOUT_CODE,
        error_message=f"no answer within {seconds:.0f} s; is the conversation service running?",
    )


async def requested_turn_events(
    bus: GatewayBus,
    events: Fanout[ChatTurnEvent],
    who: Caller,
    request: ChatRequested,
    timeout_seconds: float,
) -> AsyncIterator[ChatTurnEvent]:
    """Puts ``request`` on the work queue as ``who`` and yields its turn's events up to the final one
    (an ``error`` ``turn_timeout`` when the turn falls silent for ``timeout_seconds``)."""
    # Watching before the request is published, so no event of the turn is missed.
    async with events.watch(lambda event: event.turn_id == request.turn_id) as turn:
        try:
            with who.bound():  # the caller's identity travels in the message headers
                await bus.request_turn(request, wait=timeout_seconds)
        except Exception as error:
            log.error("chat request not queued", turn_id=request.turn_id, error=str(error))
            yield _unqueued_event(request.turn_id, timeout_seconds)
            return
        expected = 0
        while True:
            try:
                async with asyncio.timeout(timeout_seconds):
                    event = await anext(turn)
            except TimeoutError:
                yield _timeout_event(request.turn_id, expected, timeout_seconds)
                return
            if event.sequence < expected:
                # A copy of an event already passed on: a publish the bus acknowledged late was sent
                # again (JetStream stores one; live readers hear each), or a turn delivered again
                # after an outage said it once more before its resumption caught up.
                continue
            if event.sequence != expected:
                log.warning(
                    "turn events out of order", turn_id=request.turn_id, expected=expected, got=event.sequence
                )
            expected = event.sequence + 1
            yield event
            if event.is_final:
                return


def build_chat_router(
    bus: GatewayBus,
    events: Fanout[ChatTurnEvent],
    caller: Callable[..., Caller],
    turn_timeout_seconds: float,
    conversation: ConversationClient,
    stored_events: StoredEvents | None = None,
) -> APIRouter:
    """``events`` is fed by the bus's subscriber of turn events; ``turn_timeout_seconds`` is the longest
    wait for a turn's next event; ``stored_events`` reads what the events stream keeps of a turn."""
    router = APIRouter(prefix="/api/v1", tags=["chat"], responses=SERVICE_RESPONSES)

    async def existing_session(body: ChatTurnRequest, who: Annotated[Caller, Depends(caller)]) -> None:
        # Checked before the stream starts, so an unknown (or another user's) session is a plain 404.
        if body.session_id:
            with who.bound():
                await conversation.get_session(body.session_id)

    async def own_turn(turn_id: str, who: Annotated[Caller, Depends(caller)]) -> str:
        # Checked before the stream starts, so a turn that is not the caller's is a plain 404.
        if stored_events is None:
            raise HttpError(501, "not_implemented", "resuming turns needs the events stream (JetStream)")
        stored = await stored_events(who.identity.tenant_id, turn_id)
        if not stored or stored_message_identity(stored[0][1]) != who.identity:
            raise HttpError(404, "not_found", f"turn {turn_id} not found")
        return turn_id

    @router.get(
        "/chat/turns/{turn_id}/events",
        response_class=EventSourceResponse,
        responses={
            **STREAM_ERRORS,
            200: {"description": "the turn's events after the given sequence, then live ones, to the final"},
            **as_json_errors(
                {
                    404: error_response("no such turn of the caller (or its events have expired)"),
                    501: error_response("resuming turns needs the events stream (JetStream)"),
                }
            ),
        },
    )
    async def resume_turn(
        turn_id: Annotated[str, Depends(own_turn)],
        who: Annotated[Caller, Depends(caller)],
        after: Annotated[
            int | None, Query(ge=-1, description="last sequence seen; -1: from the start")
        ] = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> AsyncIterator[ServerSentEvent]:
        """Resume a turn's event stream after a dropped connection, from the last sequence seen."""
        assert stored_events is not None  # own_turn refused the request otherwise
        seen = after if after is not None else -1
        if after is None and last_event_id is not None and last_event_id.isdigit():
            seen = int(last_event_id)
        # Watching first, then reading what is stored: an event published in between is not missed.
        async with events.watch(lambda event: event.turn_id == turn_id) as live:
            for data, _ in await stored_events(who.identity.tenant_id, turn_id):
                event = ChatTurnEvent.model_validate_json(data)
                if event.sequence > seen:
                    seen = event.sequence
                    yield _sse(event)
                if event.is_final:
                    return
            while True:
                try:
                    async with asyncio.timeout(turn_timeout_seconds):
                        event = await anext(live)
                except TimeoutError:
                    yield _sse(_timeout_event(turn_id, seen + 1, turn_timeout_seconds))
                    return
                if event.sequence <= seen:
                    continue  # already sent from the stream
                seen = event.sequence
                yield _sse(event)
                if event.is_final:
                    return

    @router.post(
        "/chat/turns",
        response_class=EventSourceResponse,
        responses={
            **STREAM_ERRORS,
            200: {"description": "the turn's events; the last one is `completed`, `cancelled` or `error`"},
            **as_json_errors({404: error_response("the session is not the caller's")}),
        },
        dependencies=[Depends(existing_session)],
    )
    async def chat_turn(
        body: ChatTurnRequest, who: Annotated[Caller, Depends(caller)]
    ) -> AsyncIterator[ServerSentEvent]:
        """Ask a question; the turn's events stream back as server-sent events. Without a session, an
        application's token runs the application's orchestrator."""
        application = who.application
        turn = ChatRequested(
            turn_id=uuid.uuid4().hex,
            session_id=body.session_id,
            message=body.message,
            knowledge_base_ids=body.knowledge_base_ids,
            web_search=body.web_search,
            knowledge_graph=body.knowledge_graph,
            language=body.language,
            images=body.images,
            orchestrator_id=application.orchestrator_id if application and not body.session_id else "",
        )
        async for event in requested_turn_events(bus, events, who, turn, turn_timeout_seconds):
            yield _sse(event)

    return router


__all__ = [
    "BUS_UNAVAILABLE_CODE",
    "TURN_TIMEOUT_CODE",
    "ChatTurnRequest",
    "build_chat_router",
    "requested_turn_events",
]
