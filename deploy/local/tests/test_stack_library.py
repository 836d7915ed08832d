"""``Stack`` as the end-to-end tests use it: in-process supervision of a subset of services."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from stack_testing import alive, pids_with_env, standin

from knowsphere_stack import Stack, StackConfig, StackStartError
from knowsphere_stack.health import grpc_health_status
from knowsphere_stack.run_dir import RunDir
from knowsphere_stack.stack import port_is_free

pytestmark = pytest.mark.usefixtures("clean_env")


def test_a_subset_of_services_comes_up_wired_and_goes_away(tmp_path: Path) -> None:
    marker = {"KS_STACK_TEST_MARKER": str(tmp_path)}
    config = StackConfig.with_free_ports(
        data_dir=tmp_path / "data",
        services=["gateway", "retrieval", "conversation"],
        temporal_enabled=False,
        service_command={name: standin(name) for name in ("retrieval", "conversation", "gateway")},
        extra_env=marker,
        stop_grace=5,
    )
    with Stack(config) as stack:
        assert httpx.get(f"{stack.gateway_url}/healthz", trust_env=False).status_code == 200
        for name in ("retrieval", "conversation", "gateway"):
            assert grpc_health_status(stack.grpc_addr(name)) == "SERVING"
        state = stack.state()
        assert state is not None
        assert [c.name for c in state.components] == ["nats", "retrieval", "conversation", "gateway"]
        conversation = json.loads(
            (tmp_path / "data" / "conversation" / "standin-conversation.json").read_text()
        )["env"]
        assert conversation["KS_STACK_TEST_MARKER"] == str(tmp_path)
        assert conversation["KS_CONVERSATION_RETRIEVAL_ADDR"] == stack.grpc_addr("retrieval")
        assert conversation["KS_CONVERSATION_NATS_URL"] == stack.nats_url
        assert len(pids_with_env("KS_STACK_TEST_MARKER", str(tmp_path))) == 3
        nats_pid = state.component("nats").pid
    assert pids_with_env("KS_STACK_TEST_MARKER", str(tmp_path)) == []
    assert nats_pid is not None and not alive(nats_pid)
    assert port_is_free(config.nats_port) and port_is_free(config.gateway_http_port)
    assert RunDir(config.run_dir).pid_names() == []


def test_a_service_that_is_not_installed_is_reported_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Make the two services look uninstalled, whatever this virtualenv holds.
    import importlib.util

    real_find_spec = importlib.util.find_spec
    hidden = {"knowsphere_memory", "knowsphere_toolrunner"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in hidden else real_find_spec(name, *a)
    )
    config = StackConfig.with_free_ports(data_dir=tmp_path / "data", services=["memory", "toolrunner"])
    with pytest.raises(StackStartError) as raised:
        Stack(config).start()
    assert raised.value.component == "memory"
    assert "knowsphere_memory is not importable" in str(raised.value)
    assert "knowsphere_toolrunner is not importable" in str(raised.value)
    assert "KS_STACK_SERVICES" in str(raised.value)
    assert port_is_free(config.nats_port)
    assert RunDir(config.run_dir).pid_names() == []


def test_start_error_names_the_component_and_carries_its_log(tmp_path: Path) -> None:
    config = StackConfig.with_free_ports(
        data_dir=tmp_path / "data",
        services=["toolrunner"],
        nats_enabled=False,
        temporal_enabled=False,
        service_command={
            "toolrunner": ["python3", "-c", "print('sandbox image missing'); raise SystemExit(1)"]
        },
        restart_backoff_initial=0.05,
        restart_max_crashes=2,
    )
    stack = Stack(config)
    with pytest.raises(StackStartError) as raised:
        stack.start()
    assert raised.value.component == "toolrunner"
    assert "sandbox image missing" in raised.value.log_tail
    assert raised.value.log_path == config.log_path("toolrunner")
    assert RunDir(config.run_dir).pid_names() == []
