"""Every service as a process: it refuses to start without its settings, serves health, stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from knowsphere_stack import free_port

SERVICES = ["gateway", "conversation", "retrieval", "ingestion", "memory", "toolrunner", "modelhub"]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KS_")}


@pytest.mark.parametrize("name", SERVICES)
def test_missing_settings_stop_the_service_with_the_variable_named(name):
    done = subprocess.run(
        [sys.executable, "-m", f"knowsphere_{name}"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"KS_{name.upper()}_DATA_DIR is required but not set" in done.stderr


def _wait_serving(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"port {port} never reported SERVING")
            time.sleep(0.2)


@pytest.mark.parametrize("name", ["retrieval", "memory", "toolrunner", "modelhub", "conversation"])
def test_service_serves_health_and_stops_cleanly_on_sigterm(name, tmp_path, nats_url):
    port = free_port()
    prefix = f"KS_{name.upper()}_"
    env = _clean_env() | {
        f"{prefix}GRPC_PORT": str(port),
        f"{prefix}DATA_DIR": str(tmp_path),
        f"{prefix}NATS_URL": nats_url,
        "OTEL_SDK_DISABLED": "true",
    }
    for peer in ("RETRIEVAL", "MEMORY", "TOOLRUNNER", "MODELHUB"):
        env[f"{prefix}{peer}_ADDR"] = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [sys.executable, "-m", f"knowsphere_{name}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_serving(port)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    output = process.stdout.read().decode() if process.stdout else ""
    assert code == 0, output
    assert '"event": "stopping"' in output


def test_bad_telemetry_variable_stops_the_service_with_the_variable_named(tmp_path):
    env = _clean_env() | {
        "KS_MEMORY_DATA_DIR": str(tmp_path),
        "KS_MEMORY_GRPC_PORT": str(free_port()),
        "OTEL_TRACES_EXPORTER": "jaeger",
    }
    done = subprocess.run(
        [sys.executable, "-m", "knowsphere_memory"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "OTEL_TRACES_EXPORTER='jaeger'" in done.stderr
