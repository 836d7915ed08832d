"""The skill tools injected when skills are bound to the agent: ``read_file`` (a file of a bound skill,
its SKILL.md first) and ``execute_skill_script`` (one of its scripts in the sandbox). For an agent that
works in a workspace (a deep agent), a script finds the workspace's files in ``/workspace/input`` and
what it writes to ``/workspace/output`` is added to the workspace under ``output/`` as well as returned
as artifacts.

Both reach only the caller's tenant's skills and only those bound to the agent (``ToolContext
.skill_names``); anything else reads as missing. Paths are checked by the skills store (no ``..``,
no absolute paths, no symlinks).
"""

from __future__ import annotations

import asyncio
import codecs
from dataclasses import replace
from typing import Any

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.artifacts import Owner
from knowsphere_toolrunner.domain.skill_runs import SCRIPT_TOOL_NAME, SkillRun, SkillRunner
from knowsphere_toolrunner.domain.tools.base import (
    BadArguments,
    Needs,
    NothingFound,
    ToolContext,
    ToolOutput,
    ToolProblem,
    ToolSpec,
)
from knowsphere_toolrunner.domain.workspace import (
    WorkspaceError,
    WorkspaceKey,
    WorkspaceLimits,
    WorkspaceStore,
    check_size,
)
from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.model import SandboxError, SandboxErrorCode
from knowsphere_toolrunner.skills.store import SkillError, SkillErrorCode, SkillStore

# UTF-8 takes at most this many bytes per character: the bytes read for a text of N characters.
_MAX_UTF8_BYTES_PER_CHAR = 4

READ_FILE = ToolSpec(
    name="read_file",
    display_name="Read skill file",
    description=(
        "Read a file of a skill bound to you, starting with its instructions at /skills/<name>/SKILL.md. "
        "Read a skill's SKILL.md before using the skill and follow it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "description": "Path as listed, e.g. /skills/report-writer/SKILL.md.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    category=ToolCategory.RUNTIME,
    selectable=False,
    needs=frozenset({Needs.SKILLS}),
)


def execute_skill_script_spec(limits: SandboxLimits, timeout_seconds: float) -> ToolSpec:
    """The spec of execute_skill_script; its argument limits are the sandbox's."""
    return ToolSpec(
        name=SCRIPT_TOOL_NAME,
        display_name="Run skill script",
        description=(
            "Run a script of a bound skill in an isolated sandbox without network, as its SKILL.md says. "
            "The script runs in /workspace; files it writes to /workspace/output are returned for "
            "download. Returns the exit code, standard output and standard error."
        ),
        parameters={
            "type": "object",
            "properties": {
                "skill": {"type": "string", "minLength": 1, "maxLength": 100, "description": "Skill name."},
                "script": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 500,
                    "description": "Script path relative to the skill, e.g. scripts/build.py.",
                },
                "args": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": limits.max_arg_chars},
                    "maxItems": limits.max_args,
                },
                "stdin": {"type": "string", "maxLength": limits.max_stdin_bytes},
            },
            "required": ["skill", "script"],
            "additionalProperties": False,
        },
        category=ToolCategory.RUNTIME,
        selectable=False,
        needs=frozenset({Needs.SKILLS, Needs.SKILL_SCRIPTS}),
        timeout_seconds=timeout_seconds,
    )


def skill_problem(error: SkillError) -> ToolProblem:
    """What the model reads for a refused skill path or skill."""
    if error.code == SkillErrorCode.NOT_FOUND:
        return NothingFound(f"{error} (only the skills bound to you can be used)")
    if error.code == SkillErrorCode.INVALID_ARGUMENT:
        return BadArguments(str(error))
    return ToolProblem(str(error))


def sandbox_problem(error: SandboxError) -> ToolProblem:
    if error.code == SandboxErrorCode.INVALID_REQUEST:
        return BadArguments(str(error))
    return ToolProblem(f"{SCRIPT_TOOL_NAME} is unavailable: {error}")


