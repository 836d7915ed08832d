"""The external applications of ``test_external.py`` on real loopback sockets, in one uvicorn server on a
background thread: a scripted Dify chat API and n8n webhook, written by hand from their documentation
(Dify's ``chat-messages`` server-sent events, n8n's streamed JSON lines and its one-shot answers), and a
real A2A agent built from the ``a2a-sdk``'s own server classes (an ``AgentExecutor`` streaming a
scripted answer as artifact chunks, served by the SDK's Starlette routes: agent card and JSON-RPC).

Each request is recorded (path, headers, JSON body) so tests can assert what was sent. Test-only.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from knowsphere_egress import EgressPolicy


@dataclass
class Reply:
    """One scripted answer of the Dify or n8n endpoint."""

    status: int = 200
    chunks: list[str] = field(default_factory=list)
    """Sent one by one (SSE events for Dify, JSON lines for n8n)."""
    body: Any = None
    """Sent at once: JSON unless ``content_type`` says otherwise."""
    content_type: str = "application/json"
    hang_after: int | None = None
    """Stop after this many chunks and wait (until the client goes away, or 10 s)."""
    delay: float = 0.0
    """Seconds before the first chunk (after the status line)."""


def sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event)}\n\n"


def dify_answer(
    pieces: list[str],
    *,
    conversation_id: str = "conv-1",
    task_id: str = "task-1",
    usage: tuple[int, int] = (12, 5),
) -> Reply:
    """A Dify stream: a ping, the answer's pieces as ``message`` events, ``message_end`` with usage."""
    common = {"task_id": task_id, "message_id": "msg-1", "conversation_id": conversation_id, "created_at": 1}
    chunks = ["event: ping\n\n"]
    chunks += [sse({"event": "message", **common, "answer": piece}) for piece in pieces]
    chunks.append(
        sse(
            {
                "event": "message_end",
                **common,
                "metadata": {"usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}},
            }
        )
    )
    return Reply(chunks=chunks, content_type="text/event-stream")


def n8n_stream(pieces: list[str]) -> Reply:
    """An n8n streamed answer: begin, one item per piece, end (one JSON object per line)."""
    meta = {"nodeId": "agent-1", "nodeName": "AI Agent"}
    lines = [json.dumps({"type": "begin", "metadata": meta}) + "\n"]
    lines += [json.dumps({"type": "item", "content": p, "metadata": meta}) + "\n" for p in pieces]
    lines.append(json.dumps({"type": "end", "metadata": meta}) + "\n")
    return Reply(chunks=lines, content_type="application/json; charset=utf-8")


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


class ScriptedAgent(AgentExecutor):
    """An A2A agent: answers ``pieces`` (default: an echo of the question) as chunks of one artifact,
    or fails the task when ``failure`` is set; records the context id of every message."""

    def __init__(self) -> None:
        self.pieces: list[str] | None = None
        self.failure: str = ""
        self.contexts: list[str] = []
        self.questions: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        self.contexts.append(task.context_id)
        question = context.get_user_input()
        self.questions.append(question)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if self.failure:
            await updater.failed(updater.new_agent_message([new_text_part(self.failure)]))
            return
        for n, piece in enumerate(self.pieces or ["You said: ", question]):
            await updater.add_artifact([new_text_part(piece)], artifact_id="answer", append=n > 0)
            await asyncio.sleep(0.02)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class PeerServer:
    """Dify under ``/dify/v1``, n8n under ``/n8n/hook``, the A2A agent under ``/a2a``."""

    def __init__(self) -> None:
        self.port = 0
        self.requests: list[Recorded] = []
        self.stops: list[str] = []
        self.dify: deque[Reply] = deque()
        self.n8n: deque[Reply] = deque()
        self.agent = ScriptedAgent()
        self.closed_early = threading.Event()
        """A stream the client went away from before its end."""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def egress(self, *more_ports: int) -> EgressPolicy:
        """The operator allow-lists this loopback server (and ``more_ports`` on loopback), as the tests
        of modelhub do theirs."""
        return EgressPolicy(
            allow_networks=("127.0.0.1/32",),  # type: ignore[arg-type]
            allowed_ports=frozenset({80, 443, self.port, *more_ports}),
        )

    def reset(self) -> None:
        self.requests.clear()
        self.stops.clear()
        self.dify.clear()
        self.n8n.clear()
        self.agent.pieces, self.agent.failure = None, ""
        self.agent.contexts.clear()
        self.agent.questions.clear()
        self.closed_early.clear()

    def seen(self, prefix: str) -> list[Recorded]:
        return [r for r in self.requests if r.path.startswith(prefix)]

    # -- endpoints --------------------------------------------------------------------------------

    async def _record(self, request: Request) -> None:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.requests.append(Recorded(request.url.path, dict(request.headers), body))

    async def _dify(self, request: Request) -> Response:
        await self._record(request)
        return self._reply(self.dify.popleft())

    async def _dify_stop(self, request: Request) -> Response:
        await self._record(request)
        self.stops.append(request.path_params["task_id"])
        return JSONResponse({"result": "success"})

    async def _n8n(self, request: Request) -> Response:
        await self._record(request)
        return self._reply(self.n8n.popleft())

    def _reply(self, reply: Reply) -> Response:
        if reply.body is not None or reply.status != 200:
            if reply.content_type.startswith("application/json"):
                return JSONResponse(reply.body, status_code=reply.status)
            return Response(str(reply.body), status_code=reply.status, media_type=reply.content_type)

        async def chunks() -> AsyncIterator[str]:
            sent = 0
            try:
                await asyncio.sleep(reply.delay)
                for chunk in reply.chunks:
                    if reply.hang_after is not None and sent == reply.hang_after:
                        await asyncio.sleep(10)
                    yield chunk
                    sent += 1
                    await asyncio.sleep(0.01)
            finally:
                if sent < len(reply.chunks):
                    self.closed_early.set()

        return StreamingResponse(chunks(), media_type=reply.content_type)

    def _app(self) -> Starlette:
        card = AgentCard(
            name="echo",
            description="Answers with what it was told.",
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(url=f"{self.url}/a2a/", protocol_binding="JSONRPC", protocol_version="1.0")
            ],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
        )
        handler = DefaultRequestHandler(
            agent_executor=self.agent, task_store=InMemoryTaskStore(), agent_card=card
        )
        agent = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
        app = Starlette(
            routes=[
                Route("/dify/v1/chat-messages", self._dify, methods=["POST"]),
                Route("/dify/v1/chat-messages/{task_id}/stop", self._dify_stop, methods=["POST"]),
                Route("/n8n/hook", self._n8n, methods=["POST"]),
                Mount("/a2a", app=agent),
            ]
        )

        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/a2a"):
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                self.requests.append(Recorded(scope["path"], headers, None))
            await app(scope, receive, send)

        return recorded  # type: ignore[return-value]  # an ASGI app recording the A2A requests

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(), log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="external-peers", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the external peers did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float = 5.0) -> None:
    """Waits until ``check()`` holds (the peers run on another thread)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.02)
