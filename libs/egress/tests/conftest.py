"""A real HTTP/1.1 server on 127.0.0.1 with the behaviours the guard must survive: redirects, a body
that never ends, a slow-loris trickle, a gzip bomb; it records every connection it accepts, so a test
can assert that a refused fetch never reached it."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import pytest

GZIP_BOMB_INFLATED_BYTES = 64 * 1024 * 1024
SLOW_BYTE_INTERVAL_SECONDS = 0.05
SLOW_BODY_BYTES = 200


@dataclass
class LocalServer:
    port: int = 0
    connections: int = 0
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """(path, headers) of each request, in order."""
    handlers: list[asyncio.Task[None]] = field(default_factory=list)

    def url(self, path: str = "/ok", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self.handlers.append(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                _method, target, _version = lines[0].split(" ", 2)
                pairs = (line.split(":", 1) for line in lines[1:] if line)
                headers = {name.strip().lower(): value.strip() for name, value in pairs}
                self.requests.append((target, headers))
                if not await self.respond(target, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def respond(self, target: str, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False closes the connection."""
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        path = parts.path
        if path == "/ok":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello")
        elif path == "/redirect":
            location = query["to"][0].encode()
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n")
        elif path == "/loop":
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n")
        elif path == "/declared-huge":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\nxx")
        elif path == "/forever":
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            chunk = b"x" * 65536
            while True:
                writer.write(chunk)
                await writer.drain()
        elif path == "/slow":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % SLOW_BODY_BYTES)
            for _ in range(SLOW_BODY_BYTES):
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(SLOW_BYTE_INTERVAL_SECONDS)
        elif path == "/gzip-bomb":
            body = gzip.compress(b"\0" * GZIP_BOMB_INFLATED_BYTES, compresslevel=9)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
        elif path == "/hang-up":
            return False
        elif path == "/not-http":
            writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
            await writer.drain()
            return False
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        return True


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    local = LocalServer()
    srv = await asyncio.start_server(local.handle, "127.0.0.1", 0)
    local.port = srv.sockets[0].getsockname()[1]
    try:
        yield local
    finally:
        srv.close()
        for task in local.handlers:
            task.cancel()
        await asyncio.gather(*local.handlers, return_exceptions=True)
        await srv.wait_closed()


@pytest.fixture
async def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port: int = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    return port
