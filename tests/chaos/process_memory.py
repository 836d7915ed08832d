"""Resident memory of a process and every process below it, sampled from /proc while a scenario runs.

The ingestion worker parses each document in a child forked from its forkserver, so the worker's own
RSS says nothing of a parse: what a hostile file costs shows in the sum over the worker's tree. The sum
counts pages the children share with the forkserver once per process, so it overstates the tree a
little; a bound on it is a bound on the real figure.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command name and state
        children.setdefault(parent, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` right now."""
    children = _children_by_parent()
    found: list[int] = []
    pending = list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_bytes(pid: int) -> tuple[int, int]:
    """(RSS of ``pid`` and all its descendants, the number of descendants)."""
    below = descendants(pid)
    return rss_bytes(pid) + sum(rss_bytes(child) for child in below), len(below)


@dataclass
class TreeMemory:
    """Samples the tree under ``pid`` every ``interval`` seconds in a thread, from ``start`` to ``stop``."""

    pid: int
    interval: float = 0.1
    baseline_bytes: int = 0
    baseline_processes: int = 0  # descendants when sampling started
    peak_bytes: int = 0
    peak_processes: int = 0  # descendants at most
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeMemory:
        self.baseline_bytes, self.baseline_processes = tree_rss_bytes(self.pid)
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            total, processes = tree_rss_bytes(self.pid)
            self.peak_bytes = max(self.peak_bytes, total)
            self.peak_processes = max(self.peak_processes, processes)
            self.samples += 1
            self._stop.wait(self.interval)
