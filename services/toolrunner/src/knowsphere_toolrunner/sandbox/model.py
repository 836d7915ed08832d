"""What a sandbox run is asked to do and what it gives back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class SandboxRequest:
    """One script run. Paths are relative; the script runs with ``/workspace`` as its directory."""

    script: str
    """Path of the script among ``skill_files`` (``*.py`` runs with Python, ``*.sh`` with sh)."""
    skill_files: Mapping[str, bytes] = field(default_factory=dict)
    """The skill's files (relative path → content), read-only at ``/skill`` in the sandbox."""
    inputs: Mapping[str, bytes] = field(default_factory=dict)
    """Files placed read-only in ``/workspace/input``."""
    args: tuple[str, ...] = ()
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables; nothing of the service's own environment reaches the sandbox."""
    wall_time_seconds: float | None = None
    """A shorter wall-clock limit for this run; None (or more than the limits allow) = the limits'."""


@dataclass(frozen=True)
class SandboxCommand:
    """A long-running program spoken to over its stdin and stdout (an MCP server over stdio), with the
    same isolation as a script run."""

    argv: tuple[str, ...]
    """The program (an absolute path inside the sandbox) and its arguments."""
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Files placed read-only in ``/skill`` (relative path → content)."""
    env: Mapping[str, str] = field(default_factory=dict)
    read_only_paths: tuple[str, ...] = ()
    """Host folders or files shown read-only at the same path (an interpreter's packages …)."""
    wall_time_seconds: float | None = None
    """A shorter wall-clock limit for this process; None (or more than the limits allow) = the limits'."""


@dataclass(frozen=True)
class SandboxResult:
    exit_code: int | None
    """The script's exit status; None when it was killed (``signal``) or timed out."""
    signal: int | None
    """The signal that ended the script (SIGKILL on the memory or CPU limit, SIGXCPU …)."""
    timed_out: bool
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    outputs: dict[str, bytes]
    """Regular files left in ``/workspace/output`` (relative path → content)."""
    outputs_truncated: bool
    """True when files were left out because of ``max_output_bytes`` or ``max_output_files``."""
    duration_seconds: float
    memory_exceeded: bool
    """True when the run was killed for using more than ``max_run_memory_bytes`` all together."""
    protections: tuple[str, ...]
    """What isolated this run, e.g. ``("namespaces", "seccomp", "landlock-abi-7", "rlimits", "uid")``."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxErrorCode(StrEnum):
    INVALID_REQUEST = "invalid_request"
    """A path, name or size in the request breaks a rule; ``field`` names it."""
    UNAVAILABLE = "sandbox_unavailable"
    """The sandbox cannot be set up on this machine (no bwrap, no user namespaces, no seccomp …)."""


class SandboxError(Exception):
    def __init__(self, code: SandboxErrorCode, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
