"""An MCP server over streamable HTTP, through the official SDK (``mcp``), with every request made by an
``httpx.AsyncClient`` of the egress guard (so an MCP server on a private address must be allow-listed
like any other destination). Sessions, results and errors: ``mcp_session``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from mcp.client.streamable_http import streamable_http_client

from knowsphere_toolrunner.adapters.mcp_session import McpSessionServer, Streams


class McpHttpServer(McpSessionServer):
    def __init__(self, name: str, url: str, http: httpx.AsyncClient) -> None:
        self.name = name
        self._url = url
        self._http = http

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[Streams]:
        async with streamable_http_client(self._url, http_client=self._http) as (read, write, _):
            yield read, write
