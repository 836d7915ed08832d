"""Real nats-server and Temporal dev server through the starters, and how a child is stopped."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from stack_testing import alive, standin, wait_for

from knowsphere_stack.components import TEMPORAL_HEALTH_SERVICE, ComponentSpec
from knowsphere_stack.config import free_port, free_ports
from knowsphere_stack.health import GrpcHealthCheck, grpc_health_status
from knowsphere_stack.processes import (
    ComponentStartError,
    ManagedProcess,
    start_nats,
    start_temporal,
    temporal_binary,
)
from knowsphere_stack.stack import port_is_free


def test_nats_runs_with_jetstream_and_stops(tmp_path: Path) -> None:
    port, monitor = free_ports(2)
    nats = start_nats(tmp_path / "nats", port, monitor)
    try:
        jsz = httpx.get(f"http://127.0.0.1:{monitor}/jsz", trust_env=False)
        assert jsz.status_code == 200
        assert jsz.json()["config"]["store_dir"].startswith(str(tmp_path / "nats"))
        assert (
            httpx.get(f"http://127.0.0.1:{monitor}/healthz?js-enabled-only=true", trust_env=False).status_code
            == 200
        )
        assert not port_is_free(port)
    finally:
        nats.stop(grace=5)
    assert not alive(nats.pid)
    assert port_is_free(port) and port_is_free(monitor)
    assert "Starting JetStream" in (tmp_path / "nats" / "nats-server.log").read_text()


def test_temporal_dev_server_serves_and_stops(tmp_path: Path) -> None:
    binary = temporal_binary()
    assert binary.is_file() and os.access(binary, os.X_OK)
    port, ui, http, metrics = free_ports(4)
    temporal = start_temporal(tmp_path / "temporal", port, ui, http, metrics, headless=True)
    try:
        assert grpc_health_status(f"127.0.0.1:{port}", TEMPORAL_HEALTH_SERVICE, timeout=3) == "SERVING"
        assert (tmp_path / "temporal" / "temporal.db").exists()
    finally:
        temporal.stop(grace=10)
    assert not alive(temporal.pid)
    assert grpc_health_status(f"127.0.0.1:{port}", TEMPORAL_HEALTH_SERVICE) != "SERVING"


def test_stop_escalates_to_sigkill_and_clears_the_process_group(tmp_path: Path) -> None:
    port = free_port()
    grandchild_file = tmp_path / "grandchild.pid"
    spec = ComponentSpec(
        name="stubborn",
        argv=standin("stubborn", "--ignore-term", "--spawn-grandchild", str(grandchild_file)),
        env={"KS_STUBBORN_GRPC_PORT": str(port)},
        log_path=tmp_path / "stubborn.log",
        health=[GrpcHealthCheck(address=f"127.0.0.1:{port}")],
    )
    process = ManagedProcess.spawn(spec)
    process.wait_healthy(15)
    grandchild = int(grandchild_file.read_text())
    assert alive(grandchild)

    assert process.stop(grace=0.5) == -signal.SIGKILL
    assert not alive(process.pid)
    wait_for(lambda: not alive(grandchild), 5, "the grandchild to be killed with its group")


def test_exit_before_healthy_reports_the_log_tail(tmp_path: Path) -> None:
    spec = ComponentSpec(
        name="broken",
        argv=[sys.executable, "-c", "print('cannot open index: disk full'); raise SystemExit(4)"],
        log_path=tmp_path / "broken.log",
        health=[GrpcHealthCheck(address=f"127.0.0.1:{free_port()}")],
    )
    process = ManagedProcess.spawn(spec)
    with pytest.raises(ComponentStartError) as raised:
        process.wait_healthy(10)
    assert raised.value.component == "broken"
    assert "code 4" in raised.value.reason
    assert "cannot open index: disk full" in raised.value.log_tail
