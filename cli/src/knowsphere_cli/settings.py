"""Where ``ks`` finds the gateway and its token, and the config file that remembers them.

Each value is taken from, in order: the command line (``--url``, ``--token``), the environment
(``KS_URL``, ``KS_TOKEN``), the config file (``$KS_CONFIG``, else ``$XDG_CONFIG_HOME/knowsphere/config.toml``,
else ``~/.config/knowsphere/config.toml``), and the default (:data:`DEFAULT_URL`, no token — what a
gateway in local single-user mode, as ``make up`` starts it, expects).

The config file is TOML with top-level keys ``url`` and ``token``. It holds a secret, so it is written
readable by its owner only (mode 0600, in a folder of mode 0700), and replaced as a whole, never left
half-written.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8780"
URL_ENV = "KS_URL"
TOKEN_ENV = "KS_TOKEN"
CONFIG_ENV = "KS_CONFIG"
CONFIG_KEYS = ("url", "token")
CONFIG_FILE_MODE = 0o600
CONFIG_DIR_MODE = 0o700

# How long a plain request may take, and the longest silence of a stream (answers, progress).
REQUEST_TIMEOUT_SECONDS = 30.0
STREAM_READ_TIMEOUT_SECONDS = 600.0


class ConfigError(Exception):
    """The config file or a value for it is unusable; the message names the file or the key."""


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "knowsphere" / "config.toml"


def read_config(path: Path) -> dict[str, str]:
    """The file's known keys; an absent file is empty, an unreadable or malformed one an error."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read the config file {path}: {error.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"the config file {path} is not valid TOML: {error}") from None
    values: dict[str, str] = {}
    for key in CONFIG_KEYS:
        if key in data:
            if not isinstance(data[key], str):
                raise ConfigError(f"the config file {path}: {key} must be a string")
            values[key] = data[key]
    return values


def check_key(key: str) -> str:
    if key not in CONFIG_KEYS:
        raise ConfigError(f"unknown config key {key!r}; known keys: {', '.join(CONFIG_KEYS)}")
    return key


def check_value(key: str, value: str) -> str:
    """``value`` for ``key`` as it will be stored; an unknown key or a malformed URL is an error."""
    check_key(key)
    value = value.strip()
    if key == "url":
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"url: {value!r} is not an http(s) URL, e.g. {DEFAULT_URL}")
        value = value.rstrip("/")
    return value


def write_config(path: Path, values: dict[str, str]) -> None:
    """Replaces the file with ``values`` (mode 0600), through a temporary file in the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=CONFIG_DIR_MODE)
    # json.dumps of a str is a valid TOML basic string (the same escapes, \\uXXXX included).
    text = "".join(f"{key} = {json.dumps(values[key])}\n" for key in CONFIG_KEYS if values.get(key))
    fd, temporary = tempfile.mkstemp(prefix=".config-", dir=path.parent)
    try:
        os.fchmod(fd, CONFIG_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None
    config_file: Path

    @classmethod
    def resolve(
        cls, url: str | None = None, token: str | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """The settings from the command line's ``url``/``token``, the environment and the config file."""
        env = os.environ if environ is None else environ
        path = config_path(env)
        stored = read_config(path)
        chosen_url = url or env.get(URL_ENV) or stored.get("url") or DEFAULT_URL
        try:
            chosen_url = check_value("url", chosen_url)
        except ConfigError as error:
            source = "--url" if url else URL_ENV if env.get(URL_ENV) else str(path)
            raise ConfigError(f"{source}: {error}") from None
        chosen_token = token or env.get(TOKEN_ENV) or stored.get("token") or None
        return cls(url=chosen_url, token=chosen_token.strip() if chosen_token else None, config_file=path)


def masked(token: str) -> str:
    """A token as shown back to its owner: the prefix and the last four characters."""
    return f"{token[:3]}…{token[-4:]}" if len(token) > 12 else "…"


__all__ = [
    "CONFIG_KEYS",
    "DEFAULT_URL",
    "REQUEST_TIMEOUT_SECONDS",
    "STREAM_READ_TIMEOUT_SECONDS",
    "ConfigError",
    "Settings",
    "check_key",
    "check_value",
    "config_path",
    "masked",
    "read_config",
    "write_config",
]
