"""A Dify chat application as an external orchestrator: its ``chat-messages`` API, streamed.

``POST {base_url}/chat-messages`` with ``Authorization: Bearer <key>`` and ``response_mode:
"streaming"`` answers with server-sent events whose data is JSON: ``message`` / ``agent_message``
carry pieces of the answer (``answer``), ``message_end`` the conversation id and the usage
(``metadata.usage``), ``error`` a failure mid-answer; the rest (``ping``, ``agent_thought``, workflow and
node events of a chatflow, files, speech) is not part of the answer. Dify keeps the conversation: its
``conversation_id`` goes back with the next turn of the session. A conversation Dify no longer knows
(HTTP 404 for a kept id) is started afresh, with the session's last exchanges in front of the question.

Dify scopes conversations by ``user``: the conversation's tag of the asking user (opaque, stable). A
cancelled turn tells Dify to stop generating (``POST /chat-messages/{task_id}/stop``, best effort).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import quote

import httpx

from knowsphere_conversation.adapters.peer_http import (
    PeerLimits,
    check_status,
    count,
    lines,
    malformed,
    opened,
    peer_error,
    server_sent_events,
)
from knowsphere_conversation.domain.external import PeerCall, PeerEvent, Receive, with_transcript

ANSWER_EVENTS = frozenset({"message", "agent_message"})


class _StaleConversation(Exception):
    """Dify does not know the kept conversation id any more."""


async def relay_dify(http: httpx.AsyncClient, call: PeerCall, receive: Receive, limits: PeerLimits) -> None:
    if call.conversation_id:
        try:
            await _ask(http, call, receive, limits, call.conversation_id)
            return
        except _StaleConversation:
            pass
    await _ask(http, call, receive, limits, "")


async def _ask(
    http: httpx.AsyncClient, call: PeerCall, receive: Receive, limits: PeerLimits, conversation_id: str
) -> None:
    headers = {"Authorization": f"Bearer {call.api_key}", "Accept": "text/event-stream"}
    body = {
        "inputs": {},
        "query": call.question if conversation_id else with_transcript(call.question, call.history),
        "response_mode": "streaming",
        "conversation_id": conversation_id,
        "user": call.user,
    }
    task_id = ""
    async with opened(
        http, call, limits, f"{call.config.base_url}/chat-messages", headers=headers, body=body
    ) as r:
        if r.status_code == 404 and conversation_id:
            raise _StaleConversation
        await check_status(call, r)
        try:
            async for name, data in server_sent_events(lines(call, r, limits)):
                event = _event(call, data)
                kind = event.get("event", name)
                if kind in ANSWER_EVENTS:
                    task_id = task_id or str(event.get("task_id") or "")
                    answer = event.get("answer")
                    if not isinstance(answer, str):
                        raise malformed(call, f"a {kind} event without its answer", detail="answer")
                    await receive(
                        PeerEvent(text=answer, conversation_id=str(event.get("conversation_id") or ""))
                    )
                elif kind == "message_end":
                    metadata = event.get("metadata")
                    usage = metadata.get("usage") if isinstance(metadata, dict) else None
                    usage = usage if isinstance(usage, dict) else {}
                    await receive(
                        PeerEvent(
                            conversation_id=str(event.get("conversation_id") or ""),
                            prompt_tokens=count(usage.get("prompt_tokens")),
                            completion_tokens=count(usage.get("completion_tokens")),
                        )
                    )
                    return
                elif kind == "error":
                    raise peer_error(call, event.get("message"), detail=f"dify {event.get('code')}")
        except asyncio.CancelledError:
            if task_id:
                await _stop(http, call, limits, task_id)
            raise
    raise malformed(call, "its answer ended before message_end", detail="no message_end")


def _event(call: PeerCall, data: str) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except ValueError:
        raise malformed(call, "an event that is not JSON", detail="json") from None
    if not isinstance(event, dict):
        raise malformed(call, "an event that is not a JSON object", detail="json")
    return event


async def _stop(http: httpx.AsyncClient, call: PeerCall, limits: PeerLimits, task_id: str) -> None:
    """Tells Dify to stop generating the cancelled answer; whatever happens, the turn is cancelled."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(limits.stop_seconds):
            await http.post(
                f"{call.config.base_url}/chat-messages/{quote(task_id, safe='')}/stop",
                headers={"Authorization": f"Bearer {call.api_key}"},
                json={"user": call.user},
                timeout=limits.stop_seconds,
            )


__all__ = ["relay_dify"]
