"""Running a skill's script: the skill's files from the store, the run in the sandbox, the files it left
in ``/workspace/output`` stored as artifacts. One path for the ``execute_skill_script`` tool and the
``ExecuteSkillScript`` RPC; each maps the typed errors (``SkillError``, ``SandboxError``) its own way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from knowsphere_toolrunner.domain.artifacts import Owner, save_artifact
from knowsphere_toolrunner.domain.ports import ToolResultStore
from knowsphere_toolrunner.domain.tools.base import Artifact
from knowsphere_toolrunner.sandbox.model import SandboxError, SandboxErrorCode, SandboxRequest, SandboxResult
from knowsphere_toolrunner.skills.store import SkillStore

SCRIPT_TOOL_NAME = "execute_skill_script"


class ScriptRunner(Protocol):
    """The sandbox (``ScriptSandbox`` on one machine; a pod per run on Kubernetes)."""

    async def run_script(self, request: SandboxRequest) -> SandboxResult: ...


class UnavailableSandbox:
    """Stands in for a sandbox that cannot run on this machine: every run is refused with the reason,
    so the rest of the service still serves."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def run_script(self, request: SandboxRequest) -> SandboxResult:
        raise SandboxError(
            SandboxErrorCode.UNAVAILABLE, f"the sandbox cannot run on this server: {self.reason}"
        )


@dataclass(frozen=True)
class OutputFile:
    path: str
    artifact: Artifact
    content: bytes


@dataclass(frozen=True)
class SkillRun:
    result: SandboxResult
    outputs: tuple[OutputFile, ...]


class SkillRunner:
    def __init__(self, skills: SkillStore, sandbox: ScriptRunner, store: ToolResultStore) -> None:
        self._skills = skills
        self._sandbox = sandbox
        self._store = store

    async def run(
        self,
        owner: Owner,
        skill: str,
        script: str,
        *,
        args: tuple[str, ...] = (),
        stdin: bytes = b"",
        inputs: Mapping[str, bytes] | None = None,
        wall_time_seconds: float | None = None,
    ) -> SkillRun:
        """Raises ``SkillError`` (no such skill, unsafe files) and ``SandboxError`` (a refused request,
        no sandbox here); a script that fails or runs out of time is a result, not an error."""
        files = await asyncio.to_thread(self._skills.load_files, owner.tenant_id, skill)
        result = await self._sandbox.run_script(
            SandboxRequest(
                script=script,
                skill_files=files,
                inputs=dict(inputs or {}),
                args=args,
                stdin=stdin,
                wall_time_seconds=wall_time_seconds,
            )
        )
        outputs = []
        for path, data in sorted(result.outputs.items()):
            artifact = await save_artifact(self._store, owner, SCRIPT_TOOL_NAME, path, data)
            outputs.append(OutputFile(path, artifact, data))
        return SkillRun(result, tuple(outputs))
