"""What the external peers' adapters (``dify``, ``n8n``, ``a2a``) share: one guarded request, bounded
reading of a streamed body, server-sent events, and the one mapping of failures to the turn's
``external_*`` codes with a message for the user.

Messages name the orchestrator and what to do, never the key, the address or the low-level reason (a
tenant who points an orchestrator at internal hosts must not learn from the answer what listens there:
"refused", "not allowed" and "no such name" read the same, as in the egress guard). A peer's own error
text is relayed, cut short and with any copy of the key masked; operators find the detail in the log.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import structlog

from knowsphere_conversation.domain.external import PeerCall
from knowsphere_conversation.domain.graph import TurnError
from knowsphere_conversation.domain.turns import (
    EXTERNAL_AUTH_FAILED,
    EXTERNAL_BAD_RESPONSE,
    EXTERNAL_FAILED,
    EXTERNAL_RATE_LIMITED,
    EXTERNAL_TIMEOUT,
    EXTERNAL_UNREACHABLE,
)
from knowsphere_egress import EgressError, EgressErrorCode

log = structlog.get_logger(__name__)

PROVIDER_LABELS = {"dify": "Dify application", "n8n": "n8n workflow", "a2a": "A2A agent"}
MAX_PEER_TEXT_CHARS = 300
"""How much of a peer's own error message reaches the user."""
MAX_ERROR_BODY_BYTES = 64 * 1024
MASK = "***"


@dataclass(frozen=True)
class PeerLimits:
    """Budgets of one call, besides the orchestrator's own ``timeout_seconds``."""

    max_bytes: int = 10 * 1024 * 1024
    """Body bytes read per call (the egress policy's ``max_response_bytes``)."""
    connect_seconds: float = 10.0
    """One TCP connect (the egress policy's)."""
    stop_seconds: float = 2.0
    """How long telling a peer to stop a cancelled answer may take (best effort)."""


def label(call: PeerCall) -> str:
    return f"{call.name} ({PROVIDER_LABELS.get(call.config.provider, call.config.provider)})"


def failure(call: PeerCall, code: str, message: str, *, detail: str = "") -> TurnError:
    """The turn's end; ``detail`` (never the key) goes to the log only."""
    log.warning(
        "external application failed",
        provider=call.config.provider,
        code=code,
        detail=detail,
    )
    return TurnError(code, message)


def peer_text(call: PeerCall, value: Any) -> str:
    """A peer's own words for the user: text only, cut short, any copy of the key masked."""
    text = " ".join(str(value or "").split())
    if call.api_key:
        text = text.replace(call.api_key, MASK)
    if len(text) > MAX_PEER_TEXT_CHARS:
        text = text[: MAX_PEER_TEXT_CHARS - 1] + "…"
    return text or "no reason given"


def timeout_of(call: PeerCall, limits: PeerLimits) -> httpx.Timeout:
    """``timeout_seconds`` of silence at every step: connecting, before the first byte, between pieces."""
    seconds = call.config.timeout_seconds
    return httpx.Timeout(seconds, connect=min(seconds, limits.connect_seconds))


def egress_failure(call: PeerCall, error: EgressError, *, answering: bool = False) -> TurnError:
    if error.code is EgressErrorCode.TIMED_OUT:
        return timed_out(call, f"egress.{error.code.value}")
    if answering or error.code in (EgressErrorCode.BAD_RESPONSE, EgressErrorCode.TOO_LARGE):
        return malformed(call, "its answer broke off", detail=f"egress.{error.code.value}")
    return failure(
        call,
        EXTERNAL_UNREACHABLE,
        f"the external application {label(call)} cannot be reached, or its address is not one this "
        "platform may call; check the orchestrator's base_url",
        detail=f"egress.{error.code.value}",
    )


def timed_out(call: PeerCall, detail: str = "") -> TurnError:
    return failure(
        call,
        EXTERNAL_TIMEOUT,
        f"the external application {label(call)} took too long to answer; try again, or raise the "
        "orchestrator's timeout_seconds",
        detail=detail,
    )


def unreachable(call: PeerCall, detail: str = "") -> TurnError:
    return failure(
        call,
        EXTERNAL_UNREACHABLE,
        f"the external application {label(call)} cannot be reached, or its address is not one this "
        "platform may call; check the orchestrator's base_url",
        detail=detail,
    )


def malformed(call: PeerCall, what: str, *, detail: str = "") -> TurnError:
    return failure(
        call,
        EXTERNAL_BAD_RESPONSE,
        f"the external application {label(call)} answered in a way that cannot be read ({what})",
        detail=detail,
    )


def peer_error(call: PeerCall, said: Any, *, detail: str = "") -> TurnError:
    return failure(
        call,
        EXTERNAL_FAILED,
        f"the external application {label(call)} reported an error: {peer_text(call, said)}",
        detail=detail,
    )


