"""How a process proves who it is to NATS: an nkey seed or a credentials file, from ``KS_NATS_*``.

Every NATS connection of the platform (:func:`knowsphere_runtime.bus.build_broker`) authenticates with
:class:`NatsAuthSettings`, read from the same variables in every service and the ingestion worker:

- ``KS_NATS_NKEY_SEED_FILE``: a file holding this process's nkey seed (``SU…``). The server's
  ``authorization`` block lists the matching public key with the permissions of
  :mod:`knowsphere_runtime.nats_permissions`; ``ks-stack`` writes one seed per service.
- ``KS_NATS_CREDS_FILE``: a ``.creds`` file (user JWT and seed) for a cluster in operator/JWT mode,
  where the permissions travel in the user JWT.

At most one of them; neither means no authentication (a server that asks for none). A file that is
missing, unreadable or not what it should be stops the process at start with a message naming the
variable, not at the first connection attempt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faststream.nats.security import NatsCredentials, NatsNKey, NatsSecurity
from faststream.security import BaseSecurity
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from knowsphere_runtime.nats_permissions import inbox_prefix, public_key

NKEY_SEED_FILE_ENV = "KS_NATS_NKEY_SEED_FILE"
CREDS_FILE_ENV = "KS_NATS_CREDS_FILE"
CREDS_MARKERS = ("BEGIN NATS USER JWT", "BEGIN USER NKEY SEED")
"""What a ``.creds`` file (``nsc generate creds``) holds: the user JWT, then the user's seed."""


def _readable(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None


class NatsAuthSettings(BaseSettings):
    """``KS_NATS_*``: the credentials of this process's NATS connections."""

    model_config = SettingsConfigDict(env_prefix="KS_NATS_", extra="ignore", frozen=True)

    nkey_seed_file: Path | None = Field(
        default=None, description="file with this process's nkey user seed (SU…); the server knows its key"
    )
    creds_file: Path | None = Field(
        default=None, description="a .creds file (user JWT + seed) for a NATS cluster in operator/JWT mode"
    )

    @field_validator("nkey_seed_file", mode="after")
    @classmethod
    def _seed_is_readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            seed = _readable(value)
            try:
                public_key(seed)
            except ValueError as error:
                raise ValueError(f"{value} holds no usable nkey seed: {error}") from None
        return value

    @field_validator("creds_file", mode="after")
    @classmethod
    def _creds_are_readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            text = _readable(value).decode(errors="replace")
            missing = [marker for marker in CREDS_MARKERS if marker not in text]
            if missing:
                raise ValueError(f"{value} is not a NATS .creds file (no {' and no '.join(missing)})")
        return value

    @model_validator(mode="after")
    def _at_most_one(self) -> NatsAuthSettings:
        if self.nkey_seed_file is not None and self.creds_file is not None:
            raise ValueError(f"set {NKEY_SEED_FILE_ENV} or {CREDS_FILE_ENV}, not both")
        return self

    @property
    def configured(self) -> bool:
        return self.nkey_seed_file is not None or self.creds_file is not None

    def security(self, base: BaseSecurity | None = None) -> BaseSecurity | None:
        """FastStream's security for a broker: these credentials, over ``base``'s TLS settings if given;
        ``base`` itself when no credentials are configured."""
        if not self.configured:
            return base
        tls: dict[str, Any] = {}
        if base is not None:
            tls = {"ssl_context": base.ssl_context, "use_ssl": base.use_ssl}
            if isinstance(base, NatsSecurity):
                tls |= {"tls_hostname": base.tls_hostname, "tls_handshake_first": base.tls_handshake_first}
        if self.nkey_seed_file is not None:
            return NatsNKey.from_file(self.nkey_seed_file, **tls)
        assert self.creds_file is not None
        return NatsCredentials.from_file(self.creds_file, **tls)

    def inbox_prefix(self) -> str | None:
        """The prefix of this identity's reply inboxes with an nkey, ``_INBOX.<public key>``: the server
        lets each identity subscribe only to its own inboxes (``authorization_block``), so no service
        reads the replies JetStream sends another (pulled messages, acknowledgements). None (the
        client library's ``_INBOX``) otherwise."""
        if self.nkey_seed_file is None:
            return None
        return inbox_prefix(public_key(_readable(self.nkey_seed_file)))

    def connect_options(self) -> dict[str, str]:
        """The same credentials (and inbox prefix) as ``nats.connect`` keyword arguments (a raw nats-py
        client)."""
        if self.nkey_seed_file is not None:
            return {"nkeys_seed": str(self.nkey_seed_file), "inbox_prefix": str(self.inbox_prefix())}
        if self.creds_file is not None:
            return {"user_credentials": str(self.creds_file)}
        return {}


def pull_inbox_prefix() -> bytes:
    """The ``inbox_prefix`` of a FastStream pull subscriber of this process: its identity's own inboxes
    (:meth:`NatsAuthSettings.inbox_prefix`, with the separating dot). FastStream gives pull subscribers
    the fixed ``_INBOX.`` otherwise, which a server narrowing each identity to its own inboxes refuses."""
    from knowsphere_runtime.settings import load_settings

    prefix = load_settings(NatsAuthSettings).inbox_prefix() or "_INBOX"
    return f"{prefix}.".encode()


__all__ = ["CREDS_FILE_ENV", "NKEY_SEED_FILE_ENV", "NatsAuthSettings", "pull_inbox_prefix"]
