"""An MCP server over streamable HTTP, through the official SDK (``mcp``), with every request made by an
``httpx.AsyncClient`` of the egress guard (so an MCP server on a private address must be allow-listed
like any other destination).

Each call opens its own MCP session (initialize, then the request, then the session is closed): no
long-lived connection to keep healthy, at the price of one more round trip per call.
"""

from __future__ import annotations

from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent

from knowsphere_toolrunner.domain.tools.mcp import McpCallResult, McpRefused, McpToolInfo, McpUnavailable


class McpHttpServer:
    def __init__(self, name: str, url: str, http: httpx.AsyncClient) -> None:
        self.name = name
        self._url = url
        self._http = http

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

    async def _session(self, work: Any) -> None:
        try:
            async with (
                streamable_http_client(self._url, http_client=self._http) as (read, write, _),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await work(session)
        except McpError as error:
            raise McpRefused(f"MCP server {self.name} refused: {error.error.message}") from error
        except ExceptionGroup as group:  # the SDK's task group wraps what went wrong (never a cancellation)
            refused = group.subgroup(McpError)
            if refused is not None:
                first = refused.exceptions[0]
                assert isinstance(first, McpError)
                raise McpRefused(f"MCP server {self.name} refused: {first.error.message}") from group
            raise McpUnavailable(f"MCP server {self.name} cannot be reached") from group
        except (httpx.HTTPError, OSError) as error:
            raise McpUnavailable(f"MCP server {self.name} cannot be reached") from error
