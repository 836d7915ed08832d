"""Tools of an MCP server through the real gRPC server: a real MCP server (the SDK's FastMCP over
streamable HTTP, served by uvicorn on 127.0.0.1) that the test starts, discovered at start-up and
offered as ``<server>__<tool>`` with the server's own schemas, then called with the same argument
checks, retries and storing of large results as every other tool. The MCP server is reached through
the egress guard: without allow-listing it is never contacted.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from google.protobuf import struct_pb2
from mcp.server.fastmcp import FastMCP

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_egress import EgressPolicy
from knowsphere_runtime.identity import bound_identity
from knowsphere_toolrunner.settings import McpServer

from .conftest import ACME


@dataclass
class CrmServer:
    port: int
    calls: list[str] = field(default_factory=list)
    """Tools called, in order."""
    http_requests: int = 0
    """HTTP requests that arrived (discovery and calls)."""
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def crm_app(crm: CrmServer) -> Any:
    mcp = FastMCP("crm", host="127.0.0.1", port=crm.port)

    @mcp.tool()
    def lookup_customer(customer_id: str) -> dict[str, Any]:
        """Look up a customer of the CRM by id: name, country and yearly revenue."""
        crm.calls.append("lookup_customer")
        return {"id": customer_id, "name": "Acme GmbH", "country": "DE", "revenue_eur": 120000}

    @mcp.tool()
    def list_orders(count: int) -> list[dict[str, Any]]:
        """The customer's latest orders."""
        crm.calls.append("list_orders")
        return [{"order": f"o-{n}", "total_eur": 100 + n} for n in range(count)]

    @mcp.tool()
    def update_customer(customer_id: str) -> str:
        """Change a customer."""
        crm.calls.append("update_customer")
        raise ValueError("the CRM is read-only today")

    app = mcp.streamable_http_app()

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            crm.http_requests += 1
        await app(scope, receive, send)

    return counted


async def start(crm: CrmServer) -> None:
    config = uvicorn.Config(crm_app(crm), host="127.0.0.1", port=crm.port, log_level="warning", lifespan="on")
    crm.server = uvicorn.Server(config)
    task = asyncio.create_task(crm.server.serve())
    while not crm.server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    crm.task = task


async def stop(crm: CrmServer) -> None:
    assert crm.server is not None
    crm.server.should_exit = True
    assert crm.task is not None
    await crm.task


@pytest.fixture
async def crm() -> AsyncIterator[CrmServer]:
    server = CrmServer(port=free_port())
    await start(server)
    yield server
    if not server.server or not server.server.should_exit:
        await stop(server)


def settings_for(crm: CrmServer, *, allow: bool = True, **more: Any) -> dict[str, Any]:
    egress = EgressPolicy(
        allow_networks=("127.0.0.1/32",) if allow else (),  # type: ignore[arg-type]
        allowed_ports=frozenset({80, 443, crm.port}),
    )
    return {"egress": egress, "mcp_servers": (McpServer(name="crm", url=crm.url),), **more}


def call(name: str, arguments: dict[str, Any]) -> pb.ExecuteToolRequest:
    struct = struct_pb2.Struct()
    struct.update(arguments)
    context = pb.ToolContext(session_id="s1", turn_id="t1")
    return pb.ExecuteToolRequest(name=name, arguments=struct, tool_call_id="call-1", context=context)


async def test_the_servers_tools_are_offered_namespaced_with_their_schemas(lone_toolrunner, crm):
    async with lone_toolrunner(**settings_for(crm)) as stub:
        with bound_identity(ACME):
            everything = await stub.ListTools(pb.ListToolsRequest(switches=pb.TurnSwitches()))
            chosen = await stub.ListTools(
                pb.ListToolsRequest(
                    switches=pb.TurnSwitches(), tool_names=["crm__lookup_customer", "write_plan"]
                )
            )
            editor = await stub.ListTools(pb.ListToolsRequest(catalog_view=True))
    names = [tool.name for tool in everything.tools]
    mcp_names = ["crm__list_orders", "crm__lookup_customer", "crm__update_customer"]
    assert names[-3:] == mcp_names  # after every category, by name
    assert [tool.name for tool in chosen.tools] == ["write_plan", "get_stored_data", "crm__lookup_customer"]
    lookup = next(tool for tool in everything.tools if tool.name == "crm__lookup_customer")
    schema = json.loads(lookup.parameters_json_schema)
    assert schema["required"] == ["customer_id"] and schema["properties"]["customer_id"]["type"] == "string"
    assert lookup.description.startswith("Look up a customer of the CRM")
    assert lookup.category == pb.TOOL_CATEGORY_UNSPECIFIED and lookup.selectable
    assert set(mcp_names) <= {tool.name for tool in editor.tools}


