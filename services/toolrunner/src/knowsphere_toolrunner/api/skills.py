"""The gRPC face of skills: ListSkills, GetSkill, ReadSkillFile and ExecuteSkillScript.

Every call reads the caller's tenant's skills only (identity from the call's metadata), so another
tenant's skill answers NOT_FOUND like one that does not exist. ``bound_skill_names``, when given, limits
a call to the agent's bound skills (PERMISSION_DENIED otherwise, as the contract says). Typed errors of
the store and the sandbox map to statuses here, with the request field they concern.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_contracts.convert import duration, message_from, seconds_of, timestamp
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid
from knowsphere_toolrunner.domain.artifacts import Owner, content_type_of
from knowsphere_toolrunner.domain.skill_runs import SkillRunner
from knowsphere_toolrunner.sandbox.model import SandboxError, SandboxErrorCode
from knowsphere_toolrunner.skills.store import (
    SCRIPT_SUFFIXES,
    VIRTUAL_ROOT,
    SkillError,
    SkillErrorCode,
    SkillStore,
    SkillSummary,
    check_skill_name,
)

T = TypeVar("T")
_PAGE_TOKEN_PREFIX = "after:"
# The store's and the sandbox's field names → the request's, per RPC.
_READ_FIELDS = {"skill": "skill_name", "path": "path", "tenant": "tenant"}
_RUN_FIELDS = {
    "skill": "skill_name",
    "path": "script_path",
    "script": "script_path",
    "inputs": "input_files",
    "args": "args",
    "stdin": "stdin",
    "tenant": "tenant",
}
_SKILL_STATUS = {
    SkillErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    SkillErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    # A symlink or an oversized skill is how it was installed, not the request's fault.
    SkillErrorCode.UNSAFE_FILE: grpc.StatusCode.FAILED_PRECONDITION,
    SkillErrorCode.TOO_LARGE: grpc.StatusCode.FAILED_PRECONDITION,
}


def skill_status(error: SkillError, fields: Mapping[str, str]) -> RequestError:
    field = fields.get(error.field or "", error.field or "")
    return RequestError(_SKILL_STATUS[error.code], str(error), field=field)


def sandbox_status(error: SandboxError) -> RequestError:
    if error.code == SandboxErrorCode.INVALID_REQUEST:
        field = _RUN_FIELDS.get(error.field or "", error.field or "")
        return RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(error), field=field)
    return RequestError(grpc.StatusCode.FAILED_PRECONDITION, str(error))


def _check_bound(name: str, bound: Sequence[str]) -> None:
    if bound and name not in bound:
        raise RequestError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"skill_name: {name!r} is not among bound_skill_names",
            field="skill_name",
        )


def _skill_message(summary: SkillSummary) -> pb.Skill:
    return message_from(
        pb.Skill,
        summary,
        instructions_path=summary.path,
        update_time=timestamp_of(summary.update_time),
    )


def timestamp_of(seconds: float) -> Timestamp | None:
    return timestamp(datetime.fromtimestamp(seconds, UTC)) if seconds else None


class SkillServicer:
    def __init__(
        self,
        skills: SkillStore,
        runner: SkillRunner,
        *,
        page_size: int,
        max_page_size: int,
        inline_output_bytes: int,
    ) -> None:
        self._skills = skills
        self._runner = runner
        self._page_size = page_size
        self._max_page_size = max_page_size
        self._inline_bytes = inline_output_bytes

    async def ListSkills(self, request: pb.ListSkillsRequest, context: Any) -> pb.ListSkillsResponse:
        async def work() -> pb.ListSkillsResponse:
            if request.page_size < 0:
                raise invalid("page_size", "must not be negative")
            size = min(request.page_size or self._page_size, self._max_page_size)
            after = _page_start(request.page_token)
            tenant = require_identity().tenant_id
            wanted = [check_skill_name(n, "names") for n in request.names] or None
            summaries = await asyncio.to_thread(self._skills.list_skills, tenant, wanted)
            remaining = [s for s in summaries if s.name > after]
            page = remaining[:size]
            token = ""
            if len(remaining) > size:
                token = base64.urlsafe_b64encode(f"{_PAGE_TOKEN_PREFIX}{page[-1].name}".encode()).decode()
            return pb.ListSkillsResponse(skills=[_skill_message(s) for s in page], next_page_token=token)

        return await answer(context, _mapped(work, _READ_FIELDS))

    async def GetSkill(self, request: pb.GetSkillRequest, context: Any) -> pb.GetSkillResponse:
        async def work() -> pb.GetSkillResponse:
            name = check_skill_name(request.name, "name")
            skill = await asyncio.to_thread(self._skills.get_skill, require_identity().tenant_id, name)
            return pb.GetSkillResponse(
                skill=_skill_message(skill.summary),
                instructions=skill.instructions,
                files=[
                    pb.SkillFile(
                        path=path,
                        size_bytes=skill.file_sizes.get(path, 0),
                        script=path.endswith(SCRIPT_SUFFIXES),
                    )
                    for path in skill.files
                ],
            )

        return await answer(context, _mapped(work, {**_READ_FIELDS, "skill": "name"}))

    async def ReadSkillFile(self, request: pb.ReadSkillFileRequest, context: Any) -> pb.ReadSkillFileResponse:
        async def work() -> pb.ReadSkillFileResponse:
            name = check_skill_name(request.skill_name, "skill_name")
            _check_bound(name, request.bound_skill_names)
            if not request.path:
                raise invalid("path", "required")
            head = await asyncio.to_thread(
                self._skills.read_head,
                require_identity().tenant_id,
                f"{VIRTUAL_ROOT}/{name}/{request.path}",
                (name,),
                self._skills.limits.max_file_bytes,
            )
            response = pb.ReadSkillFileResponse(
                size_bytes=head.size_bytes,
                truncated=head.truncated,
                content_type=content_type_of(request.path),
            )
            try:
                decoder = codecs.getincrementaldecoder("utf-8")()
                response.text = decoder.decode(head.content, final=not head.truncated)
            except UnicodeDecodeError:
                response.data = head.content
            return response

        return await answer(context, _mapped(work, _READ_FIELDS))

    async def ExecuteSkillScript(
        self, request: pb.ExecuteSkillScriptRequest, context: Any
    ) -> pb.ExecuteSkillScriptResponse:
        async def work() -> pb.ExecuteSkillScriptResponse:
            name = check_skill_name(request.skill_name, "skill_name")
            _check_bound(name, request.bound_skill_names)
            if not request.script_path:
                raise invalid("script_path", "required")
            timeout = seconds_of(request, "timeout")
            if timeout is not None and timeout <= 0:
                raise invalid("timeout", "must be positive (unset = the server's limit)")
            inputs: dict[str, bytes] = {}
            for index, item in enumerate(request.input_files):
                if item.path in inputs:
                    raise invalid(f"input_files[{index}].path", f"{item.path!r} is given twice")
                inputs[item.path] = item.content
            identity = require_identity()
            owner = Owner(identity.tenant_id, identity.user_id, request.session_id, request.turn_id)
            try:
                run = await self._runner.run(
                    owner,
                    name,
                    request.script_path,
                    args=tuple(request.args),
                    stdin=request.stdin.encode(),
                    inputs=inputs,
                    wall_time_seconds=timeout,
                )
            except SandboxError as error:
                raise sandbox_status(error) from None
            result = run.result
            return pb.ExecuteSkillScriptResponse(
                exit_code=-1 if result.exit_code is None else result.exit_code,
                stdout=result.stdout.decode("utf-8", "replace"),
                stderr=result.stderr.decode("utf-8", "replace"),
                output_truncated=result.stdout_truncated or result.stderr_truncated,
                timed_out=result.timed_out,
                output_files=[
                    pb.OutputFile(
                        path=output.path,
                        artifact=message_from(pb.ToolArtifact, output.artifact),
                        content=output.content if len(output.content) <= self._inline_bytes else b"",
                    )
                    for output in run.outputs
                ],
                duration=duration(result.duration_seconds),
            )

        return await answer(context, _mapped(work, _RUN_FIELDS))


def _page_start(token: str) -> str:
    """The name a page starts after ("" = the first page)."""
    if not token:
        return ""
    try:
        decoded = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError):
        decoded = ""
    if not decoded.startswith(_PAGE_TOKEN_PREFIX):
        raise invalid("page_token", "not a token from a previous ListSkills response")
    return decoded[len(_PAGE_TOKEN_PREFIX) :]


def _mapped(work: Callable[[], Awaitable[T]], fields: Mapping[str, str]) -> Callable[[], Awaitable[T]]:
    """``work`` with the skills store's errors turned into request errors naming the request's field."""

    async def run() -> T:
        try:
            return await work()
        except SkillError as error:
            raise skill_status(error, fields) from None

    return run
