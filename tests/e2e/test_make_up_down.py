"""`make up` / `make down` as a user runs them: the `ks-stack` command with the real seven services.

The ports are free random ones and the data directory is temporary, so this runs beside a stack
the developer may have up, and beside the machine's own NATS and PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from knowsphere_stack import StackConfig

pytestmark = pytest.mark.e2e

KS_STACK = str(Path(sys.executable).parent / "ks-stack")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes: it holds no port and runs nothing.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_up_reports_every_service_healthy_and_down_leaves_nothing(tmp_path):
    config = StackConfig.with_free_ports(data_dir=tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KS_", "OTEL_"))}
    env.update({StackConfig.env_var(name): str(getattr(config, name)) for name in StackConfig.port_fields()})
    env[StackConfig.env_var("data_dir")] = str(config.data_dir)

    up = subprocess.run([KS_STACK, "up"], env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert config.gateway_url in up.stdout
        assert str(config.log_dir) in up.stdout

        report = httpx.get(f"{config.gateway_url}/healthz", timeout=10).json()
        assert report["status"] == "ok"
        assert report["services"] == dict.fromkeys(
            ["gateway", "conversation", "retrieval", "ingestion", "memory", "toolrunner", "modelhub"],
            "SERVING",
        )
        pids = [int(p.read_text().split()[0]) for p in (config.run_dir).glob("*.pid")]
        assert len(pids) >= 10  # supervisor, nats, temporal and seven services
        assert all(_alive(pid) for pid in pids)
    finally:
        down = subprocess.run(
            [KS_STACK, "down"], env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path
        )
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [pid for pid in pids if _alive(pid)]
    assert not list(config.run_dir.glob("*.pid"))
