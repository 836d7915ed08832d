"""The supervisor: starts components in order, restarts crashed ones with backoff, stops them in reverse.

It runs either in a thread of the caller (library use, tests) or as a detached process
(:mod:`knowsphere_stack.supervisor_process`, what ``ks-stack up`` starts with ``start_new_session``).

Rules:
- a component starts once every component before it has been started and the components it depends
  on are healthy, so the start order is exactly the list order;
- it is "healthy" once all its checks pass; checks run until then (and again after each restart);
- any exit that was not asked for is a crash: the restart waits ``initial * 2**(n-1)`` seconds (at
  most ``max``), n = crashes in a row (reset after a run longer than the crash window); after
  ``max_crashes`` crashes within the window the component is marked failed and left down;
- on stop, children get SIGTERM one by one in reverse start order, each up to the grace period
  before SIGKILL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

from pydantic import BaseModel

from knowsphere_stack.components import ComponentSpec
from knowsphere_stack.processes import ManagedProcess
from knowsphere_stack.run_dir import ComponentState, RunDir, StackState

log = logging.getLogger(__name__)

TICK = 0.1
"""Seconds between two rounds of the supervision loop."""


class RestartPolicy(BaseModel):
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    max_crashes: int = 5
    crash_window: float = 60.0
    stop_grace: float = 20.0


class SupervisorPlan(BaseModel):
    """What a detached supervisor is given on stdin."""

    run_dir: Path
    components: list[ComponentSpec]
    policy: RestartPolicy = RestartPolicy()


class _Slot:
    """Book-keeping of one component."""

    def __init__(self, spec: ComponentSpec) -> None:
        self.spec = spec
        self.process: ManagedProcess | None = None
        self.state = ComponentState(
            name=spec.name, ports=spec.ports, log_path=spec.log_path, health=spec.health
        )
        self.crash_times: deque[float] = deque()
        self.consecutive_crashes = 0
        self.restart_at = 0.0
        self.attempts = 0


class Supervisor:
    """Runs a list of components by the rules above; :meth:`snapshot` and ``state.json`` tell how they are."""

    def __init__(
        self,
        components: list[ComponentSpec],
        run_dir: Path,
        policy: RestartPolicy | None = None,
        *,
        supervisor_pid: int | None = None,
    ) -> None:
        names = [spec.name for spec in components]
        if len(set(names)) != len(names):
            raise ValueError(f"component names must be unique: {names}")
        known = set(names)
        for spec in components:
            missing = [dep for dep in spec.depends_on if dep not in known]
            if missing:
                raise ValueError(f"{spec.name} depends on {missing}, which are not components of this stack")
        self.policy = policy or RestartPolicy()
        self.run_dir = RunDir(run_dir)
        self._slots = [_Slot(spec) for spec in components]
        self._by_name = {slot.spec.name: slot for slot in self._slots}
        self._supervisor_pid = supervisor_pid
        self._stop_requested = threading.Event()
        self._lock = threading.Lock()
        self._stopping = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        """The exception that ended :meth:`run` early, if any (its children are stopped by then)."""

    # Public ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Supervise until :meth:`request_stop`; then stop every child. Blocks."""
        self.run_dir.ensure()
        self._publish()
        try:
            while not self._stop_requested.is_set():
                self._tick()
                self._stop_requested.wait(TICK)
        except BaseException as exc:
            self.failure = exc
            log.exception("supervisor failed; stopping every child")
            raise
        finally:
            self._shutdown()

    def start_in_thread(self) -> None:
        self._thread = threading.Thread(target=self.run, name="ks-stack-supervisor", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stop_requested.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def snapshot(self) -> StackState:
        with self._lock:
            return StackState(
                supervisor_pid=self._supervisor_pid,
                stopping=self._stopping,
                stopped=self._stopped,
                components=[slot.state.model_copy(deep=True) for slot in self._slots],
            )

    # Loop ------------------------------------------------------------------------------------

    def _tick(self) -> None:
        changed = False
        now = time.monotonic()
        earlier_started = True
        for slot in self._slots:
            status = slot.state.status
            if status == "waiting":
                if earlier_started and self._dependencies_healthy(slot):
                    self._spawn(slot)
                    changed = True
                else:
                    earlier_started = False
                continue
            if status == "failed":
                continue
            if status == "restarting":
                if now >= slot.restart_at:
                    self._spawn(slot)
                    changed = True
                continue
            changed |= self._watch(slot, now)
        if changed:
            self._publish()

    def _dependencies_healthy(self, slot: _Slot) -> bool:
        return all(self._by_name[dep].state.status == "healthy" for dep in slot.spec.depends_on)

    def _spawn(self, slot: _Slot) -> None:
        slot.attempts += 1
        try:
            process = ManagedProcess.spawn(slot.spec, attempt=slot.attempts)
        except OSError as exc:
            # The command itself cannot run (missing binary, bad cwd): restarting will not help.
            log.error("cannot start %s: %s", slot.spec.name, exc)
            self._set(slot, status="failed", pid=None, start_time=None, detail=f"cannot start: {exc}")
            return
        slot.process = process
        self.run_dir.write_pid(slot.spec.name, process.pid, process.start_time)
        self._set(slot, status="starting", pid=process.pid, start_time=process.start_time, detail="")

    def _watch(self, slot: _Slot, now: float) -> bool:
        process = slot.process
        assert process is not None
        code = process.exit_code()
        if code is not None:
            self._on_crash(slot, code, now)
            return True
        if slot.state.status == "starting":
            result = process.probe()
            if result.ok:
                log.info("%s is healthy", slot.spec.name)
                self._set(slot, status="healthy", detail=result.detail)
                return True
            if result.detail != slot.state.detail:
                self._set(slot, detail=result.detail)
                return True
        return False

    def _on_crash(self, slot: _Slot, code: int, now: float) -> None:
        process = slot.process
        assert process is not None
        policy = self.policy
        if process.uptime >= policy.crash_window:
            slot.consecutive_crashes = 0
        slot.consecutive_crashes += 1
        slot.crash_times.append(now)
        while slot.crash_times and slot.crash_times[0] < now - policy.crash_window:
            slot.crash_times.popleft()
        crashes = len(slot.crash_times)
        if crashes >= policy.max_crashes:
            reason = (
                f"crashed {crashes} times within {policy.crash_window:g}s (last exit code {code}); giving up"
            )
            log.error("%s %s", slot.spec.name, reason)
            self._set(slot, status="failed", last_exit_code=code, detail=reason)
            return
        delay = min(policy.backoff_max, policy.backoff_initial * 2 ** (slot.consecutive_crashes - 1))
        slot.restart_at = now + delay
        log.warning("%s exited with code %s; restarting in %gs", slot.spec.name, code, delay)
        self._set(
            slot,
            status="restarting",
            last_exit_code=code,
            restarts=slot.state.restarts + 1,
            detail=f"exited with code {code}; restarting in {delay:g}s",
        )

    def _set(self, slot: _Slot, **changes: object) -> None:
        with self._lock:
            slot.state = slot.state.model_copy(update=changes)

    def _publish(self) -> None:
        self.run_dir.write_state(self.snapshot())

    # Shutdown --------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        with self._lock:
            self._stopping = True
        self._publish()
        for slot in reversed(self._slots):
            if slot.process is not None and slot.state.status != "failed":
                slot.process.stop(grace=self.policy.stop_grace)
            elif slot.process is not None:
                slot.process.exit_code()  # reap, and clear stragglers of its group
            if slot.state.status != "waiting":
                self._set(slot, status="stopped")
        with self._lock:
            self._stopped = True
        self._publish()
        log.info("all components stopped")
