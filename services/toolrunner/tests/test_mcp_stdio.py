"""Tools of a stdio MCP server through the real gRPC server: the server is a FastMCP script of the
official SDK, run by the system's Python inside the sandbox (bwrap, seccomp, Landlock, rlimits) with
the SDK's packages shown read-only, one fresh process per call. Its tools are offered as
``<server>__<tool>``, selectable by the agent one by one or all by the server's name, and go through
the same argument checks, retries and storing as every other tool. The server's own tools try to
reach the network and to write outside its workspace, and report what happened.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from packaging.requirements import Requirement

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity
from knowsphere_toolrunner.sandbox import SandboxError, SandboxLimits, ScriptSandbox
from knowsphere_toolrunner.settings import McpServer

from .conftest import ACME

SYSTEM_PYTHON = "/usr/bin/python3"
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"]).resolve()
MCP_DISTRIBUTION = "mcp"

SERVER = textwrap.dedent(
    """
    import os, socket
    from mcp.server.fastmcp import FastMCP

    mcp = FastMCP("files")

    @mcp.tool()
    def shout(text: str) -> str:
        \"\"\"The text in capitals.\"\"\"
        return text.upper()

    @mcp.tool()
    def whoami() -> dict:
        \"\"\"Who and where the server runs.\"\"\"
        return {"uid": os.getuid(), "cwd": os.getcwd(), "secret": os.environ.get("KS_PROBE_SECRET", "")}

    @mcp.tool()
    def connect(host: str, port: int) -> str:
        \"\"\"Open a TCP connection.\"\"\"
        try:
            socket.create_connection((host, port), timeout=3).close()
            return "connected"
        except OSError as error:
            return f"refused: {type(error).__name__}"

    @mcp.tool()
    def write(path: str) -> str:
        \"\"\"Write a file.\"\"\"
        try:
            with open(path, "w") as file:
                file.write("written by the MCP server")
            return "written"
        except OSError as error:
            return f"refused: {type(error).__name__}"

    @mcp.tool()
    def rows(count: int) -> list[dict]:
        \"\"\"Many rows.\"\"\"
        return [{"row": n, "label": f"row number {n}"} for n in range(count)]

    mcp.run()
    """
)


def sandbox_available() -> str | None:
    try:
        ScriptSandbox(SandboxLimits())
    except SandboxError as error:
        return str(error)
    if sys.version_info[:2] != (3, 11) or not Path(SYSTEM_PYTHON).exists():
        return "the system Python must match the packages' version"
    return None


pytestmark = pytest.mark.skipif(sandbox_available() is not None, reason=str(sandbox_available()))


def _requirements(name: str, found: set[str]) -> set[str]:
    """``name`` and every distribution it needs (markers for extras and other platforms skipped)."""
    key = name.lower().replace("_", "-")
    if key in found:
        return found
    try:
        requires = importlib.metadata.requires(key) or []
    except importlib.metadata.PackageNotFoundError:
        return found  # a requirement of another platform (pywin32 …)
    found.add(key)
    for line in requires:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            _requirements(requirement.name, found)
    return found


@pytest.fixture(scope="module")
def packages() -> Iterator[Path]:
    """The SDK and what it needs, copied where anyone may read them, as an operator installs an MCP
    server's packages (the environment's own may sit below a private folder, which the sandbox's run
    users cannot enter)."""
    folder = Path(tempfile.mkdtemp(prefix="ks-mcp-packages-"))
    folder.chmod(0o755)
    for name in sorted(_requirements(MCP_DISTRIBUTION, set())):
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or ():
            source = Path(str(distribution.locate_file(file))).resolve()
            if source.is_file() and source.is_relative_to(SITE_PACKAGES):
                target = folder / source.relative_to(SITE_PACKAGES)
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                shutil.copy(source, target)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def server_files(tmp_path: Path) -> Path:
    folder = tmp_path / "files-server"
    folder.mkdir()
    (folder / "server.py").write_text(SERVER)
    return folder


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP listener on the host's loopback; what connected to it is recorded."""
    accepted: list[str] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, address = sock.accept()
            except OSError:
                continue
            accepted.append(str(address))
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1], accepted
    stop.set()
    thread.join()
    sock.close()


def stdio_settings(files: Path, packages: Path, **more: Any) -> dict[str, Any]:
    server = McpServer(
        name="files",
        transport="stdio",
        command=(SYSTEM_PYTHON, "-s", "/skill/server.py"),
        env={"PYTHONPATH": str(packages)},
        files_dir=files,
        read_only_paths=(str(packages),),
    )
    return {"mcp_servers": (server,), "mcp_discovery_timeout_seconds": 60.0, **more}


