"""The stack's NATS admits each service's own nkey only (knowsphere_stack.nats_auth)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from knowsphere_runtime.nats_permissions import NATS_PERMISSIONS, public_key
from knowsphere_stack import StackConfig
from knowsphere_stack.components import LOCAL_CLIENT_ISSUER, NATS_CLIENTS, build_components
from knowsphere_stack.config import INGESTION_WORKER


def test_every_identity_the_stack_hands_out_has_permissions() -> None:
    assert {*NATS_CLIENTS, INGESTION_WORKER, LOCAL_CLIENT_ISSUER} == set(NATS_PERMISSIONS)


def test_nats_starts_from_a_configuration_admitting_each_services_key(tmp_path: Path) -> None:
    config = StackConfig(data_dir=tmp_path, ingestion_worker=True)
    specs = {spec.name: spec for spec in build_components(config)}
    argv = specs["nats"].argv
    assert argv[1:3] == ["-c", str(tmp_path / "nats" / "nats-server.conf")]
    text = Path(argv[2]).read_text()
    assert f"port: {config.nats_port}\n" in text and f'http: "127.0.0.1:{config.nats_monitor_port}"' in text
    assert f'store_dir: "{tmp_path / "nats"}"' in text
    checked = subprocess.run([argv[0], *argv[1:], "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr + checked.stdout

    seeds = tmp_path / "secrets" / "nats"
    assert stat.S_IMODE(seeds.stat().st_mode) == 0o700
    for identity in NATS_PERMISSIONS:
        seed = seeds / f"{identity}.nk"
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600
        assert f'# {identity}\n    {{\n      nkey: "{public_key(seed.read_bytes())}"' in text
    for name in (*NATS_CLIENTS, INGESTION_WORKER):
        assert specs[name].env["KS_NATS_NKEY_SEED_FILE"] == str(seeds / f"{name}.nk")
    assert "KS_NATS_NKEY_SEED_FILE" not in specs["toolrunner"].env

    # Generated once: the next start admits the same keys.
    before = {path.name: path.read_bytes() for path in seeds.iterdir()}
    build_components(config)
    assert {path.name: path.read_bytes() for path in seeds.iterdir()} == before


def test_without_authentication_nats_starts_as_before(tmp_path: Path) -> None:
    specs = {spec.name: spec for spec in build_components(StackConfig(data_dir=tmp_path, nats_auth=False))}
    assert "-c" not in specs["nats"].argv and "--jetstream" in specs["nats"].argv
    assert not any("KS_NATS_NKEY_SEED_FILE" in spec.env for spec in specs.values())
    assert not (tmp_path / "secrets" / "nats").exists()
