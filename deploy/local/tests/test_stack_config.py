"""Configuration and the wiring contract handed to each service."""

from __future__ import annotations

import importlib
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from knowsphere_stack.components import NATS_CLIENTS, build_components, ensure_master_key
from knowsphere_stack.config import SERVICE_NAMES, StackConfig

pytestmark = pytest.mark.usefixtures("clean_env")

K8S_CONFIG_ENV = Path(__file__).resolve().parents[2] / "k8s" / "base" / "config.env"


def test_defaults_stay_clear_of_standard_ports_and_data_dir_is_absolute() -> None:
    config = StackConfig()
    assert config.data_dir == Path.cwd() / ".data"
    assert (config.nats_port, config.nats_monitor_port) == (4322, 8322)
    assert (config.temporal_port, config.temporal_ui_port) == (7333, 8333)
    assert (config.temporal_http_port, config.temporal_metrics_port) == (7343, 7344)
    assert [config.grpc_port(name) for name in SERVICE_NAMES] == [7416, 7412, 7414, 7415, 7413, 7411, 7410]
    assert config.gateway_http_port == 8780
    assert (config.health_timeout, config.stop_grace) == (120, 20)
    assert config.services == list(SERVICE_NAMES)


def test_environment_and_dotenv_file_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    Path(".env").write_text("KS_STACK_NATS_PORT=5999\nKS_STACK_DATA_DIR=state\nOPENAI_API_KEY=unrelated\n")
    monkeypatch.setenv("KS_STACK_SERVICES", "gateway, retrieval")
    monkeypatch.setenv("KS_STACK_STOP_GRACE", "3")
    config = StackConfig()
    assert config.nats_port == 5999
    assert config.data_dir == Path.cwd() / "state"
    assert config.services == ["retrieval", "gateway"]  # always in start order
    assert config.stop_grace == 3
    assert StackConfig.env_var("nats_port") == "KS_STACK_NATS_PORT"


def test_unknown_service_is_rejected_with_the_known_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KS_STACK_SERVICES", "gateway,search")
    with pytest.raises(ValidationError) as raised:
        StackConfig()
    assert "search" in str(raised.value) and "modelhub" in str(raised.value)


def test_with_free_ports_gives_distinct_ports(tmp_path: Path) -> None:
    config = StackConfig.with_free_ports(data_dir=tmp_path, services=["gateway"], extra_env={"X": "1"})
    ports = [getattr(config, name) for name in StackConfig.port_fields()]
    assert len(set(ports)) == len(ports) == 15
    assert 4322 not in ports and 7410 not in ports
    assert config.data_dir == tmp_path and config.services == ["gateway"] and config.extra_env == {"X": "1"}


def _envs(config: StackConfig) -> dict[str, dict[str, str]]:
    return {spec.name: spec.env for spec in build_components(config)}


def test_each_service_gets_exactly_its_wiring(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, ingestion_worker=True)
    envs = _envs(config)
    assert list(envs) == ["nats", "temporal", *SERVICE_NAMES[:5], "ingestion-worker", *SERVICE_NAMES[5:]]
    assert envs["nats"] == {} and envs["temporal"] == {}

    gateway = envs["gateway"]
    assert gateway == {
        "KS_GATEWAY_GRPC_HOST": "127.0.0.1",
        "KS_GATEWAY_GRPC_PORT": "7410",
        "KS_GATEWAY_DATA_DIR": str(tmp_path / "gateway"),
        "OTEL_SERVICE_NAME": "gateway",
        "KS_GATEWAY_NATS_URL": "nats://127.0.0.1:4322",
        "KS_GATEWAY_CONVERSATION_ADDR": "127.0.0.1:7411",
        "KS_GATEWAY_RETRIEVAL_ADDR": "127.0.0.1:7412",
        "KS_GATEWAY_INGESTION_ADDR": "127.0.0.1:7413",
        "KS_GATEWAY_MEMORY_ADDR": "127.0.0.1:7414",
        "KS_GATEWAY_TOOLRUNNER_ADDR": "127.0.0.1:7415",
        "KS_GATEWAY_MODELHUB_ADDR": "127.0.0.1:7416",
        "KS_GATEWAY_HTTP_HOST": "127.0.0.1",
        "KS_GATEWAY_HTTP_PORT": "8780",
        "KS_GATEWAY_LOCAL_MODE": "true",
        "KS_IDENTITY_SIGNING_KEY_FILE": str(tmp_path / "secrets" / "identity" / "gateway.key"),
        "KS_IDENTITY_TRUSTED_KEYS_DIR": str(tmp_path / "secrets" / "identity" / "trusted"),
        "KS_NATS_NKEY_SEED_FILE": str(tmp_path / "secrets" / "nats" / "gateway.nk"),
        "MASTER_KEY": ensure_master_key(tmp_path),
    }
    # The services that keep tenants' secrets share the one master key; the others never see it.
    assert {name for name, env in envs.items() if "MASTER_KEY" in env} == {
        "gateway",
        "conversation",
        "modelhub",
    }
    assert sorted(k for k in envs["conversation"] if k.endswith("_ADDR")) == [
        "KS_CONVERSATION_MEMORY_ADDR",
        "KS_CONVERSATION_MODELHUB_ADDR",
        "KS_CONVERSATION_RETRIEVAL_ADDR",
        "KS_CONVERSATION_TOOLRUNNER_ADDR",
    ]
    ingestion = envs["ingestion"]
    assert ingestion["KS_INGESTION_TEMPORAL_ADDRESS"] == "127.0.0.1:7333"
    assert ingestion["KS_INGESTION_TEMPORAL_NAMESPACE"] == "default"
    assert sorted(k for k in ingestion if k.endswith("_ADDR")) == [
        "KS_INGESTION_MODELHUB_ADDR",
        "KS_INGESTION_RETRIEVAL_ADDR",
    ]
    # Every service's key is trusted by every other.
    trusted = sorted(p.name for p in (tmp_path / "secrets" / "identity" / "trusted").iterdir())
    assert trusted == sorted(f"{name}.pub" for name in [*SERVICE_NAMES, "ingestion-worker", "local-client"])
    for name in ("conversation", "memory", "modelhub", "retrieval"):
        assert envs[name][f"KS_{name.upper()}_NATS_URL"] == "nats://127.0.0.1:4322"
    for name in ("toolrunner",):
        assert not any(k.endswith("_NATS_URL") for k in envs[name])
    for name in ("modelhub", "retrieval", "toolrunner"):
        assert envs[name]["OTEL_SERVICE_NAME"] == name
    assert [k for k in envs["modelhub"] if k.endswith("_ADDR")] == []
    assert {k: v for k, v in envs["toolrunner"].items() if k.endswith("_ADDR")} == {
        "KS_TOOLRUNNER_RETRIEVAL_ADDR": "127.0.0.1:7412",
        "KS_TOOLRUNNER_MODELHUB_ADDR": "127.0.0.1:7416",
    }
    assert {k: v for k, v in envs["retrieval"].items() if k.endswith("_ADDR")} == {
        "KS_RETRIEVAL_MODELHUB_ADDR": "127.0.0.1:7416"
    }
    assert {k: v for k, v in envs["memory"].items() if k.endswith("_ADDR")} == {
        "KS_MEMORY_MODELHUB_ADDR": "127.0.0.1:7416"
    }


