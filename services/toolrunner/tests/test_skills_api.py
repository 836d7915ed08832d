"""Skills through the real gRPC server: the four skills RPCs and the read_file / execute_skill_script
tools, with skills installed on disk as an operator installs them and scripts run in the real sandbox.

Each tenant sees only its own skills (another tenant's answers NOT_FOUND, also through a symlink or a
path with ``..``), an agent reaches only its bound skills, and a script that runs past its time limit
is killed and reported, not hung on.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2
from google.rpc import error_details_pb2, status_pb2

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity
from knowsphere_toolrunner.sandbox import SandboxLimits
from knowsphere_toolrunner.skills import SkillLimits

from .conftest import ACME, ACME_BOB, GLOBEX

REPORT_SKILL = {
    "SKILL.md": (
        "---\ndescription: Builds a short report from a CSV file.\n---\n# Report\nRun scripts/build.py."
    ),
    "scripts/build.py": (
        "import os, sys\n"
        "rows = open('/workspace/input/data.csv').read().splitlines()\n"
        "os.makedirs('/workspace/output', exist_ok=True)\n"
        "open('/workspace/output/report.md', 'w').write(f'# {sys.argv[1]}\\n{len(rows)} rows\\n')\n"
        "print('built', len(rows), 'rows')\n"
        "print('note', file=sys.stderr)\n"
    ),
    "template.md": "# {title}\n",
}
SECRET_SKILL = {
    "SKILL.md": "---\ndescription: Globex only.\n---\nThe password is hunter2.",
    "run.sh": "echo g",
}
TEXT_SKILL = {"SKILL.md": "---\ndescription: Instructions only.\n---\nJust read me."}


def field_of(error: grpc.aio.AioRpcError) -> str:
    """The field named by the status's BadRequest detail, as a caller decodes it."""
    raw = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin")
    if raw is None:
        return ""
    for detail in status_pb2.Status.FromString(raw).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    return ""


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


def tool_call(name: str, arguments: dict[str, Any], skills: list[str]) -> pb.ExecuteToolRequest:
    struct = struct_pb2.Struct()
    struct.update(arguments)
    context = pb.ToolContext(session_id="s1", turn_id="t1", skill_names=skills)
    return pb.ExecuteToolRequest(name=name, arguments=struct, tool_call_id="call-1", context=context)


@pytest.fixture
def skills(install_skill):
    install_skill(ACME, "report", REPORT_SKILL)
    install_skill(ACME, "notes", TEXT_SKILL)
    return install_skill(GLOBEX, "secret", SECRET_SKILL)


async def test_execute_skill_script_is_offered_only_when_a_bound_skill_has_scripts(lone_toolrunner, skills):
    def request(*names: str) -> pb.ListToolsRequest:
        return pb.ListToolsRequest(switches=pb.TurnSwitches(), skill_names=list(names))

    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            with_scripts = await stub.ListTools(request("notes", "report"))
            instructions_only = await stub.ListTools(request("notes"))
            other_tenants = await stub.ListTools(request("secret"))
        with bound_identity(GLOBEX):
            globex = await stub.ListTools(request("secret"))
    runtime = {"execute_skill_script", "read_file", "get_stored_data"}
    assert {t.name for t in with_scripts.tools} >= runtime
    assert "execute_skill_script" not in {t.name for t in instructions_only.tools}
    assert "read_file" in {t.name for t in instructions_only.tools}
    assert "execute_skill_script" not in {t.name for t in other_tenants.tools}
    assert "execute_skill_script" in {t.name for t in globex.tools}


