"""NATS credentials from ``KS_NATS_*``: checked at start, used by every broker, refusals logged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from pydantic import BaseModel
from structlog.testing import capture_logs

from knowsphere_contracts.events import ChatRequested, DocumentsProgress
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.nats_auth import NatsAuthSettings
from knowsphere_runtime.nats_permissions import LOCAL_CLIENT, authorization_block, ensure_seeds, public_key
from knowsphere_runtime.settings import SettingsError, load_settings
from knowsphere_stack import free_port, start_nats
from knowsphere_stack.nats_auth import server_config


class Ping(BaseModel):
    text: str


@pytest.fixture(scope="module")
def secured_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Path]]]:
    """A nats-server admitting the gateway's and local-client's keys only, and the seeds."""
    folder = tmp_path_factory.mktemp("secured-nats")
    seeds = ensure_seeds(folder / "seeds", ["gateway", LOCAL_CLIENT])
    keys = {identity: public_key(path.read_bytes()) for identity, path in seeds.items()}
    port, monitor = free_port(), free_port()
    config = folder / "nats.conf"
    config.write_text(server_config(folder / "store", port, monitor, authorization_block(keys)))
    with start_nats(folder / "store", port, monitor, config_file=config):
        yield f"nats://127.0.0.1:{port}", seeds


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> NatsAuthSettings:
    for variable in ("KS_NATS_NKEY_SEED_FILE", "KS_NATS_CREDS_FILE"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return load_settings(NatsAuthSettings)


def test_no_credentials_means_no_authentication(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch)
    assert not settings.configured and settings.security() is None and settings.connect_options() == {}


def test_a_seed_file_that_is_missing_or_not_a_seed_stops_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(SettingsError, match="KS_NATS_NKEY_SEED_FILE") as missing:
        _settings(monkeypatch, KS_NATS_NKEY_SEED_FILE=str(tmp_path / "absent.nk"))
    assert "cannot read" in str(missing.value)
    junk = tmp_path / "junk.nk"
    junk.write_text("SUNOTASEED\n")
    with pytest.raises(SettingsError, match=r"KS_NATS_NKEY_SEED_FILE.*no usable nkey seed"):
        _settings(monkeypatch, KS_NATS_NKEY_SEED_FILE=str(junk))
    # The broker of a service reads the same settings when it is built, before any connection.
    with pytest.raises(SettingsError, match="KS_NATS_NKEY_SEED_FILE"):
        build_broker("nats://127.0.0.1:1", client_name="test")


def test_a_creds_file_must_be_one_and_only_one_credential_may_be_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seed = ensure_seeds(tmp_path / "seeds", ["gateway"])["gateway"]
    not_creds = tmp_path / "user.creds"
    not_creds.write_text("just text\n")
    with pytest.raises(SettingsError, match=r"KS_NATS_CREDS_FILE.*not a NATS \.creds file"):
        _settings(monkeypatch, KS_NATS_CREDS_FILE=str(not_creds))
    creds = tmp_path / "good.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.sig\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed.read_text().strip()}\n------END USER NKEY SEED------\n"
    )
    assert _settings(monkeypatch, KS_NATS_CREDS_FILE=str(creds)).connect_options() == {
        "user_credentials": str(creds)
    }
    with pytest.raises(SettingsError, match="not both"):
        _settings(monkeypatch, KS_NATS_CREDS_FILE=str(creds), KS_NATS_NKEY_SEED_FILE=str(seed))


async def test_a_broker_authenticates_with_its_seed_and_logs_what_it_is_refused(
    secured_nats: tuple[str, dict[str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seeds = secured_nats
    monkeypatch.setenv("KS_NATS_NKEY_SEED_FILE", str(seeds["gateway"]))
    observer = await nats.connect(url, nkeys_seed=str(seeds[LOCAL_CLIENT]))
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: nats.aio.msg.Msg) -> None:
        await heard.put(message.subject)

    await observer.subscribe(">", cb=on_message)
    await observer.flush()
    broker = build_broker(url, client_name="gateway")  # credentials from KS_NATS_NKEY_SEED_FILE
    forbidden = DocumentsProgress.subject_for("acme")
    with capture_logs() as logs:
        await broker.start()
        try:
            await broker.publish(Ping(text="not allowed"), subject=forbidden)
            await broker.publish(Ping(text="allowed"), subject=f"{ChatRequested.subject}.probe")
            received = await asyncio.wait_for(heard.get(), timeout=5)
            await asyncio.sleep(0.3)
        finally:
            await broker.stop()
            await observer.close()

    assert received == f"{ChatRequested.subject}.probe"  # the forbidden one never arrived
    refused = [entry for entry in logs if entry["event"].startswith("NATS Permissions Violation")]
    assert refused and refused[0]["log_level"] == "error" and forbidden in refused[0]["error"]


async def test_a_connection_without_credentials_is_refused(secured_nats: tuple[str, dict[str, Path]]) -> None:
    url, _ = secured_nats
    with pytest.raises(Exception, match=r"(?i)authorization violation"):
        await nats.connect(url, allow_reconnect=False, connect_timeout=5)
