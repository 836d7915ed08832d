"""A deep agent's workspace through the real gRPC server: the workspace tools are offered only to an
agent that works in one, files persist per session (and across a restart of the service), a skill
script reads the workspace and its outputs land back in it, and nothing crosses to another session,
user or tenant. Limits and hostile paths are refused naming what is wrong."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import struct_pb2

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity
from knowsphere_toolrunner.domain.workspace import WorkspaceLimits

from .conftest import ACME, ACME_BOB, GLOBEX

WORKSPACE_TOOLS = {"workspace_ls", "workspace_read", "workspace_write", "workspace_edit"}
COUNTER_SKILL = {
    "SKILL.md": "---\ndescription: Counts the lines of the notes.\n---\nRun count.py.",
    "count.py": (
        "import os\n"
        "lines = open('/workspace/input/notes/findings.md').read().splitlines()\n"
        "os.makedirs('/workspace/output', exist_ok=True)\n"
        "open('/workspace/output/count.txt', 'w').write(str(len(lines)))\n"
        "print(len(lines))\n"
    ),
}


def call(name: str, arguments: dict[str, Any], *, session: str = "s1", workspace: bool = True, skills=()):
    struct = struct_pb2.Struct()
    struct.update(arguments)
    context = pb.ToolContext(session_id=session, turn_id="t1", workspace=workspace, skill_names=list(skills))
    return pb.ExecuteToolRequest(name=name, arguments=struct, tool_call_id="c1", context=context)


def listed(response: pb.ExecuteToolResponse) -> dict[str, int]:
    return {f["path"]: f["size_bytes"] for f in json.loads(response.content)["files"]}


async def test_only_an_agent_with_a_workspace_is_offered_the_tools_or_may_run_them(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            plain = await stub.ListTools(pb.ListToolsRequest())
            deep = await stub.ListTools(pb.ListToolsRequest(workspace=True))
            refused = await stub.ExecuteTool(call("workspace_ls", {}, workspace=False))
    assert not WORKSPACE_TOOLS & {t.name for t in plain.tools}
    assert {t.name for t in deep.tools} >= WORKSPACE_TOOLS
    assert refused.error.code == pb.TOOL_ERROR_CODE_UNAVAILABLE_THIS_TURN
    assert "only deep agents" in refused.content


async def test_files_are_written_read_edited_and_kept_across_a_restart(lone_toolrunner):
    text = "# Findings\n- revenue up\n- costs flat\n"
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            wrote = await stub.ExecuteTool(
                call("workspace_write", {"path": "/workspace/notes/findings.md", "content": text})
            )
            edited = await stub.ExecuteTool(
                call(
                    "workspace_edit",
                    {"path": "notes/findings.md", "old_text": "costs flat", "new_text": "costs down"},
                )
            )
            ambiguous = await stub.ExecuteTool(
                call("workspace_edit", {"path": "notes/findings.md", "old_text": "- ", "new_text": "* "})
            )
            missing = await stub.ExecuteTool(
                call("workspace_edit", {"path": "notes/findings.md", "old_text": "profit", "new_text": "x"})
            )
    assert not wrote.HasField("error") and json.loads(wrote.content)["path"] == "notes/findings.md"
    assert not edited.HasField("error")
    assert (
        ambiguous.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS and "occurs 2 times" in ambiguous.content
    )
    assert missing.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND
    async with lone_toolrunner() as stub:  # a new process on the same store
        with bound_identity(ACME):
            files = await stub.ExecuteTool(call("workspace_ls", {}))
            read = await stub.ExecuteTool(
                call("workspace_read", {"path": "notes/findings.md", "offset": 1, "limit": 1})
            )
    assert listed(files) == {"notes/findings.md": len(text.replace("costs flat", "costs down").encode())}
    assert "2\t- revenue up" in read.content and "costs" not in read.content.split("\n")[0]
    assert "1 more lines" in read.content


async def test_another_session_user_or_tenant_sees_nothing(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            await stub.ExecuteTool(call("workspace_write", {"path": "secret.md", "content": "hunter2"}))
            other_session = await stub.ExecuteTool(
                call("workspace_read", {"path": "secret.md"}, session="s2")
            )
        with bound_identity(ACME_BOB):
            other_user = await stub.ExecuteTool(call("workspace_read", {"path": "secret.md"}))
            other_user_ls = await stub.ExecuteTool(call("workspace_ls", {}))
        with bound_identity(GLOBEX):
            other_tenant = await stub.ExecuteTool(call("workspace_read", {"path": "secret.md"}))
    for response in (other_session, other_user, other_tenant):
        assert response.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND and "hunter2" not in response.content
    assert listed(other_user_ls) == {}


async def test_hostile_paths_and_limits_are_refused_naming_what_is_wrong(lone_toolrunner):
    limits = WorkspaceLimits(max_file_bytes=100, max_files=2, max_total_bytes=150)
    async with lone_toolrunner(workspace=limits) as stub:
        with bound_identity(ACME):
            answers = {
                path: await stub.ExecuteTool(call("workspace_write", {"path": path, "content": "x"}))
                for path in ("../../etc/passwd", "a/./b", "a\\b", "a\x00b", "/workspace/")
            }
            big = await stub.ExecuteTool(call("workspace_write", {"path": "big.txt", "content": "x" * 101}))
            first = await stub.ExecuteTool(call("workspace_write", {"path": "a.txt", "content": "x" * 90}))
            too_much = await stub.ExecuteTool(call("workspace_write", {"path": "b.txt", "content": "x" * 90}))
            second = await stub.ExecuteTool(call("workspace_write", {"path": "b.txt", "content": "x" * 10}))
            third = await stub.ExecuteTool(call("workspace_write", {"path": "c.txt", "content": "x"}))
            rewrite = await stub.ExecuteTool(call("workspace_write", {"path": "a.txt", "content": "y" * 100}))
            files = await stub.ExecuteTool(call("workspace_ls", {}))
    for path, answer in answers.items():
        assert answer.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS, path
        assert "path:" in answer.content
    assert big.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS and "(100)" in big.content
    assert not first.HasField("error") and not second.HasField("error")
    assert too_much.HasField("error") and "at most 2 files and 150 bytes" in too_much.content
    assert third.HasField("error") and "3 files" in third.content
    assert not rewrite.HasField("error")  # replacing a file counts its new size, not both
    assert listed(files) == {"a.txt": 100, "b.txt": 10}


async def test_a_skill_script_reads_the_workspace_and_its_outputs_land_in_it(lone_toolrunner, install_skill):
    install_skill(ACME, "counter", COUNTER_SKILL)
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            await stub.ExecuteTool(
                call("workspace_write", {"path": "notes/findings.md", "content": "a\nb\nc\n"})
            )
            ran = await stub.ExecuteTool(
                call("execute_skill_script", {"skill": "counter", "script": "count.py"}, skills=["counter"])
            )
            count = await stub.ExecuteTool(call("workspace_read", {"path": "output/count.txt"}))
            # Without a workspace the script sees no input: the same run fails reading it.
            plain = await stub.ExecuteTool(
                call(
                    "execute_skill_script",
                    {"skill": "counter", "script": "count.py"},
                    workspace=False,
                    skills=["counter"],
                )
            )
    result = json.loads(ran.content)
    assert result["exit_code"] == 0 and result["stdout"] == "3\n", result
    assert result["workspace_outputs"] == ["output/count.txt"] and result["not_kept_in_workspace"] == []
    assert count.content.endswith("\t3")
    assert json.loads(plain.content)["exit_code"] != 0 and "workspace_outputs" not in json.loads(
        plain.content
    )