async def test_list_and_get_skills_of_the_callers_tenant_only(lone_toolrunner, skills):
    async with lone_toolrunner(skills_page_size=1) as stub:
        with bound_identity(ACME):
            first = await stub.ListSkills(pb.ListSkillsRequest())
            second = await stub.ListSkills(pb.ListSkillsRequest(page_token=first.next_page_token))
            named = await stub.ListSkills(pb.ListSkillsRequest(names=["report", "secret"], page_size=10))
            report = await stub.GetSkill(pb.GetSkillRequest(name="report"))
            others = await refused(stub.GetSkill(pb.GetSkillRequest(name="secret")))
            bad_token = await refused(stub.ListSkills(pb.ListSkillsRequest(page_token="nonsense")))
            bad_name = await refused(stub.GetSkill(pb.GetSkillRequest(name="../globex")))
        with bound_identity(GLOBEX):
            globex = await stub.ListSkills(pb.ListSkillsRequest(page_size=10))
    assert [s.name for s in first.skills] == ["notes"] and first.next_page_token
    assert [s.name for s in second.skills] == ["report"] and not second.next_page_token
    assert [s.name for s in named.skills] == ["report"]
    skill = report.skill
    assert skill.description == "Builds a short report from a CSV file."
    assert skill.instructions_path == "/skills/report/SKILL.md" and skill.has_scripts
    assert skill.file_count == 3 and skill.update_time.seconds > 0
    assert report.instructions.startswith("# Report")
    files = {f.path: f for f in report.files}
    assert set(files) == {"SKILL.md", "scripts/build.py", "template.md"}
    assert files["scripts/build.py"].script and not files["template.md"].script
    assert files["template.md"].size_bytes == len(REPORT_SKILL["template.md"])
    assert others.code() == grpc.StatusCode.NOT_FOUND
    assert bad_token.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(bad_token) == "page_token"
    assert bad_name.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(bad_name) == "name"
    assert [s.name for s in globex.skills] == ["secret"]


async def test_read_skill_file_refuses_traversal_symlinks_and_unbound_skills(lone_toolrunner, skills):
    acme_report = skills.parent.parent / "acme" / "report"
    os.symlink(skills / "SKILL.md", acme_report / "stolen.md")  # a link to globex's skill

    def read(path: str, bound: tuple[str, ...] = ()) -> pb.ReadSkillFileRequest:
        return pb.ReadSkillFileRequest(skill_name="report", path=path, bound_skill_names=list(bound))

    async with lone_toolrunner(skills=SkillLimits(max_file_bytes=20)) as stub:
        with bound_identity(ACME):
            template = await stub.ReadSkillFile(read("template.md", ("report",)))
            cut = await stub.ReadSkillFile(read("SKILL.md"))
            up = await refused(stub.ReadSkillFile(read("../../globex/secret/SKILL.md")))
            absolute = await refused(stub.ReadSkillFile(read("/etc/passwd")))
            link = await refused(stub.ReadSkillFile(read("stolen.md")))
            unbound = await refused(stub.ReadSkillFile(read("SKILL.md", ("notes",))))
            missing = await refused(stub.ReadSkillFile(read("nothing.md")))
            other = await refused(
                stub.ReadSkillFile(pb.ReadSkillFileRequest(skill_name="secret", path="SKILL.md"))
            )
    assert template.text == "# {title}\n" and not template.truncated
    assert template.content_type == "text/markdown"
    assert cut.truncated and len(cut.text.encode()) == 20 and cut.size_bytes == len(REPORT_SKILL["SKILL.md"])
    for error in (up, absolute):
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(error) == "path"
    assert link.code() == grpc.StatusCode.FAILED_PRECONDITION and "hunter2" not in link.details()
    assert unbound.code() == grpc.StatusCode.PERMISSION_DENIED and field_of(unbound) == "skill_name"
    assert missing.code() == other.code() == grpc.StatusCode.NOT_FOUND


