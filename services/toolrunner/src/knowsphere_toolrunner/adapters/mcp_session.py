"""What every MCP server adapter shares, whatever carries its messages: listing tools, calling one,
turning the answer into text or JSON for the model, and telling a refusal from an unreachable server.

Each call opens its own MCP session (initialize, then the request, then the session is closed): no
long-lived connection or process to keep healthy, at the price of one more round trip per call.
A subclass only says how to open the message streams (``_streams``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent

from knowsphere_toolrunner.domain.tools.mcp import McpCallResult, McpRefused, McpToolInfo, McpUnavailable

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


class McpSessionServer:
    """An MCP server reached through ``_streams``; subclasses open them."""

    name: str
    unavailable_errors: tuple[type[BaseException], ...] = (httpx.HTTPError, OSError, EOFError)
    """Errors that mean the server could not be reached or broke off (worth another attempt)."""

    def _streams(self) -> AbstractAsyncContextManager[Streams]:
        raise NotImplementedError

    def _unavailable(self, error: BaseException) -> McpUnavailable:
        """The error for a server that could not be reached (subclasses may say more)."""
        return McpUnavailable(f"MCP server {self.name} cannot be reached")

    async def list_tools(self, *, limit: int) -> list[McpToolInfo]:
        found: list[McpToolInfo] = []

        async def work(session: ClientSession) -> None:
            cursor: str | None = None
            while len(found) < limit:
                page = await session.list_tools(cursor)
                found.extend(
                    McpToolInfo(
                        name=tool.name, description=tool.description or "", input_schema=tool.inputSchema
                    )
                    for tool in page.tools
                )
                cursor = page.nextCursor
                if not cursor:
                    break

        await self._session(work)
        return found[:limit]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpCallResult:
        result: list[CallToolResult] = []

        async def work(session: ClientSession) -> None:
            result.append(await session.call_tool(name, arguments))

        await self._session(work)
        answer = result[0]
        parts = []
        for item in answer.content:
            if isinstance(item, TextContent):
                parts.append(item.text)
            else:
                # Images, audio and resources are not passed to the model as text; it is told they exist.
                parts.append(f"[{item.type} content omitted]")
        return McpCallResult(
            text="\n".join(parts), structured=answer.structuredContent, is_error=answer.isError
        )

    async def _session(self, work: Callable[[ClientSession], Awaitable[None]]) -> None:
        try:
            async with self._streams() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await work(session)
        except McpError as error:
            raise self._refused_or_gone(error) from error
        except ExceptionGroup as group:  # the SDK's task group wraps what went wrong (never a cancellation)
            refused = _first_leaf(group.subgroup(McpError))
            if isinstance(refused, McpError):
                raise self._refused_or_gone(refused) from group
            raise self._unavailable(group) from group
        except self.unavailable_errors as error:
            raise self._unavailable(error) from error

    def _refused_or_gone(self, error: McpError) -> McpRefused | McpUnavailable:
        # The SDK answers pending requests with CONNECTION_CLOSED when the server goes away: that is
        # not the server's refusal.
        if error.error.code == CONNECTION_CLOSED:
            return self._unavailable(error)
        return McpRefused(f"MCP server {self.name} refused: {error.error.message}")


def _first_leaf(error: BaseException | None) -> BaseException | None:
    """The first exception that is not a group, however deeply the task groups nested it."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
