"""Settings fail fast and name the variable that is wrong."""

import pytest
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings, SettingsError, load_settings


class DemoSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_DEMO_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7499, ge=1, le=65535)
    nats_url: str


def test_missing_required_value_names_the_variable(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("KS_DEMO_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KS_DEMO_NATS_URL", raising=False)
    with pytest.raises(SettingsError) as raised:
        load_settings(DemoSettings)
    assert raised.value.code == 2
    assert "KS_DEMO_NATS_URL is required but not set" in str(raised.value)
    assert "KS_DEMO_NATS_URL" in capsys.readouterr().err


def test_malformed_value_names_variable_and_value(monkeypatch, tmp_path):
    monkeypatch.setenv("KS_DEMO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KS_DEMO_NATS_URL", "nats://x:1")
    monkeypatch.setenv("KS_DEMO_GRPC_PORT", "70000")
    with pytest.raises(SettingsError) as raised:
        load_settings(DemoSettings)
    assert "KS_DEMO_GRPC_PORT='70000'" in str(raised.value)
    assert "65535" in str(raised.value)


def test_values_come_from_prefixed_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KS_DEMO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KS_DEMO_NATS_URL", "nats://127.0.0.1:4322")
    monkeypatch.setenv("KS_DEMO_GRPC_HOST", "0.0.0.0")
    monkeypatch.setenv("NATS_URL", "nats://wrong:1")
    settings = load_settings(DemoSettings)
    assert settings.nats_url == "nats://127.0.0.1:4322"
    assert settings.grpc_bind == "0.0.0.0:7499"
    assert settings.data_dir == tmp_path


def test_secret_values_are_not_echoed_in_errors(monkeypatch, tmp_path):
    from pydantic import AliasChoices, SecretStr

    class KeyedSettings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="KS_DEMO_", extra="ignore", frozen=True)

        grpc_port: int = 7499
        master_key: SecretStr = Field(validation_alias=AliasChoices("MASTER_KEY"), min_length=16)

    monkeypatch.setenv("KS_DEMO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MASTER_KEY", "short-secret")
    with pytest.raises(SettingsError) as raised:
        load_settings(KeyedSettings)
    assert "MASTER_KEY (value hidden)" in str(raised.value)
    assert "short-secret" not in str(raised.value)
    monkeypatch.delenv("MASTER_KEY")
    with pytest.raises(SettingsError, match="MASTER_KEY is required but not set"):
        load_settings(KeyedSettings)


def test_a_check_across_fields_names_the_problem_without_echoing_any_setting(monkeypatch, tmp_path):
    from pydantic import SecretStr, model_validator

    class PairedSettings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="KS_DEMO_", extra="ignore", frozen=True)

        grpc_port: int = 7499
        api_key: SecretStr | None = None
        base_url: str = ""

        @model_validator(mode="after")
        def _key_needs_url(self) -> "PairedSettings":
            if self.api_key is not None and not self.base_url:
                raise ValueError("KS_DEMO_API_KEY is set but KS_DEMO_BASE_URL is empty")
            return self

    monkeypatch.setenv("KS_DEMO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KS_DEMO_API_KEY", "sk-live-do-not-print-0123456789")
    with pytest.raises(SettingsError) as raised:
        load_settings(PairedSettings)
    message = str(raised.value)
    assert "KS_DEMO_API_KEY is set but KS_DEMO_BASE_URL is empty" in message
    assert "sk-live-do-not-print" not in message
    assert str(tmp_path) not in message  # no setting's value is echoed, secret or not
