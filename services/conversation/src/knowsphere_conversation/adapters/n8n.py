"""An n8n workflow as an external orchestrator: a POST to its webhook (a Chat Trigger's or a Webhook
node's URL is the orchestrator's ``base_url``).

The body is what n8n's chat widget sends — ``{"action": "sendMessage", "sessionId", "chatInput"}`` —
with the session id as ``sessionId`` (a workflow's memory keeps the conversation under it) and, for a
workflow without memory, the session's last exchanges as ``history`` (``[{"role", "content"}]``). The
key, when the orchestrator has one, is the value of the header ``auth_header`` names (n8n's Header Auth).

n8n answers in one of two ways, and both are read: streamed (the trigger's response mode "Streaming"),
one JSON object per line — ``{"type": "begin" | "item" | "end" | "error", "content"}``, items being
pieces of the answer — or at once: JSON ``{"output": …}`` (or ``{"text": …}``, or a list of such items,
the first one answering), or plain text.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from knowsphere_conversation.adapters.peer_http import (
    PeerLimits,
    check_status,
    lines,
    malformed,
    opened,
    peer_error,
)
from knowsphere_conversation.domain.external import PeerCall, PeerEvent, Receive

STREAM_TYPES = frozenset({"begin", "item", "end", "error"})
ANSWER_FIELDS = ("output", "text")


async def relay_n8n(http: httpx.AsyncClient, call: PeerCall, receive: Receive, limits: PeerLimits) -> None:
    body: dict[str, Any] = {"action": "sendMessage", "sessionId": call.session_id, "chatInput": call.question}
    if call.history:
        body["history"] = [{"role": e.role, "content": e.text} for e in call.history]
    headers = {"Accept": "application/json, text/plain;q=0.9"}
    if call.api_key:
        headers[call.config.auth_header] = call.api_key
    async with opened(http, call, limits, call.config.base_url, headers=headers, body=body) as response:
        await check_status(call, response)
        streaming: bool | None = None
        whole: list[str] = []
        async for line in lines(call, response, limits):
            if streaming is None and line.strip():
                streaming = _stream_item(line) is not None
            if not streaming:
                whole.append(line)
                continue
            if not line.strip():
                continue
            item = _stream_item(line)
            if item is None:
                raise malformed(call, "a streamed line that is not a JSON item", detail="ndjson")
            kind, content = item.get("type"), item.get("content")
            if kind == "item" and isinstance(content, str) and content:
                await receive(PeerEvent(text=content))
            elif kind == "error":
                raise peer_error(call, content, detail="n8n error item")
        if not streaming:
            answer = _whole_answer(call, "\n".join(whole), response.headers.get("content-type", ""))
            await receive(PeerEvent(text=answer))


def _stream_item(line: str) -> dict[str, Any] | None:
    try:
        item = json.loads(line)
    except ValueError:
        return None
    return item if isinstance(item, dict) and item.get("type") in STREAM_TYPES else None


def _whole_answer(call: PeerCall, body: str, content_type: str) -> str:
    """The answer of a workflow that answers at once."""
    if not body.strip():
        raise malformed(call, "an empty answer", detail="empty")
    if "json" not in content_type.lower() and body.lstrip()[:1] not in ("{", "["):
        return body.strip()
    try:
        parsed = json.loads(body)
    except ValueError:
        raise malformed(call, "JSON that cannot be parsed", detail="json") from None
    if isinstance(parsed, list) and parsed:
        parsed = parsed[0]
    if isinstance(parsed, str) and parsed:
        return parsed
    if isinstance(parsed, dict):
        for field in ANSWER_FIELDS:
            value = parsed.get(field)
            if isinstance(value, str) and value:
                return value
    raise malformed(call, f"JSON without an {' or '.join(ANSWER_FIELDS)} field", detail="no output")


__all__ = ["relay_n8n"]