def test_the_services_on_the_bus_start_after_nats(tmp_path: Path) -> None:
    specs = build_components(StackConfig(data_dir=tmp_path, ingestion_worker=False))
    on_bus = {spec.name for spec in specs if "nats" in spec.depends_on}
    assert on_bus == {"gateway", "conversation", "ingestion", "memory", "modelhub", "retrieval"}
    without_nats = build_components(StackConfig(data_dir=tmp_path, nats_enabled=False))
    assert not any("nats" in spec.depends_on for spec in without_nats)


def test_nats_goes_to_exactly_the_services_whose_settings_read_a_nats_url() -> None:
    # The services' settings are the contract: a NATS URL given to a service that has no field for it
    # is ignored, and one left out of a service that requires it stops the service at start.
    readers = {
        name
        for name in SERVICE_NAMES
        if "nats_url" in importlib.import_module(f"knowsphere_{name}.settings").Settings.model_fields
    }
    assert readers == NATS_CLIENTS
    keys = [line.partition("=")[0] for line in K8S_CONFIG_ENV.read_text().splitlines()]
    in_k8s = {
        k.removeprefix("KS_").removesuffix("_NATS_URL").lower() for k in keys if k.endswith("_NATS_URL")
    }
    assert in_k8s == readers


def test_master_key_is_generated_once_private_and_reused(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, services=["modelhub"])
    first = _envs(config)["modelhub"]["MASTER_KEY"]
    key_file = tmp_path / "secrets" / "master.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(__import__("base64").urlsafe_b64decode(first)) == 32
    assert _envs(config)["modelhub"]["MASTER_KEY"] == first == ensure_master_key(tmp_path)


def test_master_key_from_the_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_KEY", "from-env")
    envs = _envs(StackConfig(data_dir=tmp_path, services=["modelhub"]))
    assert "MASTER_KEY" not in envs["modelhub"]  # inherited as is
    assert not (tmp_path / "secrets" / "master.key").exists()


def test_the_ingestion_worker_runs_beside_ingestion_with_its_wiring(tmp_path: Path) -> None:
    envs = _envs(StackConfig(data_dir=tmp_path))
    worker, api = envs["ingestion-worker"], envs["ingestion"]
    assert worker["OTEL_SERVICE_NAME"] == "ingestion-worker"
    # It signs with a key of its own ...
    assert worker["KS_IDENTITY_SIGNING_KEY_FILE"].endswith("/ingestion-worker.key")
    # ... and its own NATS key (with the worker's permissions) ...
    assert worker["KS_NATS_NKEY_SEED_FILE"].endswith("/ingestion-worker.nk")
    # ... and has the same database, object store, peers and Temporal as the API it works for.
    own = ("OTEL_SERVICE_NAME", "KS_IDENTITY_SIGNING_KEY_FILE", "KS_NATS_NKEY_SEED_FILE")
    assert {k: v for k, v in worker.items() if k not in own} == {k: v for k, v in api.items() if k not in own}
    assert "ingestion-worker" not in _envs(StackConfig(data_dir=tmp_path, ingestion_worker=False))
    subset = _envs(StackConfig(data_dir=tmp_path, services=["retrieval"], nats_enabled=False))
    assert list(subset) == ["temporal", "retrieval"]
    # Without NATS, a service whose bus is optional is not pointed at one that never starts.
    assert "KS_RETRIEVAL_NATS_URL" not in subset["retrieval"]


def test_a_misspelt_field_in_code_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="servces"):
        StackConfig(data_dir=tmp_path, servces=["gateway"])
