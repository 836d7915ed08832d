"""Uvicorn as a lifecycle component, leaving signal handling to the service's lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI


class _QuietSignalsServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The lifecycle owns SIGTERM/SIGINT and stops this server in order with the rest.
        yield


class HttpServerComponent:
    name = "http"

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off")
        self._server = _QuietSignalsServer(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> object:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raises the bind error
                raise OSError("HTTP server exited during start-up")
            await asyncio.sleep(0.02)
        return None

    async def stop(self, grace: float | None = None) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._task, timeout=grace)
        except TimeoutError:
            self._server.force_exit = True
            await self._task
