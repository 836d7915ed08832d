"""An MCP server over stdio, run inside the sandbox (``ScriptSandbox.interactive``: no network,
read-only system, its own namespaces, rlimits, wall-clock and memory limits), spoken to with the
official SDK's ``ClientSession`` over the sandboxed process's stdin and stdout.

Every call starts the server afresh and ends it afterwards (``mcp_session``): no state survives
from one call to the next, nor from one tenant's call to another's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCMessage

from knowsphere_toolrunner.adapters.mcp_session import McpSessionServer, Streams
from knowsphere_toolrunner.domain.tools.mcp import McpUnavailable
from knowsphere_toolrunner.sandbox import SandboxCommand, SandboxError, SandboxProcess, ScriptSandbox

_READ_CHUNK = 65536
_STDERR_IN_ERROR = 300  # characters of the server's stderr kept in an unavailability message (logs)


class McpStdioServer(McpSessionServer):
    unavailable_errors = (*McpSessionServer.unavailable_errors, SandboxError)

    def __init__(
        self, name: str, sandbox: ScriptSandbox, command: SandboxCommand, *, max_line_bytes: int
    ) -> None:
        self.name = name
        self._sandbox = sandbox
        self._command = command
        self._max_line_bytes = max_line_bytes
        self._last_stderr = ""

    def _unavailable(self, error: BaseException) -> McpUnavailable:
        if isinstance(error, SandboxError):
            return McpUnavailable(f"MCP server {self.name} cannot start in the sandbox: {error}")
        detail = self._last_stderr.strip()[-_STDERR_IN_ERROR:]
        return McpUnavailable(
            f"MCP server {self.name} stopped answering" + (f" (stderr: {detail})" if detail else "")
        )

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[Streams]:
        incoming_writer: MemoryObjectSendStream[SessionMessage | Exception]
        incoming: MemoryObjectReceiveStream[SessionMessage | Exception]
        incoming_writer, incoming = anyio.create_memory_object_stream(0)
        outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)
        async with self._sandbox.interactive(self._command) as process:
            try:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._read, process, incoming_writer)
                    tasks.start_soon(self._write, process, outgoing_reader)
                    try:
                        yield incoming, outgoing
                    finally:
                        tasks.cancel_scope.cancel()
            finally:
                self._last_stderr = process.stderr_tail()
                for stream in (incoming, outgoing, incoming_writer, outgoing_reader):
                    await stream.aclose()

    async def _read(
        self, process: SandboxProcess, sink: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """One JSON-RPC message per line of the server's stdout; the stream ends with the process."""
        pending = b""
        async with sink:
            while chunk := await process.stdout.read(_READ_CHUNK):
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > self._max_line_bytes:
                    await sink.send(ValueError(f"a message over {self._max_line_bytes} bytes"))
                    return
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        message = JSONRPCMessage.model_validate_json(line)
                    except ValueError as error:
                        await sink.send(error)
                        continue
                    await sink.send(SessionMessage(message))

    async def _write(
        self, process: SandboxProcess, source: MemoryObjectReceiveStream[SessionMessage]
    ) -> None:
        async with source:
            async for item in source:
                line = item.message.model_dump_json(by_alias=True, exclude_none=True) + "\n"
                process.stdin.write(line.encode())
                await process.stdin.drain()