def status_failure(call: PeerCall, status: int, said: Any = "") -> TurnError:
    """An answer with an error status (redirects included: they are not followed)."""
    detail = f"http {status}"
    if status in (401, 403):
        return failure(
            call,
            EXTERNAL_AUTH_FAILED,
            f"the external application {label(call)} refused the orchestrator's API key (HTTP {status}); "
            "check its api_key",
            detail=detail,
        )
    if status == 429:
        return failure(
            call,
            EXTERNAL_RATE_LIMITED,
            f"the external application {label(call)} is limiting requests; try again in a moment",
            detail=detail,
        )
    if 300 <= status < 400:
        return failure(
            call,
            EXTERNAL_FAILED,
            f"the external application {label(call)} answered with a redirect (HTTP {status}), which is "
            "not followed; set the orchestrator's base_url to where it leads",
            detail=detail,
        )
    if status == 404:
        return failure(
            call,
            EXTERNAL_FAILED,
            f"the external application {label(call)} has nothing at the orchestrator's base_url "
            "(HTTP 404); check the URL",
            detail=detail,
        )
    return failure(
        call,
        EXTERNAL_FAILED,
        f"the external application {label(call)} answered with an error (HTTP {status}): "
        f"{peer_text(call, said)}",
        detail=detail,
    )


async def error_said(response: httpx.Response) -> str:
    """What an error answer says about itself: its JSON ``message`` (or ``error``), else its text."""
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= MAX_ERROR_BODY_BYTES:
            break
    text = bytes(body[:MAX_ERROR_BODY_BYTES]).decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if isinstance(parsed, dict):
        for key in ("message", "error", "detail"):
            value = parsed.get(key)
            if isinstance(value, dict):
                value = value.get("message")
            if isinstance(value, str) and value:
                return value
    return text


@contextlib.asynccontextmanager
async def opened(
    http: httpx.AsyncClient,
    call: PeerCall,
    limits: PeerLimits,
    url: str,
    *,
    headers: dict[str, str],
    body: dict[str, Any],
) -> AsyncIterator[httpx.Response]:
    """A POST whose answer is read as it streams. Failures before the answer are ``unreachable`` or
    ``timeout``; while reading it, ``timeout`` or a broken answer. Errors of the caller's own (its
    handling of the answer) pass through untouched."""
    request = http.build_request("POST", url, headers=headers, json=body, timeout=timeout_of(call, limits))
    try:
        response = await http.send(request, stream=True)
    except EgressError as error:
        raise egress_failure(call, error) from None
    except httpx.TimeoutException as error:
        raise timed_out(call, type(error).__name__) from None
    except httpx.TransportError as error:
        raise unreachable(call, type(error).__name__) from None
    try:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            # Identity was asked for: a compressed body could inflate past every budget.
            raise malformed(call, f"a {encoding}-encoded body", detail="content-encoding")
        yield response
    except EgressError as error:
        raise egress_failure(call, error, answering=True) from None
    except httpx.TimeoutException as error:
        raise timed_out(call, type(error).__name__) from None
    except httpx.TransportError as error:
        raise malformed(call, "its answer broke off", detail=type(error).__name__) from None
    finally:
        await response.aclose()


async def check_status(call: PeerCall, response: httpx.Response) -> None:
    if response.status_code >= 300:
        raise status_failure(call, response.status_code, await error_said(response))


async def lines(call: PeerCall, response: httpx.Response, limits: PeerLimits) -> AsyncIterator[str]:
    """The body's lines as they arrive (decoded per line, so no character is split), within the size
    budget."""
    buffer = bytearray()
    total = 0
    async for chunk in response.aiter_raw():
        total += len(chunk)
        if total > limits.max_bytes:
            raise malformed(call, f"its answer is over {limits.max_bytes} bytes", detail="too large")
        buffer += chunk
        while (cut := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:cut]).rstrip(b"\r")
            del buffer[: cut + 1]
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield bytes(buffer).rstrip(b"\r").decode("utf-8", errors="replace")


async def server_sent_events(source: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) of each event of a ``text/event-stream`` (comments and ``retry`` skipped)."""
    name = ""
    data: list[str] = []
    async for line in source:
        if not line:
            if data:
                yield name or "message", "\n".join(data)
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data:
        yield name or "message", "\n".join(data)


def count(value: Any) -> int:
    """A token count a peer reports (anything else counts as none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


__all__ = [
    "PROVIDER_LABELS",
    "PeerLimits",
    "check_status",
    "count",
    "egress_failure",
    "failure",
    "label",
    "lines",
    "malformed",
    "opened",
    "peer_error",
    "peer_text",
    "server_sent_events",
    "status_failure",
    "timed_out",
    "timeout_of",
    "unreachable",
]
