"""A scripted model provider for contract tests: real HTTP on 127.0.0.1 that replays fixtures.

Tests queue replies per path (``script("/v1/chat/completions", Reply.fixture("openai/chat_text.sse"))``);
each incoming request takes the next reply of its path and is recorded (method, path, headers, body,
client port) so the test can assert the request shape. A reply is JSON, an SSE stream sent chunk by
chunk (optionally cut at arbitrary byte offsets), raw bytes, or an error status with the provider's
error body, optionally after a delay. The server speaks whatever the fixture says: OpenAI-, Anthropic-,
Jina- or DashScope-style alike.

It also counts requests in flight (for concurrency limits) and the TCP connections it saw (for
connection pooling). It runs uvicorn in a background thread on a random port; it is test-only and is
never a product default.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from knowsphere_egress import EgressPolicy

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    json: Any = None
    sse: list[str] | None = None  # complete events ("data: …\n\n"), each sent as its own chunk
    body: bytes | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    chunk_delay: float = 0.0  # seconds between stream chunks
    split_bytes: int | None = None  # send the SSE stream in chunks of this many bytes instead

    @classmethod
    def fixture(cls, name: str, *, status: int = 200, **kwargs: Any) -> Reply:
        """A reply from ``fixtures/<name>``: ``.json`` as JSON, ``.sse`` as an event stream."""
        text = (FIXTURES / name).read_text(encoding="utf-8")
        if name.endswith(".sse"):
            return cls(status=status, sse=split_events(text), **kwargs)
        return cls(status=status, json=json.loads(text), **kwargs)

    @classmethod
    def sse_data(cls, chunks: Iterable[Any], *, done: bool = True, **kwargs: Any) -> Reply:
        """An OpenAI-style stream of ``data:`` events from JSON objects, ending with ``[DONE]``."""
        events = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks]
        if done:
            events.append("data: [DONE]\n\n")
        return cls(sse=events, **kwargs)


def split_events(text: str) -> list[str]:
    """An SSE text split into its events, each with its terminating blank line."""
    events = [e.strip("\n") for e in text.replace("\r\n", "\n").split("\n\n")]
    return [f"{e}\n\n" for e in events if e.strip()]


def openai_text_stream(pieces: Iterable[str], *, model: str = "gpt-4o-mini", finish: str = "stop") -> Reply:
    """An OpenAI chat stream whose content deltas are ``pieces`` (the shape of chat_text.sse)."""
    base = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
    }
    chunks: list[dict[str, Any]] = [
        {
            **base,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    ]
    chunks += [
        {**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return Reply.sse_data(chunks)


def openai_tool_call_stream(
    name: str, arguments: dict[str, Any], *, call_id: str = "call_scripted", model: str = "gpt-4o-mini"
) -> Reply:
    """An OpenAI chat stream that calls one tool, its arguments split over two deltas."""
    base = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
    }
    raw = json.dumps(arguments, ensure_ascii=False)
    head = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    deltas = [
        {"role": "assistant", "content": None, "tool_calls": [head]},
        {"tool_calls": [{"index": 0, "function": {"arguments": raw[: len(raw) // 2]}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": raw[len(raw) // 2 :]}}]},
    ]
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return Reply.sse_data(chunks)


def openai_logprobs(label: str, *, model: str = "gpt-4o-mini") -> Reply:
    """A one-token completion whose top logprobs put ``label`` first (what a Decide call reads)."""
    others = [c for c in "ABCDEFGH" if c != label][:3]
    top = [{"token": label, "logprob": -0.05, "bytes": list(label.encode())}] + [
        {"token": c, "logprob": -4.0 - i, "bytes": list(c.encode())} for i, c in enumerate(others)
    ]
    return Reply(
        json={
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": label},
                    "logprobs": {"content": [{**top[0], "top_logprobs": top}]},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 90, "completion_tokens": 1, "total_tokens": 91},
        }
    )


def openai_decision(label: str, body: dict[str, Any]) -> Reply | None:
    """The answer to a Decide call naming ``label``, in the shape the call asked for (top logprobs, or
    a JSON object streamed as text); None when ``body`` is not a Decide call."""
    if body.get("logprobs"):
        return openai_logprobs(label)
    if body.get("response_format"):
        return openai_text_stream([json.dumps({"label": label})])
    return None


def anthropic_text_stream(text: str, *, model: str = "claude-sonnet-4-5") -> Reply:
    """An Anthropic Messages stream answering ``text`` in one delta (the shape of messages_text.sse)."""
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_scripted",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 40, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 9},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Reply(sse=[f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events])


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    client_port: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedProvider:
    """The server. ``start()`` / ``stop()``; ``reset()`` between tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Reply]] = {}
        self._responders: dict[str, Callable[[Recorded], Reply]] = {}
        self.requests: list[Recorded] = []
        self.unscripted: list[str] = []
        self.connections: set[int] = set()
        self.in_flight = 0  # requests of this test (since reset) being answered
        self.max_in_flight = 0
        self._generation = 0  # requests of earlier tests still sleeping do not count
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def modelhub_egress_env(self, *more_ports: int) -> dict[str, str]:
        """The same allow-listing as a modelhub process's environment (``KS_MODELHUB_EGRESS__…``),
        for a stack whose tenants' models point at this server (and at ``more_ports`` on loopback).
        Start the server first."""
        assert self.port, "start() the server before asking for its environment"
        return {
            "KS_MODELHUB_EGRESS__ALLOW_NETWORKS": '["127.0.0.1/32"]',
            "KS_MODELHUB_EGRESS__ALLOWED_PORTS": json.dumps([80, 443, self.port, *more_ports]),
        }

    def egress(self) -> EgressPolicy:
        """An egress policy that lets calls reach this server (loopback, its port), as an operator
        allow-lists an internal provider."""
        return EgressPolicy(
            allow_networks=("127.0.0.1/32",),  # type: ignore[arg-type]
            allowed_ports=frozenset({80, 443, self.port}),
        )

    # -- scripting --------------------------------------------------------------------------------

    def script(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._scripts.setdefault(path, deque()).extend(replies)

    def respond(self, path: str, responder: Callable[[Recorded], Reply]) -> None:
        """Answer requests of ``path`` that no queued reply is left for with ``responder(request)``
        (a reply chosen from what was asked: for concurrent or multi-step callers)."""
        with self._lock:
            self._responders[path] = responder

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self._responders.clear()
            self.requests.clear()
            self.unscripted.clear()
            self.connections.clear()
            self.in_flight = 0
            self.max_in_flight = 0
            self._generation += 1

    def requests_to(self, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def pending(self) -> dict[str, int]:
        """Scripted replies not yet taken, per path."""
        with self._lock:
            return {path: len(queue) for path, queue in self._scripts.items() if queue}

    # -- serving ----------------------------------------------------------------------------------

    def _enter(self, recorded: Recorded) -> tuple[int, Reply | None]:
        with self._lock:
            self.requests.append(recorded)
            self.connections.add(recorded.client_port)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            queue = self._scripts.get(recorded.path)
            if not queue and recorded.path in self._responders:
                return self._generation, self._responders[recorded.path](recorded)
            if not queue:
                self.unscripted.append(f"{recorded.method} {recorded.path}")
                return self._generation, None
            return self._generation, queue.popleft()

    def _leave(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self.in_flight -= 1

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        client = request.scope.get("client") or ("", 0)
        recorded = Recorded(
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            client_port=int(client[1]),
        )
        generation, reply = self._enter(recorded)
        streaming = False
        try:
            if reply is None:
                # 418: not retried by the client, so a missing script fails fast and visibly.
                return JSONResponse({"error": {"message": f"no script for {recorded.path}"}}, status_code=418)
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if reply.sse is not None:
                streaming = True
                return StreamingResponse(
                    self._stream(reply, generation),
                    status_code=reply.status,
                    media_type=reply.content_type or "text/event-stream",
                    headers=reply.headers,
                )
            if reply.body is not None:
                return Response(
                    reply.body,
                    status_code=reply.status,
                    media_type=reply.content_type or "application/octet-stream",
                    headers=reply.headers,
                )
            return JSONResponse(reply.json, status_code=reply.status, headers=reply.headers)
        finally:
            if not streaming:
                self._leave(generation)

    async def _stream(self, reply: Reply, generation: int) -> AsyncIterator[bytes]:
        try:
            assert reply.sse is not None
            if reply.split_bytes:
                data = "".join(reply.sse).encode("utf-8")
                pieces = [data[i : i + reply.split_bytes] for i in range(0, len(data), reply.split_bytes)]
            else:
                pieces = [event.encode("utf-8") for event in reply.sse]
            for piece in pieces:
                yield piece
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
        finally:
            self._leave(generation)

    def start(self) -> None:
        app = Starlette(
            routes=[
                Route(
                    "/{path:path}",
                    self._handle,
                    methods=["GET", "POST", "PUT", "DELETE", "PATCH"],
                )
            ]
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="scripted-provider", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the scripted provider did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def closed_port() -> int:
    """A loopback port nothing listens on (for connection-refused tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
