"""The rules every sandbox backend applies to a run before anything starts: a relative, harmless path
for every file, the script's interpreter and arguments, the environment, and the sizes the limits allow.
Each refusal is a ``SandboxError`` naming the request's field and the limit."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.model import SandboxError, SandboxErrorCode, SandboxRequest

SKILL_ROOT = "/skill"
WORKSPACE = "/workspace"
INPUT_DIR = "/workspace/input"
OUTPUT_DIR = "/workspace/output"
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKSPACE,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MAX_PATH_CHARS = 1024


def safe_relative_path(value: str, field: str) -> PurePosixPath:
    """``value`` as a relative path with no ``..``, no absolute start and no odd characters."""
    parts = value.split("/")
    if (
        not value
        or len(value) > _MAX_PATH_CHARS
        or value.startswith("/")
        or "\\" in value
        or any(ord(ch) < 32 for ch in value)
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"{field}: {value[:100]!r} must be a relative path without '..', '.', '//' or control characters",
            field=field,
        )
    return PurePosixPath(value)


def script_command(request: SandboxRequest, limits: SandboxLimits) -> list[str]:
    """The argv that runs the request's script inside the sandbox; refuses a bad script or arguments."""
    script = safe_relative_path(request.script, "script")
    if request.script not in request.skill_files:
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"script: {request.script!r} is not a file of the skill",
            field="script",
        )
    if len(request.args) > limits.max_args:
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"args: {len(request.args)} arguments, the limit is {limits.max_args}",
            field="args",
        )
    for arg in request.args:
        if len(arg) > limits.max_arg_chars or "\x00" in arg:
            raise SandboxError(
                SandboxErrorCode.INVALID_REQUEST,
                f"args: each argument is at most {limits.max_arg_chars} characters, without NUL",
                field="args",
            )
    path = f"{SKILL_ROOT}/{script}"
    if script.suffix == ".py":
        # -E -s: no PYTHON* variables, no user site; the script's folder stays importable.
        return [limits.python_executable, "-E", "-s", "-B", path, *request.args]
    if script.suffix == ".sh":
        return [limits.shell_executable, path, *request.args]
    raise SandboxError(
        SandboxErrorCode.INVALID_REQUEST, "script: only *.py and *.sh scripts can be run", field="script"
    )


def script_environment(request: SandboxRequest, limits: SandboxLimits) -> dict[str, str]:
    """The run's whole environment: the sandbox's base and the request's variables."""
    if len(request.env) > limits.max_env_vars:
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"env: {len(request.env)} variables, the limit is {limits.max_env_vars}",
            field="env",
        )
    for name, value in request.env.items():
        if not _ENV_NAME.fullmatch(name) or "\x00" in value or len(value) > limits.max_arg_chars:
            raise SandboxError(
                SandboxErrorCode.INVALID_REQUEST, f"env: {name[:64]!r} is not allowed", field="env"
            )
    return {**BASE_ENV, **request.env}


def check_files(files: Mapping[str, bytes], name: str, max_files: int | None, max_bytes: int) -> None:
    if max_files is not None and len(files) > max_files:
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"{name}: {len(files)} files, the limit is {max_files}",
            field=name,
        )
    total = 0
    for path, content in files.items():
        safe_relative_path(path, name)
        total += len(content)
    if total > max_bytes:
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"{name}: {total} bytes, the limit is {max_bytes}",
            field=name,
        )


def check_request(request: SandboxRequest, limits: SandboxLimits) -> tuple[list[str], dict[str, str]]:
    """Every check of a script run; its argv and environment."""
    command = script_command(request, limits)
    env = script_environment(request, limits)
    check_files(request.inputs, "inputs", limits.max_input_files, limits.max_input_bytes)
    check_files(request.skill_files, "skill_files", None, limits.max_skill_bytes)
    if len(request.stdin) > limits.max_stdin_bytes:
        raise SandboxError(
            SandboxErrorCode.INVALID_REQUEST,
            f"stdin: {len(request.stdin)} bytes is over the limit of {limits.max_stdin_bytes}",
            field="stdin",
        )
    return command, env
