"""Fixtures of the gateway's tests: fake peer services on real gRPC servers (loopback), reached through the
real clients, and the gateway's app over them, driven through its ASGI interface."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from knowsphere_clients import (
    ConversationClient,
    IngestionClient,
    MemoryClient,
    ModelHubClient,
    RetrievalClient,
    ToolRunnerClient,
)
from knowsphere_contracts.events import ChatTurnEvent
from knowsphere_gateway.adapters.applications_sql import SqlApplicationStore
from knowsphere_gateway.adapters.evaluations_sql import SqlEvaluationStore
from knowsphere_gateway.adapters.tokens_sql import SqlTokenStore
from knowsphere_gateway.api.bus import build_bus
from knowsphere_gateway.api.evaluation_runs import EvaluationRuns
from knowsphere_gateway.api.http import GatewayContext, create_app
from knowsphere_gateway.domain.evaluations import DEFAULT_EVALUATION_OPTIONS
from knowsphere_gateway.domain.tokens import TokenHasher, TokenService
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.rpc.testing import serving

DEFAULT_IDENTITY = Identity("t1", "u1")

Serve = Callable[[str, object], Awaitable[grpc.aio.Channel]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(service, servicer)``: a channel to ``servicer`` answering as ``service`` (methods it
    lacks answer UNIMPLEMENTED)."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(service: str, servicer: object) -> grpc.aio.Channel:
            return await stack.enter_async_context(serving(service, servicer))

        yield start


class Nothing:
    """A fake peer that implements nothing."""


GatewayApp = Callable[..., Awaitable[FastAPI]]


TOKEN_HASH_KEY = b"gateway-tests-token-hash-key-0123456789"


@pytest.fixture
async def tokens(tmp_path: Path) -> AsyncIterator[TokenService]:
    """The token service over a SQLite token store of the test's own."""
    store = SqlTokenStore(f"sqlite+aiosqlite:///{tmp_path}/tokens.db")
    await store.open()
    yield TokenService(store, TokenHasher(TOKEN_HASH_KEY))
    await store.close()


@pytest.fixture
async def applications(tmp_path: Path) -> AsyncIterator[SqlApplicationStore]:
    """The application store, on the tokens' SQLite database as in production."""
    store = SqlApplicationStore(f"sqlite+aiosqlite:///{tmp_path}/tokens.db")
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def gateway(
    serve: Serve, tokens: TokenService, applications: SqlApplicationStore, tmp_path: Path
) -> AsyncIterator[GatewayApp]:
    """``await gateway(ingestion=…, retrieval=…, modelhub=…, **context)``: the gateway's app over fake
    peers (servicer objects); ``context`` overrides fields of its ``GatewayContext``. By default in local
    mode as ``DEFAULT_IDENTITY``, with the ``tokens`` and ``applications`` fixtures' stores, and evaluation
    runs (started, stopped after the test) on the same database calling the ``retrieval`` peer."""
    stack = contextlib.AsyncExitStack()

    async def build(
        ingestion: object | None = None,
        retrieval: object | None = None,
        modelhub: object | None = None,
        conversation: object | None = None,
        memory: object | None = None,
        toolrunner: object | None = None,
        **context: Any,
    ) -> FastAPI:
        fields: dict[str, Any] = {
            "bus": build_bus(),
            "chat_events": Fanout[ChatTurnEvent](),
            "health_probes": {},
            "bus_connected": _connected,
            "chat_turn_timeout": 5.0,
            "tokens": tokens,
            "applications": applications,
            "local_identity": DEFAULT_IDENTITY,
            "ingestion": IngestionClient(await serve("ingestion", ingestion or Nothing())),
            # A fake peer, or a client of retrieval's own servicers.
            "retrieval": retrieval
            if isinstance(retrieval, RetrievalClient)
            else RetrievalClient(await serve("retrieval", retrieval or Nothing())),
            "modelhub": ModelHubClient(await serve("modelhub", modelhub or Nothing())),
            "conversation": ConversationClient(await serve("conversation", conversation or Nothing())),
            "memory": MemoryClient(await serve("memory", memory or Nothing())),
            # A fake peer, or a client of a real toolrunner process.
            "toolrunner": toolrunner
            if isinstance(toolrunner, ToolRunnerClient)
            else ToolRunnerClient(await serve("toolrunner", toolrunner or Nothing())),
        }
        fields.update(context)
        if "evaluations" not in fields:
            runs = EvaluationRuns(
                SqlEvaluationStore(f"sqlite+aiosqlite:///{tmp_path}/tokens.db"),
                fields["retrieval"],
                DEFAULT_EVALUATION_OPTIONS,
            )
            await runs.start()
            stack.push_async_callback(runs.stop)
            fields["evaluations"] = runs
        return create_app(GatewayContext(**fields))

    async with stack:
        yield build


async def _connected() -> bool:
    return True


@contextlib.asynccontextmanager
async def _listening(app: Any) -> AsyncIterator[tuple[str, int]]:
    """``app`` served by uvicorn on a free loopback port (a real socket); yields its host and port."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield "127.0.0.1", server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


@pytest.fixture
def listening() -> Callable[[Any], contextlib.AbstractAsyncContextManager[tuple[str, int]]]:
    """``async with listening(app) as (host, port):`` the app on a real loopback socket."""
    return _listening


def http(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


@pytest.fixture
def client() -> Callable[[FastAPI], httpx.AsyncClient]:
    """``async with client(app) as http:`` an HTTP client of ``app`` (its answers buffered whole)."""
    return http
