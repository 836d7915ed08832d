"""Where ``ks`` takes its URL and token from, and the config file it writes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from knowsphere_cli.settings import DEFAULT_URL, ConfigError, Settings, read_config, write_config


def env(tmp_path: Path, **values: str) -> dict[str, str]:
    return {"KS_CONFIG": str(tmp_path / "config.toml"), **values}


def test_nothing_set_means_the_local_gateway_and_no_token(tmp_path: Path) -> None:
    settings = Settings.resolve(environ=env(tmp_path))
    assert (settings.url, settings.token) == (DEFAULT_URL, None)


def test_command_line_beats_environment_beats_config_file(tmp_path: Path) -> None:
    write_config(tmp_path / "config.toml", {"url": "http://file:1", "token": "ks_file"})
    assert Settings.resolve(environ=env(tmp_path)).token == "ks_file"
    from_env = Settings.resolve(environ=env(tmp_path, KS_URL="http://env:2/", KS_TOKEN="ks_env"))
    assert (from_env.url, from_env.token) == ("http://env:2", "ks_env")
    given = Settings.resolve(url="https://cli:3", token="ks_cli", environ=env(tmp_path, KS_TOKEN="ks_env"))
    assert (given.url, given.token) == ("https://cli:3", "ks_cli")


def test_the_config_file_is_owner_only_and_round_trips_any_text(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "config.toml"
    tricky = 'ks_"quoted"\\back\u00e9'
    write_config(path, {"url": "http://gw:8780", "token": tricky})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_config(path) == {"url": "http://gw:8780", "token": tricky}
    write_config(path, {"url": "http://gw:8780"})
    assert read_config(path) == {"url": "http://gw:8780"}
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no temporary file left


def test_a_bad_url_or_file_is_an_error_naming_where_it_came_from(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KS_URL: url: 'gateway:8780' is not an http"):
        Settings.resolve(environ=env(tmp_path, KS_URL="gateway:8780"))
    (tmp_path / "config.toml").write_text("token = [1]\n")
    with pytest.raises(ConfigError, match="token must be a string"):
        Settings.resolve(environ=env(tmp_path))
    (tmp_path / "config.toml").write_text("token = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.resolve(environ=env(tmp_path))