async def test_calls_are_checked_run_and_large_results_stored(lone_toolrunner, crm):
    async with lone_toolrunner(**settings_for(crm)) as stub:
        with bound_identity(ACME):
            customer = await stub.ExecuteTool(call("crm__lookup_customer", {"customer_id": "c-42"}))
            bad = await stub.ExecuteTool(call("crm__lookup_customer", {"id": "c-42"}))
            orders = await stub.ExecuteTool(call("crm__list_orders", {"count": 250}))
            stored = await stub.GetStoredData(pb.GetStoredDataRequest(ref_id=orders.ref_id))
            refused = await stub.ExecuteTool(call("crm__update_customer", {"customer_id": "c-42"}))
    assert not customer.HasField("error")
    assert json.loads(customer.content) == {
        "id": "c-42",
        "name": "Acme GmbH",
        "country": "DE",
        "revenue_eur": 120000,
    }
    assert (
        bad.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
        and "'customer_id' is a required" in bad.content
    )
    assert orders.stored and json.loads(orders.content)["__stored"] is True
    assert "o-249" in stored.data.content and orders.result_chars > 8000
    assert refused.error.code == pb.TOOL_ERROR_CODE_FAILED and refused.attempts == 1
    assert "the CRM is read-only today" in refused.content
    # The invalid call never reached the server.
    assert crm.http_requests > 0 and crm.calls == ["lookup_customer", "list_orders", "update_customer"]


async def test_a_server_that_went_away_is_retried_then_reported(lone_toolrunner, crm):
    async with lone_toolrunner(**settings_for(crm, retry_backoff_seconds=0.01)) as stub:
        await stop(crm)
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("crm__lookup_customer", {"customer_id": "c-42"}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_FAILED and answer.attempts == 3
    assert "MCP server crm cannot be reached" in answer.content and "127.0.0.1" not in answer.content


async def test_a_server_not_allow_listed_is_never_contacted(lone_toolrunner, crm):
    async with lone_toolrunner(**settings_for(crm, allow=False)) as stub:
        with bound_identity(ACME):
            listing = await stub.ListTools(pb.ListToolsRequest(switches=pb.TurnSwitches()))
            answer = await stub.ExecuteTool(call("crm__lookup_customer", {"customer_id": "c-42"}))
    assert not any(tool.name.startswith("crm__") for tool in listing.tools)
    assert answer.error.code == pb.TOOL_ERROR_CODE_UNKNOWN_TOOL
    assert crm.calls == [] and crm.http_requests == 0


def test_a_stdio_server_needs_its_program_as_an_absolute_path():
    for command in ((), ("python3", "server.py")):
        with pytest.raises(ValueError, match=r"command\n.*required for stdio"):
            McpServer(name="files", transport="stdio", command=command)


async def test_two_servers_of_one_name_stop_the_start_without_printing_tokens(lone_toolrunner, crm):
    from knowsphere_runtime.lifecycle import StartupError

    twice = (
        McpServer(name="crm", url=crm.url, bearer_token="s3cret-one"),  # type: ignore[arg-type]
        McpServer(name="crm", url=crm.url, bearer_token="s3cret-two"),  # type: ignore[arg-type]
    )
    with pytest.raises(StartupError) as raised:
        async with lone_toolrunner(**{**settings_for(crm), "mcp_servers": twice}):
            pass
    assert "KS_TOOLRUNNER_MCP_SERVERS[1].name: 'crm' is used twice" in str(raised.value)
    assert "s3cret" not in str(raised.value) and crm.http_requests == 0
