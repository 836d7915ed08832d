"""Start-up and shutdown of the toolrunner's store, egress client and MCP servers' tools."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import structlog

from knowsphere_egress import EgressClient
from knowsphere_runtime.lifecycle import StartupError
from knowsphere_toolrunner.adapters.mcp_http import McpHttpServer
from knowsphere_toolrunner.adapters.mcp_session import McpSessionServer
from knowsphere_toolrunner.adapters.mcp_stdio import McpStdioServer
from knowsphere_toolrunner.adapters.sql_store import SqlToolResultStore
from knowsphere_toolrunner.domain.skill_runs import ScriptRunner
from knowsphere_toolrunner.domain.tools.base import Tool
from knowsphere_toolrunner.domain.tools.mcp import McpRefused, McpTool, McpUnavailable, mcp_tool_name
from knowsphere_toolrunner.sandbox import SandboxCommand, ScriptSandbox
from knowsphere_toolrunner.settings import McpServer, Settings

log = structlog.get_logger(__name__)


class ToolRunnerCore:
    name = "toolrunner-store"

    def __init__(self, settings: Settings, store: SqlToolResultStore) -> None:
        self._settings = settings
        self._store = store

    async def start(self) -> object:
        self._settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            await self._store.open()
        except Exception as error:
            # A server URL may hold a password: name the setting rather than print it.
            where = (
                "KS_TOOLRUNNER_DATABASE_URL"
                if self._settings.database_url
                else self._settings.result_store_url()
            )
            raise StartupError(f"cannot open the tool result store ({where}): {error}") from error
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self._store.close()


class EgressComponent:
    """Closes the egress guard's connections at shutdown (the client itself needs no start)."""

    name = "toolrunner-egress"

    def __init__(self, egress: EgressClient) -> None:
        self._egress = egress

    async def start(self) -> object:
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self._egress.aclose()


class McpDiscovery:
    """Lists the configured MCP servers' tools at start-up and offers them as ``<server>__<tool>``.

    A server that cannot be reached or refuses is logged and left out (the service still starts; its
    tools read as unknown until the next start); so are tools whose names a model API would refuse.
    A stdio server runs in the sandbox, one fresh process per call; where the sandbox cannot run on
    this machine, stdio servers are left out.
    """

    name = "toolrunner-mcp"

    def __init__(
        self,
        servers: Sequence[McpServer],
        egress: EgressClient,
        add_tools: Callable[[Sequence[Tool]], None],
        *,
        tool_timeout_seconds: float,
        discovery_timeout_seconds: float,
        max_tools_per_server: int,
        sandbox: ScriptRunner | None = None,
        stdio_max_message_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._servers = servers
        self._egress = egress
        self._sandbox = sandbox
        self._stdio_max_message_bytes = stdio_max_message_bytes
        self._add_tools = add_tools
        self._tool_timeout = tool_timeout_seconds
        self._discovery_timeout = discovery_timeout_seconds
        self._max_tools = max_tools_per_server
        self._clients: list[httpx.AsyncClient] = []

    async def start(self) -> object:
        names = [server.name for server in self._servers]
        for index, name in enumerate(names):
            if names.index(name) != index:
                # Checked here, not in the settings: a settings error would print the whole list,
                # bearer tokens included.
                raise StartupError(f"KS_TOOLRUNNER_MCP_SERVERS[{index}].name: {name!r} is used twice")
        found = await asyncio.gather(*(self._discover(server) for server in self._servers))
        tools = [tool for server_tools in found for tool in server_tools]
        self._add_tools(tools)
        return None

    def _http_server(self, server: McpServer) -> McpSessionServer:
        token = server.bearer_token.get_secret_value()
        http = self._egress.http_client()  # sets its own headers: the token is added to them
        if token:
            http.headers["authorization"] = f"Bearer {token}"
        self._clients.append(http)
        return McpHttpServer(server.name, server.url, http)

    def _stdio_server(self, server: McpServer) -> McpSessionServer | str:
        """The server in the sandbox, or why it cannot run here."""
        if not isinstance(self._sandbox, ScriptSandbox):
            return "the sandbox is unavailable on this server"
        try:
            files = _folder_files(server.files_dir) if server.files_dir is not None else {}
        except OSError as error:
            return f"files_dir cannot be read: {error.strerror or error}"
        command = SandboxCommand(
            argv=server.command,
            files=files,
            env=server.env,
            read_only_paths=server.read_only_paths,
            wall_time_seconds=max(self._tool_timeout, self._discovery_timeout),
        )
        return McpStdioServer(
            server.name, self._sandbox, command, max_line_bytes=self._stdio_max_message_bytes
        )

    async def _discover(self, server: McpServer) -> list[Tool]:
        port = self._stdio_server(server) if server.transport == "stdio" else self._http_server(server)
        if isinstance(port, str):
            log.warning("mcp_server_left_out", server=server.name, reason=port)
            return []
        try:
            async with asyncio.timeout(self._discovery_timeout):
                infos = await port.list_tools(limit=self._max_tools)
        except (McpRefused, McpUnavailable, TimeoutError) as error:
            log.warning("mcp_server_left_out", server=server.name, reason=str(error) or type(error).__name__)
            return []
        tools: list[Tool] = []
        for info in infos:
            if mcp_tool_name(server.name, info.name) is None:
                log.warning("mcp_tool_left_out", server=server.name, tool=info.name[:100])
                continue
            tools.append(McpTool(port, info, timeout=self._tool_timeout))
        log.info("mcp_server_tools", server=server.name, tools=[t.spec.name for t in tools])
        return tools

    async def stop(self, grace: float | None = None) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()


def _folder_files(folder: Path) -> dict[str, bytes]:
    """The regular files below ``folder`` by relative path; symlinks are not followed."""
    files: dict[str, bytes] = {}
    for directory, subdirectories, names in os.walk(folder, followlinks=False):
        subdirectories.sort()
        for name in sorted(names):
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files