async def test_execute_skill_script_runs_in_the_sandbox_and_returns_its_files(lone_toolrunner, skills):
    request = pb.ExecuteSkillScriptRequest(
        skill_name="report",
        script_path="scripts/build.py",
        args=["Q3"],
        input_files=[pb.SandboxFile(path="data.csv", content=b"a,b\n1,2\n3,4\n")],
        session_id="s1",
        turn_id="t1",
        bound_skill_names=["report"],
    )
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            ran = await stub.ExecuteSkillScript(request)
            artifact_id = ran.output_files[0].artifact.artifact_id
            download = [
                m async for m in stub.DownloadArtifact(pb.DownloadArtifactRequest(artifact_id=artifact_id))
            ]
        with bound_identity(ACME_BOB):
            others_download = await refused(
                stub.DownloadArtifact(pb.DownloadArtifactRequest(artifact_id=artifact_id)).read()
            )
    assert ran.exit_code == 0 and not ran.timed_out
    assert ran.stdout == "built 3 rows\n" and ran.stderr == "note\n"
    [report] = ran.output_files
    assert report.path == "report.md" and report.content == b"# Q3\n3 rows\n"
    assert report.artifact.size_bytes == len(report.content)
    assert b"".join(m.chunk for m in download[1:]) == b"# Q3\n3 rows\n"
    assert others_download.code() == grpc.StatusCode.NOT_FOUND


async def test_execute_skill_script_abuse_is_refused_or_contained(lone_toolrunner, install_skill, skills):
    install_skill(
        ACME,
        "spin",
        {"SKILL.md": "Spins.", "spin.py": "import sys\nprint('started', flush=True)\nwhile True: pass\n"},
    )

    def run(skill: str, script: str, **fields: Any) -> pb.ExecuteSkillScriptRequest:
        return pb.ExecuteSkillScriptRequest(skill_name=skill, script_path=script, **fields)

    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            started = time.monotonic()
            spun = await stub.ExecuteSkillScript(
                run("spin", "spin.py", timeout=duration_pb2.Duration(seconds=1))
            )
            spun_seconds = time.monotonic() - started
            others = await refused(stub.ExecuteSkillScript(run("secret", "run.sh")))
            escape = await refused(stub.ExecuteSkillScript(run("report", "../../globex/secret/run.sh")))
            not_script = await refused(stub.ExecuteSkillScript(run("report", "template.md")))
            unbound = await refused(
                stub.ExecuteSkillScript(run("report", "scripts/build.py", bound_skill_names=["x"]))
            )
            bad_input = await refused(
                stub.ExecuteSkillScript(
                    run("report", "scripts/build.py", input_files=[pb.SandboxFile(path="../x", content=b"")])
                )
            )
    assert spun.timed_out and spun.exit_code == -1 and spun.stdout == "started\n"
    assert 1 <= spun.duration.seconds + spun.duration.nanos / 1e9 < 5 and spun_seconds < 10
    assert others.code() == grpc.StatusCode.NOT_FOUND
    for error in (escape, not_script):
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(error) == "script_path"
    assert unbound.code() == grpc.StatusCode.PERMISSION_DENIED
    assert bad_input.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(bad_input) == "input_files"


async def test_the_model_reads_bound_skill_files_and_nothing_else(lone_toolrunner, skills):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            instructions = await stub.ExecuteTool(
                tool_call("read_file", {"path": "/skills/report/SKILL.md"}, ["report"])
            )
            traversal = await stub.ExecuteTool(
                tool_call("read_file", {"path": "/skills/report/../../globex/secret/SKILL.md"}, ["report"])
            )
            unbound = await stub.ExecuteTool(
                tool_call("read_file", {"path": "/skills/notes/SKILL.md"}, ["report"])
            )
            other_tenant = await stub.ExecuteTool(
                tool_call("read_file", {"path": "/skills/secret/SKILL.md"}, ["secret"])
            )
            absolute = await stub.ExecuteTool(tool_call("read_file", {"path": "/etc/passwd"}, ["report"]))
    assert not instructions.HasField("error") and "Run scripts/build.py." in instructions.content
    assert traversal.error.code == absolute.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
    assert "'..'" in traversal.content and "/skills/<skill>/<file>" in absolute.content
    assert unbound.error.code == other_tenant.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND
    assert "hunter2" not in other_tenant.content


