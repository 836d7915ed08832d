"""Mutual TLS between services: the ``KS_TLS_*`` settings, the same variables for every service.

With ``KS_TLS_CERT_FILE``, ``KS_TLS_KEY_FILE`` and ``KS_TLS_CA_FILE`` set (PEM files), every gRPC server
of the process accepts only TLS connections whose client presents a certificate signed by the CA in
``KS_TLS_CA_FILE``, and every channel it opens (:func:`~knowsphere_runtime.rpc.channel.open_channel`)
presents the process's own certificate and trusts only servers whose certificate that CA signed. With
none of them set, servers and channels are plaintext. A partial set, an unreadable file, a key that
does not belong to the certificate, or a certificate outside its validity period stops the service at
start with a message naming the variable.

A server's certificate must name the addresses its callers dial (Subject Alternative Names): the
service's DNS name (``retrieval``), and ``localhost``/``127.0.0.1`` for the calls a process makes to
itself (the gateway checks its own gRPC port) and for the local stack. No server-name override
exists: a certificate without the right name is the thing to fix.

The files are read once, when the service starts (:func:`install_tls_from_environment`, called by the
service runner): a renewed certificate takes effect when the service restarts.

``KS_TLS_HEALTH_PORT`` (only with TLS) adds a plaintext port on the same host that serves
``grpc.health.v1`` and nothing else, for probes that cannot present a certificate (the kubelet's native
gRPC probes); any other method there answers UNIMPLEMENTED.

mTLS proves which deployment a peer process belongs to; who a call is made for is still carried and
checked by the signed identity token (:mod:`knowsphere_runtime.identity_token`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import grpc
import structlog
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

log = structlog.get_logger(__name__)

ENV_PREFIX = "KS_TLS_"
FILE_FIELDS = ("cert_file", "key_file", "ca_file")


class TlsConfigError(Exception):
    """The ``KS_TLS_*`` settings are incomplete or name a file that cannot be used; the message says
    which variable."""


class TlsSettings(BaseSettings):
    """``KS_TLS_*``: this process's certificate and key, the CA of its peers, the plaintext health port."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    cert_file: Path | None = Field(
        default=None,
        description="PEM certificate (chain) this process presents, as a server and as a client",
    )
    key_file: Path | None = Field(default=None, description="PEM private key of the certificate")
    ca_file: Path | None = Field(
        default=None, description="PEM CA certificate(s) that sign every peer's certificate"
    )
    health_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="with TLS: a plaintext port serving grpc.health.v1 alone (probes without a certificate)",
    )

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable of the field ``name``."""
        if name not in cls.model_fields:
            raise KeyError(name)
        return f"{ENV_PREFIX}{name.upper()}"


@dataclass(frozen=True)
class MutualTls:
    """This process's certificate and key and the CA that signs its peers', read once at start."""

    certificate_chain: bytes
    private_key: bytes = field(repr=False)
    root_certificates: bytes
    health_port: int | None = None
    """A plaintext health-only port beside each server (0: any free port); ``None``: none."""

    @classmethod
    def from_files(
        cls, cert_file: Path, key_file: Path, ca_file: Path, *, health_port: int | None = None
    ) -> MutualTls:
        """Read and check the three PEM files; :class:`TlsConfigError` names the one that is wrong."""
        chain_pem = _read(cert_file, "cert_file")
        key_pem = _read(key_file, "key_file")
        ca_pem = _read(ca_file, "ca_file")
        chain = _certificates(chain_pem, cert_file, "cert_file")
        roots = _certificates(ca_pem, ca_file, "ca_file")
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as error:
            raise TlsConfigError(
                f"{TlsSettings.variable('key_file')}={key_file} holds no unencrypted PEM private key: {error}"
            ) from None
        spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        if key.public_key().public_bytes(*spki) != chain[0].public_key().public_bytes(*spki):
            raise TlsConfigError(
                f"{TlsSettings.variable('key_file')}={key_file} is not the key of the certificate in "
                f"{TlsSettings.variable('cert_file')}={cert_file}"
            )
        for certificates, path, name in ((chain, cert_file, "cert_file"), (roots, ca_file, "ca_file")):
            _check_validity(certificates, path, name)
        return cls(chain_pem, key_pem, ca_pem, health_port=health_port)

    def server_credentials(self) -> grpc.ServerCredentials:
        """Server side: present the certificate, require a client certificate signed by the CA."""
        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate_chain)],
            root_certificates=self.root_certificates,
            require_client_auth=True,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side: trust only servers the CA signed, present the certificate."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise TlsConfigError(
            f"{TlsSettings.variable(name)}={path}: cannot read it: {error.strerror or error}"
        ) from None


def _certificates(pem: bytes, path: Path, name: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise TlsConfigError(f"{TlsSettings.variable(name)}={path} holds no PEM certificate") from None


def _check_validity(certificates: list[x509.Certificate], path: Path, name: str) -> None:
    now = datetime.now(UTC)
    for certificate in certificates:
        subject = certificate.subject.rfc4514_string()
        if certificate.not_valid_after_utc <= now:
            raise TlsConfigError(
                f"{TlsSettings.variable(name)}={path}: the certificate {subject!r} expired on "
                f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
            )
        if certificate.not_valid_before_utc > now:
            raise TlsConfigError(
                f"{TlsSettings.variable(name)}={path}: the certificate {subject!r} is not valid before "
                f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
            )


def load_tls(settings: TlsSettings) -> MutualTls | None:
    """The mutual-TLS settings ``settings`` describe; ``None`` when none of the files is set."""
    files = {name: getattr(settings, name) for name in FILE_FIELDS}
    missing = [TlsSettings.variable(name) for name, path in files.items() if path is None]
    if len(missing) == len(FILE_FIELDS):
        if settings.health_port is not None:
            raise TlsConfigError(
                f"{TlsSettings.variable('health_port')} is set but TLS is not: the plaintext health port "
                f"exists only beside a TLS port ({', '.join(missing)})"
            )
        return None
    if missing:
        raise TlsConfigError(
            "mutual TLS needs all three of "
            + ", ".join(TlsSettings.variable(name) for name in FILE_FIELDS)
            + f"; not set: {', '.join(missing)}"
        )
    return MutualTls.from_files(
        files["cert_file"], files["key_file"], files["ca_file"], health_port=settings.health_port
    )


class _Installed(enum.Enum):
    TLS = "the process's installed TLS settings"


INSTALLED: Final = _Installed.TLS
"""Default of the ``tls`` argument of servers and channels: whatever the process installed."""

TlsChoice = MutualTls | None | Literal[_Installed.TLS]

_installed: MutualTls | None = None


def install_tls(tls: MutualTls | None) -> None:
    """Make ``tls`` the process's (the service runner does it once at start; ``None``: plaintext)."""
    global _installed
    _installed = tls


def installed_tls() -> MutualTls | None:
    return _installed


def resolve_tls(choice: TlsChoice) -> MutualTls | None:
    """``choice`` itself, or the process's installed settings for :data:`INSTALLED`."""
    return _installed if isinstance(choice, _Installed) else choice


def install_tls_from_environment(settings: TlsSettings | None = None) -> MutualTls | None:
    """Install the process's mutual TLS from ``KS_TLS_*`` (called by the service runner)."""
    tls = load_tls(settings or TlsSettings())
    install_tls(tls)
    if tls is not None:
        log.info("mutual TLS on for every gRPC server and channel", health_port=tls.health_port)
    return tls
