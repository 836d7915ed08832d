"""One running child process of the stack, and starters for NATS and Temporal usable on their own.

Each child runs in its own session (so its pid is its process-group id and a terminal's signals do not
reach it), writes stdout and stderr to its log file, and is stopped with SIGTERM, then SIGKILL to its
whole group after the grace period. Exit is detected without reaping first (``waitid(WNOWAIT)``): while
the exited child is a zombie its pid cannot be reused, so killing stragglers left in its group is safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from knowsphere_stack import process_identity
from knowsphere_stack.binaries import nats_binary, temporal_binary
from knowsphere_stack.components import ComponentSpec, nats_component, temporal_component
from knowsphere_stack.health import ProbeResult, probe_all

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
DEFAULT_START_TIMEOUT = 60.0
LOG_TAIL_LINES = 40

__all__ = [
    "ComponentStartError",
    "ManagedProcess",
    "log_tail",
    "nats_binary",
    "start_nats",
    "start_temporal",
    "temporal_binary",
]


class ComponentStartError(RuntimeError):
    """A component did not become healthy; carries its name and the tail of its log."""

    def __init__(self, component: str, reason: str, log_path: Path | None = None) -> None:
        self.component = component
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail(log_path) if log_path else ""
        super().__init__(self._message())

    def _message(self) -> str:
        message = f"{self.component}: {self.reason}"
        if self.log_path is not None:
            message += f"\n--- last {LOG_TAIL_LINES} lines of {self.log_path} ---\n{self.log_tail}"
        return message


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    if path is None:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except FileNotFoundError:
        return ""


class ManagedProcess:
    """A child started from a :class:`ComponentSpec`."""

    def __init__(self, spec: ComponentSpec, popen: subprocess.Popen[bytes], start_time: int) -> None:
        self.spec = spec
        self._popen = popen
        self.start_time = start_time
        """Start time from /proc/<pid>/stat, the identity recorded next to the pid."""
        self.started_monotonic = time.monotonic()
        self._exit_code: int | None = None

    @classmethod
    def spawn(cls, spec: ComponentSpec, *, attempt: int = 1) -> ManagedProcess:
        """Start ``spec`` with its log opened for appending; does not wait for health."""
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env}
        with open(spec.log_path, "ab") as log_file:
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            log_file.write(
                f"=== ks-stack: starting {spec.name} (attempt {attempt}) at {stamp} ===\n".encode()
            )
            log_file.flush()
            popen = subprocess.Popen(
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
                close_fds=True,
            )
        # Even if the child has already exited, it is an unreaped zombie that /proc still shows.
        start_time = process_identity.start_time(popen.pid)
        if start_time is None:
            popen.kill()
            popen.wait()
            raise RuntimeError(f"cannot read /proc/{popen.pid}/stat for {spec.name}: is /proc mounted?")
        log.info("started %s pid %d", spec.name, popen.pid)
        return cls(spec, popen, start_time)

    # Identity -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def log_path(self) -> Path:
        return self.spec.log_path

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started_monotonic

    # Liveness --------------------------------------------------------------------------------

    def exit_code(self) -> int | None:
        """The exit code (negative = killed by that signal) once the child has exited, else None.

        On exit, stragglers left in the child's process group are killed before the child is reaped.
        """
        if self._exit_code is not None:
            return self._exit_code
        if self._popen.returncode is not None:
            self._exit_code = self._popen.returncode
            return self._exit_code
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # Reaped behind our back: the pid may already be reused, so leave the group alone.
            self._exit_code = self._popen.wait()
            return self._exit_code
        if info is None:
            return None
        self._kill_group()
        self._exit_code = self._popen.wait()
        return self._exit_code

    def is_running(self) -> bool:
        return self.exit_code() is None

    def _kill_group(self) -> None:
        # The child is still unreaped here (or alive), so its pid cannot have been reused.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    # Health ----------------------------------------------------------------------------------

    def probe(self) -> ProbeResult:
        return probe_all(self.spec.health, uptime=self.uptime)

    def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Block until every health check passes; raise :class:`ComponentStartError` otherwise."""
        deadline = time.monotonic() + timeout
        result = ProbeResult(False, "not probed yet")
        while time.monotonic() < deadline:
            code = self.exit_code()
            if code is not None:
                raise ComponentStartError(
                    self.name, f"exited with code {code} before it was healthy", self.log_path
                )
            result = self.probe()
            if result.ok:
                return
            time.sleep(POLL_INTERVAL)
        raise ComponentStartError(
            self.name, f"not healthy after {timeout:g}s (last check: {result.detail})", self.log_path
        )

    # Stopping --------------------------------------------------------------------------------

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL the process group. Returns the exit code."""
        if self.exit_code() is not None:
            return self._exit_code
        log.info("stopping %s pid %d", self.name, self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                log.info("%s stopped (exit code %s)", self.name, self._exit_code)
                return self._exit_code
            time.sleep(POLL_INTERVAL / 2)
        log.warning("%s pid %d did not stop within %gs: SIGKILL", self.name, self.pid, grace)
        self._kill_group()
        self._exit_code = self._popen.wait()
        return self._exit_code

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid})"


def _start_and_wait(spec: ComponentSpec, timeout: float) -> ManagedProcess:
    process = ManagedProcess.spawn(spec)
    try:
        process.wait_healthy(timeout)
    except BaseException:
        process.stop(grace=5.0)
        raise
    return process


def start_nats(
    data_dir: Path,
    port: int,
    monitor_port: int,
    *,
    log_path: Path | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    config_file: Path | None = None,
) -> ManagedProcess:
    """Start ``nats-server`` with JetStream stored under ``data_dir`` and wait until it is healthy.

    The log goes to ``log_path`` (default ``data_dir/nats-server.log``). Stop it with ``.stop()`` or use
    it as a context manager. ``config_file`` starts it from a configuration that sets the same ports and
    store (:func:`knowsphere_stack.nats_auth.server_config`, with authorization) instead.
    """
    spec = nats_component(Path(data_dir), port, monitor_port, log_path=log_path, config_file=config_file)
    return _start_and_wait(spec, timeout)


def start_temporal(
    data_dir: Path,
    port: int,
    ui_port: int,
    http_port: int,
    metrics_port: int,
    *,
    headless: bool = False,
    log_path: Path | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
) -> ManagedProcess:
    """Start the Temporal dev server persisting to ``data_dir/temporal.db`` and wait until it serves."""
    spec = temporal_component(
        Path(data_dir), port, ui_port, http_port, metrics_port, headless=headless, log_path=log_path
    )
    return _start_and_wait(spec, timeout)