async def test_the_model_runs_a_script_and_a_runaway_script_is_cut_at_the_limit(
    lone_toolrunner, install_skill
):
    install_skill(
        ACME,
        "maker",
        {
            "SKILL.md": "Makes files.",
            "make.py": (
                "import os, sys\nos.makedirs('/workspace/output', exist_ok=True)\n"
                "open('/workspace/output/out.txt', 'w').write(sys.stdin.read().upper())\nprint('done')\n"
            ),
            "forever.sh": "echo begin\nwhile :; do :; done\n",
        },
    )
    async with lone_toolrunner(
        sandbox=SandboxLimits(wall_time_seconds=1.5), skill_script_timeout_seconds=10
    ) as stub:
        with bound_identity(ACME):
            made = await stub.ExecuteTool(
                tool_call(
                    "execute_skill_script", {"skill": "maker", "script": "make.py", "stdin": "hi"}, ["maker"]
                )
            )
            started = time.monotonic()
            forever = await stub.ExecuteTool(
                tool_call("execute_skill_script", {"skill": "maker", "script": "forever.sh"}, ["maker"])
            )
            forever_seconds = time.monotonic() - started
            unbound = await stub.ExecuteTool(
                tool_call("execute_skill_script", {"skill": "maker", "script": "make.py"}, ["report"])
            )
    result = json.loads(made.content)
    assert result["exit_code"] == 0 and result["stdout"] == "done\n"
    [output] = result["output_files"]
    assert output["path"] == "out.txt" and output["size_bytes"] == 2
    assert [a.artifact_id for a in made.artifacts] == [output["artifact_id"]]
    runaway = json.loads(forever.content)
    assert not forever.HasField("error") and forever.attempts == 1  # a result, never retried
    assert runaway["timed_out"] and runaway["exit_code"] is None and runaway["stdout"] == "begin\n"
    assert forever_seconds < 6
    assert (
        unbound.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND and "no skill 'maker' is bound" in unbound.content
    )


def test_a_script_time_limit_within_the_sandbox_limit_is_required():
    from knowsphere_toolrunner.settings import Settings

    with pytest.raises(ValueError, match="skill_script_timeout_seconds"):
        Settings(
            data_dir="/tmp/unused",
            retrieval_addr="x",
            modelhub_addr="y",
            skill_script_timeout_seconds=10,
            sandbox=SandboxLimits(wall_time_seconds=30),
        )


async def test_a_machine_without_the_sandbox_still_serves_and_says_why(lone_toolrunner, skills):
    no_bwrap = SandboxLimits(bwrap_path="/nonexistent/bwrap")
    async with lone_toolrunner(sandbox=no_bwrap) as stub:
        with bound_identity(ACME):
            listed = await stub.ListSkills(pb.ListSkillsRequest())
            tool = await stub.ExecuteTool(
                tool_call(
                    "execute_skill_script", {"skill": "report", "script": "scripts/build.py"}, ["report"]
                )
            )
            rpc = await refused(
                stub.ExecuteSkillScript(
                    pb.ExecuteSkillScriptRequest(skill_name="report", script_path="scripts/build.py")
                )
            )
    assert [s.name for s in listed.skills] == ["notes", "report"]
    assert tool.error.code == pb.TOOL_ERROR_CODE_FAILED and tool.attempts == 1
    assert (
        "execute_skill_script is unavailable: the sandbox cannot run on this server: no bwrap" in tool.content
    )
    assert rpc.code() == grpc.StatusCode.FAILED_PRECONDITION and "no bwrap" in rpc.details()


async def test_read_file_cuts_a_long_file_and_says_so(lone_toolrunner, install_skill):
    install_skill(ACME, "long", {"SKILL.md": "Long.", "notes.txt": "é" * 3000})
    async with lone_toolrunner(skill_read_text_chars=1000) as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(
                tool_call("read_file", {"path": "/skills/long/notes.txt"}, ["long"])
            )
    text, _, note = answer.content.partition("\n[")
    assert text == "é" * 1000
    assert note == "… cut at 1000 characters; the file has 6000 bytes]"
