"""The supervisor with stand-in children: order, restarts with backoff, giving up, reverse stop."""

from __future__ import annotations

import itertools
import os
import signal
import sys
from pathlib import Path

from stack_testing import alive, standin, wait_for

from knowsphere_stack.components import ComponentSpec
from knowsphere_stack.config import free_port
from knowsphere_stack.health import GrpcHealthCheck
from knowsphere_stack.run_dir import RunDir
from knowsphere_stack.supervisor import RestartPolicy, Supervisor


def _service(tmp_path: Path, name: str, *options: str, depends_on: list[str] | None = None) -> ComponentSpec:
    port = free_port()
    return ComponentSpec(
        name=name,
        argv=standin(name, *options),
        env={f"KS_{name.upper()}_GRPC_PORT": str(port)},
        log_path=tmp_path / "logs" / f"{name}.log",
        ports={"grpc": port},
        health=[GrpcHealthCheck(address=f"127.0.0.1:{port}")],
        depends_on=depends_on or [],
    )


def _status(supervisor: Supervisor, name: str) -> str:
    return supervisor.snapshot().component(name).status


def test_restarts_a_crashed_child_and_records_the_new_pid(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    supervisor = Supervisor(
        [_service(tmp_path, "echo")], run_dir.path, RestartPolicy(backoff_initial=0.2, stop_grace=5)
    )
    supervisor.start_in_thread()
    try:
        wait_for(lambda: _status(supervisor, "echo") == "healthy", what="echo healthy")
        first_pid = supervisor.snapshot().component("echo").pid
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)

        def restarted_and_healthy() -> bool:
            state = supervisor.snapshot().component("echo")
            return state.status == "healthy" and state.pid != first_pid

        wait_for(restarted_and_healthy, what="echo restarted and healthy")
        state = supervisor.snapshot().component("echo")
        assert state.restarts == 1
        assert state.last_exit_code == -signal.SIGKILL
        recorded = run_dir.read_pid("echo")
        assert recorded is not None and recorded.pid == state.pid and recorded.is_running()
        on_disk = run_dir.read_state()
        assert on_disk is not None and on_disk.component("echo").restarts == 1
        assert "attempt 2" in (tmp_path / "logs" / "echo.log").read_text()
    finally:
        supervisor.request_stop()
        supervisor.join(15)
    assert not alive(state.pid)


def test_backs_off_then_gives_up_and_marks_the_child_failed(tmp_path: Path) -> None:
    starts = tmp_path / "starts.txt"
    crasher = ComponentSpec(
        name="crasher",
        argv=[
            sys.executable,
            "-c",
            f"import time; open({str(starts)!r}, 'a').write(f'{{time.monotonic()}}\\n'); raise SystemExit(3)",
        ],
        log_path=tmp_path / "logs" / "crasher.log",
        health=[GrpcHealthCheck(address=f"127.0.0.1:{free_port()}")],
    )
    dependent = _service(tmp_path, "dependent", depends_on=["crasher"])
    policy = RestartPolicy(backoff_initial=0.2, backoff_max=30, max_crashes=4, crash_window=60, stop_grace=5)
    supervisor = Supervisor([crasher, dependent], tmp_path / "run", policy)
    supervisor.start_in_thread()
    try:
        wait_for(lambda: _status(supervisor, "crasher") == "failed", what="crasher failed")
        state = supervisor.snapshot()
        crashed = state.component("crasher")
        assert crashed.restarts == 3
        assert crashed.last_exit_code == 3
        assert "crashed 4 times" in crashed.detail
        # A component waiting on a failed one is never started.
        assert state.component("dependent").status == "waiting"
        assert state.component("dependent").pid is None
        on_disk = RunDir(tmp_path / "run").read_state()
        assert on_disk is not None and on_disk.component("crasher").status == "failed"

        times = [float(line) for line in starts.read_text().split()]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert len(gaps) == 3
        for gap, delay in zip(gaps, [0.2, 0.4, 0.8], strict=True):
            assert gap >= delay
        assert gaps[0] < gaps[1] < gaps[2]
    finally:
        supervisor.request_stop()
        supervisor.join(15)


def test_starts_in_order_after_dependencies_and_stops_in_reverse(tmp_path: Path) -> None:
    events = tmp_path / "events.txt"
    specs = [
        _service(tmp_path, "first", "--serve-after", "0.5", "--events", str(events)),
        _service(tmp_path, "second", "--events", str(events), depends_on=["first"]),
        _service(tmp_path, "third", "--events", str(events)),
    ]
    supervisor = Supervisor(specs, tmp_path / "run", RestartPolicy(stop_grace=5))
    supervisor.start_in_thread()
    try:
        wait_for(
            lambda: all(c.status == "healthy" for c in supervisor.snapshot().components), what="all healthy"
        )
        pids = [c.pid for c in supervisor.snapshot().components]
    finally:
        supervisor.request_stop()
        supervisor.join(20)
    lines = events.read_text().split("\n")[:-1]
    # third has no dependency, but keeps its place behind second, which waits for first to be healthy.
    assert lines.index("start second") > lines.index("serving first")
    assert lines.index("start third") > lines.index("serving first")
    assert [line for line in lines if line.startswith("stop")] == ["stop third", "stop second", "stop first"]
    assert not any(alive(pid) for pid in pids if pid)
    assert RunDir(tmp_path / "run").read_state().stopped  # type: ignore[union-attr]
