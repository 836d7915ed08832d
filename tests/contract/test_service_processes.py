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
    return {k: v for k, v in os.environ.items() if not k.startswith("KS_") and not k.startswith("MASTER_KEY")}


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
        "MASTER_KEY": "test-master-key-0123456789abcdef",
        "KS_MODELHUB_LOCAL_EMBEDDING_ENABLED": "false",
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


def test_modelhub_refuses_to_start_without_or_with_a_wrong_master_key(tmp_path):
    base = _clean_env() | {
        "KS_MODELHUB_DATA_DIR": str(tmp_path),
        "KS_MODELHUB_GRPC_PORT": str(free_port()),
        "KS_MODELHUB_LOCAL_EMBEDDING_ENABLED": "false",
        "OTEL_SDK_DISABLED": "true",
    }
    command = [sys.executable, "-m", "knowsphere_modelhub"]
    missing = subprocess.run(command, env=base, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert "MASTER_KEY is required but not set" in missing.stderr

    # First start records a check value encrypted with this key; stop it once it serves.
    port = int(base["KS_MODELHUB_GRPC_PORT"])
    first = subprocess.Popen(command, env=base | {"MASTER_KEY": "the-right-master-key-123456"})
    try:
        _wait_serving(port)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)

    wrong_key = base | {"MASTER_KEY": "a-different-master-key-999"}
    wrong = subprocess.run(command, env=wrong_key, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2
    assert "MASTER_KEY does not match" in wrong.stderr
