"""Tools of MCP servers, offered as ``<server>__<tool>`` (names the model APIs accept: letters, digits,
``_`` and ``-``, at most 64); an agent selects one tool by that name or all of a server's by its
name. Each is an ordinary tool to the executor: its JSON Schema checks the
arguments, and trimming, time limit, retries and storing of large results apply as to any other.

A tool's own error (``isError``) and a refusal by the server (a JSON-RPC error) are final; a server
that cannot be reached is retried.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import (
    ToolContext,
    ToolOutput,
    ToolProblem,
    ToolSpec,
    TransientProblem,
)

SEPARATOR = "__"
MAX_TOOL_NAME_CHARS = 64
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
# The contract has no MCP category yet: sent as UNSPECIFIED, listed after every category.
MCP_CATEGORY: ToolCategory | None = None


@dataclass(frozen=True)
class McpToolInfo:
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class McpCallResult:
    text: str
    structured: dict[str, Any] | None
    is_error: bool


class McpRefused(Exception):
    """The server answered with a JSON-RPC error (unknown tool, invalid parameters …): final."""


class McpUnavailable(Exception):
    """The server could not be reached or broke off: worth another attempt."""


class McpServerPort(Protocol):
    name: str

    async def list_tools(self, *, limit: int) -> list[McpToolInfo]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpCallResult: ...


def mcp_tool_name(server: str, tool: str) -> str | None:
    """``<server>__<tool>``, or None when that is not a name a model API accepts."""
    name = f"{server}{SEPARATOR}{tool}"
    if len(name) > MAX_TOOL_NAME_CHARS or not _TOOL_NAME.match(tool):
        return None
    return name


class McpTool:
    def __init__(self, server: McpServerPort, info: McpToolInfo, *, timeout: float) -> None:
        name = mcp_tool_name(server.name, info.name)
        if name is None:
            raise ValueError(f"{server.name}: tool name {info.name!r} cannot be offered to a model")
        self._server = server
        self._remote_name = info.name
        schema = dict(info.input_schema) or {"type": "object"}
        self.spec = ToolSpec(
            name=name,
            display_name=f"{info.name} ({server.name})",
            description=info.description or f"Tool {info.name} of the MCP server {server.name}.",
            parameters=schema,
            category=MCP_CATEGORY,
            timeout_seconds=timeout,
            group=server.name,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            result = await self._server.call_tool(self._remote_name, arguments)
        except McpRefused as error:
            raise ToolProblem(f"{self.spec.name}: {error}") from None
        except McpUnavailable as error:
            raise TransientProblem(str(error)) from error
        if result.is_error:
            raise ToolProblem(f"{self.spec.name} failed: {result.text or 'no detail given'}")
        return ToolOutput(result.structured if result.structured is not None else result.text)
