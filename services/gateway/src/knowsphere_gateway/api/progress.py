"""Ingestion progress as server-sent events, for one document or a whole knowledge base.

Each ``event: progress`` carries ingestion's ``DocumentProgress`` as JSON (``protojson``). The channel
gives every stream a deadline; a watch that outlives it is opened again (it starts with the current
state, so nothing is missed), after a pause that doubles while watches end that way with no progress
in between (:data:`REWATCH_FIRST_DELAY_SECONDS` up to :data:`REWATCH_MAX_DELAY_SECONDS`), so a deadline
that passes at once is no tight loop. Any other failure ends the stream with an ``event: error``
holding the error body. When the client goes away, the watch is cancelled.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.sse import EventSourceResponse, ServerSentEvent

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_clients import IngestionClient
from knowsphere_clients.errors import DeadlineExceeded, ServiceError
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import (
    GUARDED_RESPONSES,
    SERVICE_RESPONSES,
    as_json_errors,
    error_body,
)
from knowsphere_gateway.api.protojson import json_model, to_json

ProgressJson = json_model(pb.DocumentProgress.DESCRIPTOR)

REWATCH_FIRST_DELAY_SECONDS = 0.2
REWATCH_MAX_DELAY_SECONDS = 5.0

PROGRESS_RESPONSE: dict[int | str, dict[str, Any]] = {
    **as_json_errors({**GUARDED_RESPONSES, **SERVICE_RESPONSES}),
    200: {
        "description": "`event: progress` events whose data is a DocumentProgress (JSON); "
        "an `event: error` with an error body if the watch fails",
        "content": {
            "text/event-stream": {
                "itemSchema": {
                    "type": "object",
                    "properties": {
                        "event": {"type": "string", "enum": ["progress", "error"]},
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": {
                                "anyOf": [
                                    {"$ref": "#/components/schemas/DocumentProgress"},
                                    {"$ref": "#/components/schemas/ErrorResponse"},
                                ]
                            },
                        },
                        "id": {"type": "string"},
                        "retry": {"type": "integer", "minimum": 0},
                    },
                }
            }
        },
    },
}


async def progress_events(
    who: Caller, watch: Callable[[], AsyncIterator[pb.DocumentProgress]]
) -> AsyncIterator[ServerSentEvent]:
    """The events of the watch ``watch()`` opens, opened again when its deadline passes."""
    delay = REWATCH_FIRST_DELAY_SECONDS
    while True:
        stream = watch()
        try:
            while True:
                # Bound per step, never across a yield: the call starts at the first step.
                with who.bound():
                    try:
                        progress = await anext(stream)
                    except StopAsyncIteration:
                        return
                delay = REWATCH_FIRST_DELAY_SECONDS  # the watch delivered: the next pause starts short
                yield ServerSentEvent(event="progress", data=to_json(progress))
        except DeadlineExceeded:
            pass
        except ServiceError as error:
            yield ServerSentEvent(event="error", data={"error": error_body(error)})
            return
        finally:
            await stream.aclose()  # type: ignore[attr-defined]  # stops the gRPC watch
        await asyncio.sleep(delay)
        delay = min(delay * 2, REWATCH_MAX_DELAY_SECONDS)


def build_progress_router(
    ingestion: IngestionClient,
    caller: Callable[..., Caller],
    knowledge_base_exists: Callable[..., Awaitable[str]],
) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["knowledge"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    async def existing_document(document_id: str, who: Who) -> str:
        # Checked before the stream starts, so an unknown id is a plain 404 rather than an event.
        with who.bound():
            await ingestion.get_document(document_id)
        return document_id

    @router.get(
        "/documents/{document_id}/progress", response_class=EventSourceResponse, responses=PROGRESS_RESPONSE
    )
    async def document_progress(
        document_id: Annotated[str, Depends(existing_document)], who: Who
    ) -> AsyncIterator[ServerSentEvent]:
        """The document's progress: its current state, then every change; ends when it is ready or failed."""
        async for event in progress_events(who, lambda: ingestion.watch_documents([document_id])):
            yield event

    @router.get(
        "/knowledge-bases/{kb_id}/progress", response_class=EventSourceResponse, responses=PROGRESS_RESPONSE
    )
    async def knowledge_base_progress(
        kb_id: Annotated[str, Depends(knowledge_base_exists)], who: Who
    ) -> AsyncIterator[ServerSentEvent]:
        """Progress of every document of the knowledge base (also ones uploaded later), until the client
        disconnects."""
        async for event in progress_events(who, lambda: ingestion.watch_knowledge_base(kb_id)):
            yield event

    return router


__all__ = ["ProgressJson", "build_progress_router", "progress_events"]
