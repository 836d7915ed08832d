"""Mutual TLS on the local stack (``KS_STACK_TLS=true``): a private CA and a certificate per process.

:func:`ensure_tls_certificates` writes them under ``<data>/secrets/tls`` (``StackConfig.tls_dir``) with
:mod:`knowsphere_runtime.rpc.certificates`: ``ca.crt``/``ca.key`` and ``<name>.crt``/``<name>.key`` for
every service, the ingestion worker and ``local-client`` (the tests, benchmarks and tools that call a
service directly), each valid for ``localhost`` and ``127.0.0.1``; existing ones are kept while they are
good. :func:`tls_env` is the ``KS_TLS_*`` environment of one process. The stack's own health probes
present the ``local-client`` certificate (:class:`TlsFiles`), so they check the port callers use.

Each service reads its files when it starts: certificates renewed here take effect at its next start.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from pydantic import BaseModel

if TYPE_CHECKING:
    from knowsphere_runtime.rpc.tls import MutualTls


class TlsFiles(BaseModel):
    """One process's certificate, key and the CA it trusts, as paths (a health check carrying them
    travels to the supervisor as JSON)."""

    cert_file: Path
    key_file: Path
    ca_file: Path

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client credentials read from the files now (``OSError`` when one cannot be read)."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_file.read_bytes(),
            private_key=self.key_file.read_bytes(),
            certificate_chain=self.cert_file.read_bytes(),
        )

    def load(self) -> MutualTls:
        """The files as the runtime's mutual-TLS settings (for ``open_channel(..., tls=…)``)."""
        from knowsphere_runtime.rpc.tls import MutualTls

        return MutualTls.from_files(self.cert_file, self.key_file, self.ca_file)


def ensure_tls_certificates(folder: Path, names: Sequence[str]) -> Path:
    """The CA and a certificate per name in ``folder``: missing or expiring ones are written, the
    others kept."""
    from knowsphere_runtime.rpc.certificates import generate_certificates

    generate_certificates(folder, names)
    return folder


def tls_files(folder: Path, name: str) -> TlsFiles:
    """The files of process ``name`` in a folder written by :func:`ensure_tls_certificates`."""
    from knowsphere_runtime.rpc.certificates import CA_CERT_FILE, CERT_SUFFIX, KEY_SUFFIX

    return TlsFiles(
        cert_file=folder / f"{name}{CERT_SUFFIX}",
        key_file=folder / f"{name}{KEY_SUFFIX}",
        ca_file=folder / CA_CERT_FILE,
    )


def tls_env(folder: Path, name: str) -> dict[str, str]:
    """The ``KS_TLS_*`` settings that make process ``name`` serve and call over mutual TLS."""
    from knowsphere_runtime.rpc.tls import TlsSettings

    files = tls_files(folder, name)
    return {
        TlsSettings.variable("cert_file"): str(files.cert_file),
        TlsSettings.variable("key_file"): str(files.key_file),
        TlsSettings.variable("ca_file"): str(files.ca_file),
    }