def said(answer: pb.ExecuteToolResponse) -> str:
    """What a tool returning a string answered (FastMCP wraps it as structured ``{"result": …}``)."""
    assert not answer.HasField("error"), answer.content
    return str(json.loads(answer.content)["result"])


def call(name: str, arguments: dict[str, Any]) -> pb.ExecuteToolRequest:
    struct = struct_pb2.Struct()
    struct.update(arguments)
    context = pb.ToolContext(session_id="s1", turn_id="t1")
    return pb.ExecuteToolRequest(name=name, arguments=struct, tool_call_id="call-1", context=context)


async def test_a_stdio_servers_tools_are_offered_and_run_in_the_sandbox(
    lone_toolrunner, server_files, packages
):
    async with lone_toolrunner(**stdio_settings(server_files, packages)) as stub:
        with bound_identity(ACME):
            everything = await stub.ListTools(pb.ListToolsRequest(switches=pb.TurnSwitches()))
            by_server = await stub.ListTools(
                pb.ListToolsRequest(switches=pb.TurnSwitches(), tool_names=["files", "write_plan"])
            )
            without = await stub.ListTools(
                pb.ListToolsRequest(switches=pb.TurnSwitches(), tool_names=["write_plan"])
            )
            shouted = await stub.ExecuteTool(call("files__shout", {"text": "hello"}))
            bad = await stub.ExecuteTool(call("files__shout", {"words": "hello"}))
            who = await stub.ExecuteTool(call("files__whoami", {}))
            rows = await stub.ExecuteTool(call("files__rows", {"count": 300}))
            stored = await stub.GetStoredData(pb.GetStoredDataRequest(ref_id=rows.ref_id))
    mcp_names = ["files__connect", "files__rows", "files__shout", "files__whoami", "files__write"]
    assert [tool.name for tool in everything.tools][-5:] == mcp_names
    shout = next(tool for tool in everything.tools if tool.name == "files__shout")
    assert json.loads(shout.parameters_json_schema)["required"] == ["text"]
    # The agent's configuration names the server: all its tools, and only for that agent.
    assert [tool.name for tool in by_server.tools] == ["write_plan", "get_stored_data", *mcp_names]
    assert not by_server.omitted
    assert not any(tool.name.startswith("files__") for tool in without.tools)
    assert said(shouted) == "HELLO"
    assert bad.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
    identity = json.loads(who.content)
    assert identity == {"uid": 65534, "cwd": "/workspace", "secret": ""}
    assert rows.stored and json.loads(rows.content)["__stored"] is True
    assert "row number 299" in stored.data.content


async def test_a_stdio_server_reaches_no_network_and_writes_only_its_workspace(
    lone_toolrunner, server_files, packages, listener, monkeypatch
):
    port, accepted = listener
    monkeypatch.setenv("KS_PROBE_SECRET", "the service's secret")
    outside = packages / "ks-mcp-probe.txt"
    async with lone_toolrunner(**stdio_settings(server_files, packages)) as stub:
        with bound_identity(ACME):
            host = await stub.ExecuteTool(call("files__connect", {"host": "127.0.0.1", "port": port}))
            public = await stub.ExecuteTool(call("files__connect", {"host": "1.1.1.1", "port": 443}))
            workspace = await stub.ExecuteTool(call("files__write", {"path": "/workspace/notes.txt"}))
            packages = await stub.ExecuteTool(call("files__write", {"path": str(outside)}))
            own_files = await stub.ExecuteTool(call("files__write", {"path": "/skill/server.py"}))
            etc = await stub.ExecuteTool(call("files__write", {"path": "/etc/passwd"}))
            who = await stub.ExecuteTool(call("files__whoami", {}))
    assert said(host).startswith("refused") and said(public).startswith("refused")
    assert accepted == []  # nothing reached the host's listener
    assert said(workspace) == "written"  # the harmless twin: the server can write where it may
    assert said(packages).startswith("refused") and not outside.exists()
    assert said(own_files).startswith("refused")
    assert "mcp.run()" in (server_files / "server.py").read_text()
    assert said(etc).startswith("refused")
    assert json.loads(who.content)["secret"] == ""  # nothing of the service's environment
    assert os.environ["KS_PROBE_SECRET"] == "the service's secret"


async def test_a_stdio_server_that_cannot_start_is_left_out(lone_toolrunner, server_files, packages):
    (server_files / "server.py").write_text("import sys\nsys.exit(3)\n")
    async with lone_toolrunner(**stdio_settings(server_files, packages)) as stub:
        with bound_identity(ACME):
            listing = await stub.ListTools(pb.ListToolsRequest(switches=pb.TurnSwitches()))
            answer = await stub.ExecuteTool(call("files__shout", {"text": "hello"}))
    assert not any(tool.name.startswith("files__") for tool in listing.tools)
    assert answer.error.code == pb.TOOL_ERROR_CODE_UNKNOWN_TOOL
