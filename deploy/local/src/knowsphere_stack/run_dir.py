"""The run directory ``<data>/run/``: pid files and the supervisor's state file.

A pid file ``<name>.pid`` holds the pid on its first line (so ``kill $(head -1 x.pid)`` works) and the
process's start time from ``/proc/<pid>/stat`` on its second: ``down`` signals a pid only if the start
time still matches. ``state.json`` is rewritten atomically by the supervisor whenever a component
changes state; ``up`` waits on it and ``status`` reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from knowsphere_stack import process_identity
from knowsphere_stack.health import HealthCheck

SUPERVISOR = "supervisor"
"""Name of the detached supervisor's pid file (``supervisor.pid``)."""

ComponentStatus = Literal["waiting", "starting", "healthy", "restarting", "failed", "stopped"]


class ComponentState(BaseModel):
    name: str
    status: ComponentStatus = "waiting"
    pid: int | None = None
    start_time: int | None = None
    restarts: int = 0
    last_exit_code: int | None = None
    detail: str = ""
    ports: dict[str, int] = Field(default_factory=dict)
    log_path: Path
    health: list[HealthCheck] = Field(default_factory=list)


class StackState(BaseModel):
    supervisor_pid: int | None = None
    stopping: bool = False
    stopped: bool = False
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    components: list[ComponentState] = Field(default_factory=list)

    def component(self, name: str) -> ComponentState:
        for state in self.components:
            if state.name == name:
                return state
        raise KeyError(name)


@dataclass(frozen=True)
class RecordedProcess:
    name: str
    pid: int
    start_time: int

    def is_running(self) -> bool:
        """True only if the pid is alive and is still the process that was recorded."""
        return process_identity.is_same_process(self.pid, self.start_time)


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ensure(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    # Pid files -------------------------------------------------------------------------------

    def pid_file(self, name: str) -> Path:
        return self.path / f"{name}.pid"

    def write_pid(self, name: str, pid: int, start_time: int) -> None:
        self.ensure()
        _write_atomically(self.pid_file(name), f"{pid}\n{start_time}\n")

    def read_pid(self, name: str) -> RecordedProcess | None:
        """The recorded process, or None if there is no pid file or it cannot be trusted."""
        try:
            lines = self.pid_file(name).read_text().split()
            return RecordedProcess(name=name, pid=int(lines[0]), start_time=int(lines[1]))
        except (FileNotFoundError, IndexError, ValueError):
            return None

    def pid_names(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(path.stem for path in self.path.glob("*.pid"))

    def remove_pid(self, name: str) -> None:
        self.pid_file(name).unlink(missing_ok=True)

    # State file ------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    def write_state(self, state: StackState) -> None:
        self.ensure()
        _write_atomically(self.state_path, state.model_dump_json(indent=2))

    def read_state(self) -> StackState | None:
        try:
            return StackState.model_validate(json.loads(self.state_path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, ValidationError):
            return None

    def remove_state(self) -> None:
        self.state_path.unlink(missing_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
