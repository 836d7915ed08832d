"""Telling whether a recorded pid is still the process we started, from ``/proc/<pid>/stat``.

A pid alone is not an identity: after a process exits the kernel may hand its pid to an unrelated
process. We record the start time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot) next to
every pid and only ever signal a pid whose current start time matches the recorded one.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    pgrp: int
    start_time: int


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/<pid>/stat``; None if there is no such process."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); field n is rest[n - 3].
    return ProcStat(pid=pid, state=rest[0], pgrp=int(rest[2]), start_time=int(rest[19]))


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it does not exist."""
    stat = read_stat(pid)
    return stat.start_time if stat else None


def is_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (a zombie has exited; it only awaits reaping)."""
    stat = read_stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


def is_same_process(pid: int, recorded_start_time: int) -> bool:
    """True if ``pid`` is alive and is the very process whose start time was recorded."""
    stat = read_stat(pid)
    return stat is not None and stat.state not in ("Z", "X") and stat.start_time == recorded_start_time


def group_members(pgid: int) -> list[int]:
    """Pids of live processes whose process group is ``pgid``."""
    members: list[int] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = read_stat(int(entry.name))
        if stat and stat.pgrp == pgid and stat.state not in ("Z", "X"):
            members.append(stat.pid)
    return members


def kill_recorded_group(pid: int, recorded_start_time: int, sig: int = signal.SIGKILL) -> list[int]:
    """Signal what is left of the process group led by a recorded process; return the pids signalled.

    Every child of the stack is started in its own session, so its pid is also its process group id.
    The group is ours if its leader is still the recorded process, or if the leader is gone: the kernel
    never hands out a pid that is still in use as a process-group id, so a group whose id equals a dead
    leader's pid can only be the original one. If the pid now belongs to another process, nothing is
    signalled.
    """
    leader = read_stat(pid)
    if leader is not None and leader.start_time != recorded_start_time:
        return []
    members = group_members(pid)
    if leader is not None and leader.state not in ("Z", "X") and pid not in members:
        members.append(pid)  # it left its group: still ours by its start time
    signalled: list[int] = []
    for member in members:
        try:
            os.kill(member, sig)
            signalled.append(member)
        except ProcessLookupError:
            pass
    return signalled


def uptime_seconds(recorded_start_time: int) -> float:
    """Seconds since a process with this start time (clock ticks since boot) started."""
    system_uptime = float((PROC / "uptime").read_text().split()[0])
    return max(0.0, system_uptime - recorded_start_time / os.sysconf("SC_CLK_TCK"))