class ReadFile:
    def __init__(self, skills: SkillStore, *, max_chars: int, timeout: float) -> None:
        self._skills = skills
        self._max_chars = max_chars
        self.spec = replace(READ_FILE, timeout_seconds=timeout)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        path = arguments["path"]
        max_bytes = min(self._skills.limits.max_file_bytes, self._max_chars * _MAX_UTF8_BYTES_PER_CHAR)
        try:
            head = await asyncio.to_thread(
                self._skills.read_head, context.tenant_id, path, context.skill_names, max_bytes
            )
        except SkillError as error:
            raise skill_problem(error) from None
        try:
            # An incremental decoder holds back a character cut at the end of a truncated read.
            text = codecs.getincrementaldecoder("utf-8")().decode(head.content, final=not head.truncated)
        except UnicodeDecodeError:
            raise ToolProblem(
                f"{path} is not a text file ({head.size_bytes} bytes); it can be used by the skill's "
                "scripts but not read here."
            ) from None
        if head.truncated or len(text) > self._max_chars:
            text = text[: self._max_chars]
            text += f"\n[… cut at {len(text)} characters; the file has {head.size_bytes} bytes]"
        return ToolOutput(text)


OUTPUT_DIR = "output/"
"""Where a script's output files go in the workspace."""


class ExecuteSkillScript:
    def __init__(
        self,
        runner: SkillRunner,
        limits: SandboxLimits,
        *,
        timeout: float,
        workspace: WorkspaceStore | None = None,
        workspace_limits: WorkspaceLimits | None = None,
    ) -> None:
        self._runner = runner
        self._limits = limits
        self._workspace = workspace
        self._workspace_limits = workspace_limits or WorkspaceLimits()
        self.spec = execute_skill_script_spec(limits, timeout)

    async def _inputs(self, key: WorkspaceKey) -> dict[str, bytes]:
        """The workspace's files for the script, within the sandbox's input limits (the workspace's
        own limits are lower by default; a file past them is left out and the script sees fewer)."""
        assert self._workspace is not None
        inputs: dict[str, bytes] = {}
        total = 0
        for entry in await self._workspace.list_files(key):
            if len(inputs) >= self._limits.max_input_files:
                break
            if total + entry.size_bytes > self._limits.max_input_bytes:
                continue
            data = await self._workspace.read_file(key, entry.path)
            if data is not None:
                inputs[entry.path] = data
                total += len(data)
        return inputs

    async def _keep_outputs(self, key: WorkspaceKey, run: SkillRun) -> list[dict[str, str]]:
        """Adds the script's output files to the workspace; returns those it could not keep, and why."""
        assert self._workspace is not None
        refused = []
        for output in run.outputs:
            path = OUTPUT_DIR + output.path
            try:
                check_size(output.content, self._workspace_limits)
                await self._workspace.write_file(key, path, output.content, self._workspace_limits)
            except WorkspaceError as error:
                refused.append({"path": path, "reason": str(error)})
        return refused

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        skill = arguments["skill"]
        if skill not in context.skill_names:
            raise NothingFound(f"skill: no skill {skill!r} is bound to you")
        owner = Owner(context.tenant_id, context.user_id, context.session_id, context.turn_id)
        key = WorkspaceKey(context.tenant_id, context.user_id, context.session_id)
        in_workspace = context.workspace and self._workspace is not None
        try:
            run = await self._runner.run(
                owner,
                skill,
                arguments["script"],
                args=tuple(arguments.get("args", ())),
                stdin=arguments.get("stdin", "").encode(),
                inputs=await self._inputs(key) if in_workspace else None,
            )
        except SkillError as error:
            raise skill_problem(error) from None
        except SandboxError as error:
            raise sandbox_problem(error) from None
        result = run.result
        workspace: dict[str, Any] = {}
        if in_workspace:
            not_kept = await self._keep_outputs(key, run)
            outputs = [OUTPUT_DIR + o.path for o in run.outputs]
            workspace = {"workspace_outputs": outputs, "not_kept_in_workspace": not_kept}
        return ToolOutput(
            {
                **workspace,
                "exit_code": result.exit_code,
                "signal": result.signal,
                "timed_out": result.timed_out,
                "memory_exceeded": result.memory_exceeded,
                "stdout": result.stdout.decode("utf-8", "replace"),
                "stderr": result.stderr.decode("utf-8", "replace"),
                "stdout_truncated": result.stdout_truncated,
                "stderr_truncated": result.stderr_truncated,
                "output_files": [
                    {"path": o.path, "artifact_id": o.artifact.artifact_id, "size_bytes": len(o.content)}
                    for o in run.outputs
                ],
                "output_files_truncated": result.outputs_truncated,
                "duration_seconds": round(result.duration_seconds, 3),
            },
            artifacts=[o.artifact for o in run.outputs],
        )
