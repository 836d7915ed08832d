"""``ks-stack`` as ``make up`` / ``make down`` run it: real NATS and Temporal, stand-in services."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from stack_testing import alive, pids_with_env, standin, wait_for

from knowsphere_stack import process_identity
from knowsphere_stack.config import SERVICE_NAMES, StackConfig, free_ports
from knowsphere_stack.run_dir import RunDir

COMMAND_TIMEOUT = 90


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KS_STACK_") and k != "MASTER_KEY"}
    fields = StackConfig.port_fields()
    for field, port in zip(fields, free_ports(len(fields)), strict=True):
        env[StackConfig.env_var(field)] = str(port)
    commands = {name: standin(name) for name in SERVICE_NAMES}
    env.update(
        KS_STACK_DATA_DIR=str(tmp_path / "data"),
        KS_STACK_SERVICE_COMMAND=json.dumps(commands),
        KS_STACK_HEALTH_TIMEOUT="40",
        KS_STACK_STOP_GRACE="5",
    )
    env.update(overrides)
    return env


def _ks(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "knowsphere_stack.cli", *args],
        env=env,
        cwd=Path(env["KS_STACK_DATA_DIR"]).parent,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )


def _stack_pids(env: dict[str, str]) -> list[int]:
    """Every live process started by that `up` (they all inherit KS_STACK_DATA_DIR)."""
    return pids_with_env("KS_STACK_DATA_DIR", env["KS_STACK_DATA_DIR"])


def test_up_status_logs_down_and_nothing_is_left(tmp_path: Path) -> None:
    data = tmp_path / "data"
    grandchild_file = tmp_path / "grandchild.pid"
    commands = {name: standin(name) for name in SERVICE_NAMES}
    commands["ingestion-worker"] = standin(
        "ingestion", "--no-grpc", "--spawn-grandchild", str(grandchild_file)
    )
    env = _env(tmp_path, KS_STACK_SERVICE_COMMAND=json.dumps(commands), KS_STACK_INGESTION_WORKER="true")
    try:
        up = _ks(env, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        # `up` returned while the stack keeps running in the background.
        assert f"http://127.0.0.1:{env['KS_STACK_GATEWAY_HTTP_PORT']}" in up.stdout
        assert f"http://127.0.0.1:{env['KS_STACK_TEMPORAL_UI_PORT']}" in up.stdout
        assert str(data) in up.stdout and str(data / "logs") in up.stdout

        run_dir = RunDir(data / "run")
        expected = {"supervisor", "nats", "temporal", "ingestion-worker", *SERVICE_NAMES}
        assert set(run_dir.pid_names()) == expected
        recorded = {name: run_dir.read_pid(name) for name in expected}
        pids = {name: r.pid for name, r in recorded.items() if r is not None and r.is_running()}
        assert set(pids) == expected
        grandchild = int(grandchild_file.read_text())
        assert alive(grandchild)

        # The wiring the services received.
        gateway = json.loads((data / "gateway" / "standin-gateway.json").read_text())["env"]
        assert gateway["KS_GATEWAY_NATS_URL"] == f"nats://127.0.0.1:{env['KS_STACK_NATS_PORT']}"
        assert gateway["KS_GATEWAY_MODELHUB_ADDR"] == f"127.0.0.1:{env['KS_STACK_MODELHUB_GRPC_PORT']}"
        assert gateway["OTEL_SERVICE_NAME"] == "gateway"
        modelhub = json.loads((data / "modelhub" / "standin-modelhub.json").read_text())["env"]
        key_file = data / "secrets" / "master.key"
        assert modelhub["MASTER_KEY"] == key_file.read_text().strip()
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        # Services that keep tenants' secrets get the same key; the others none.
        assert gateway["MASTER_KEY"] == modelhub["MASTER_KEY"]
        retrieval = json.loads((data / "retrieval" / "standin-retrieval.json").read_text())["env"]
        assert "MASTER_KEY" not in retrieval

        status = _ks(env, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        rows = {line.split()[0]: line for line in status.stdout.splitlines()[2:]}
        assert set(rows) == expected - {"supervisor"}
        assert all(row.endswith(" healthy") and str(pids[name]) in row for name, row in rows.items())

        logs = _ks(env, "logs", "nats")
        assert logs.returncode == 0 and str(data / "logs" / "nats.log") in logs.stdout
        assert "Starting JetStream" in logs.stdout

        again = _ks(env, "up")
        assert again.returncode == 0 and "already running" in again.stdout
        assert {name: run_dir.read_pid(name) for name in expected} == recorded  # nothing new started

        down = _ks(env, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped" in down.stdout
        assert not any(alive(pid) for pid in pids.values())
        assert not alive(grandchild)
        assert _stack_pids(env) == []
        assert run_dir.pid_names() == []

        nothing = _ks(env, "down")
        assert nothing.returncode == 0 and "not running" in nothing.stdout
    finally:
        _ks(env, "down")


def test_up_refuses_a_busy_port_and_names_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(env["KS_STACK_RETRIEVAL_GRPC_PORT"])))
        squatter.listen()
        up = _ks(env, "up")
    assert up.returncode != 0
    assert env["KS_STACK_RETRIEVAL_GRPC_PORT"] in up.stderr
    assert "KS_STACK_RETRIEVAL_GRPC_PORT" in up.stderr
    assert _stack_pids(env) == []
    assert RunDir(tmp_path / "data" / "run").pid_names() == []


def test_up_names_a_crashing_service_shows_its_log_and_stops_the_rest(tmp_path: Path) -> None:
    commands = {
        "retrieval": [
            sys.executable,
            "-c",
            "print('retrieval: index directory is corrupt'); raise SystemExit(2)",
        ],
        "gateway": standin("gateway"),
    }
    env = _env(
        tmp_path,
        KS_STACK_SERVICES="retrieval,gateway",
        KS_STACK_TEMPORAL_ENABLED="false",
        KS_STACK_SERVICE_COMMAND=json.dumps(commands),
        KS_STACK_RESTART_BACKOFF_INITIAL="0.05",
    )
    up = _ks(env, "up")
    assert up.returncode != 0
    assert "retrieval" in up.stderr and "crashed 5 times" in up.stderr
    assert "index directory is corrupt" in up.stderr  # the log tail
    assert _stack_pids(env) == []
    assert RunDir(tmp_path / "data" / "run").pid_names() == []


def test_up_times_out_naming_the_unhealthy_service(tmp_path: Path) -> None:
    commands = {"memory": standin("memory", "--no-grpc")}
    env = _env(
        tmp_path,
        KS_STACK_SERVICES="memory",
        KS_STACK_TEMPORAL_ENABLED="false",
        KS_STACK_NATS_ENABLED="false",
        KS_STACK_SERVICE_COMMAND=json.dumps(commands),
        KS_STACK_HEALTH_TIMEOUT="2",
    )
    up = _ks(env, "up")
    assert up.returncode != 0
    assert "memory: not healthy within 2s" in up.stderr
    assert "stand-in memory starting" in up.stderr  # the log tail
    assert _stack_pids(env) == []


@pytest.mark.parametrize("recorded_as_ours", [False, True])
def test_down_kills_a_recorded_pid_only_if_it_is_still_the_same_process(
    tmp_path: Path, recorded_as_ours: bool
) -> None:
    env = _env(tmp_path)
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        real_start = process_identity.start_time(victim.pid)
        assert real_start is not None
        recorded_start = real_start if recorded_as_ours else real_start - 1  # -1: the pid was reused
        run_dir = RunDir(tmp_path / "data" / "run")
        run_dir.write_pid("supervisor", victim.pid, recorded_start)
        run_dir.write_pid("nats", victim.pid, recorded_start)

        down = _ks(env, "down", "--grace", "1")
        assert down.returncode == 0, down.stdout + down.stderr
        if recorded_as_ours:
            assert victim.wait(timeout=10) != 0
        else:
            assert "left alone" in down.stdout
            assert victim.poll() is None and alive(victim.pid)
        assert run_dir.pid_names() == []
    finally:
        victim.kill()
        victim.wait()


def test_down_kills_the_children_of_a_supervisor_that_was_killed(tmp_path: Path) -> None:
    env = _env(tmp_path, KS_STACK_SERVICES="retrieval", KS_STACK_TEMPORAL_ENABLED="false")
    try:
        up = _ks(env, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        run_dir = RunDir(tmp_path / "data" / "run")
        supervisor = run_dir.read_pid("supervisor")
        assert supervisor is not None
        os.kill(supervisor.pid, signal.SIGKILL)
        wait_for(lambda: not alive(supervisor.pid), 5, "the supervisor to die")
        children = _stack_pids(env)
        assert len(children) == 2  # nats and retrieval, orphaned but alive

        status = _ks(env, "status")
        assert status.returncode != 0 and "supervisor is not running" in status.stdout

        down = _ks(env, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "killed leftover nats" in down.stdout and "killed leftover retrieval" in down.stdout
        assert _stack_pids(env) == [] and run_dir.pid_names() == []
    finally:
        _ks(env, "down")
