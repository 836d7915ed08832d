"""Helpers of the launcher tests: stand-in commands, process look-ups, waiting."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

STANDIN = Path(__file__).with_name("standin_service.py")


def standin(name: str, *options: str) -> list[str]:
    """The argv of a stand-in service (see standin_service.py)."""
    return [sys.executable, str(STANDIN), name, *options]


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def pids_with_env(key: str, value: str) -> list[int]:
    """Live processes whose environment has ``key=value`` (every process of a stack inherits it)."""
    needle = f"{key}={value}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if state not in ("Z", "X") and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")
