"""A private CA and one certificate per process, for mutual TLS without a certificate manager.

``python -m knowsphere_runtime.rpc.certificates generate DIR NAME…`` writes ``ca.crt``/``ca.key`` and,
per name, ``<name>.crt``/``<name>.key`` (keys mode 0600): ECDSA P-256, usable both as a server and as a
client certificate, with the Subject Alternative Names ``<name>``, ``localhost`` and ``127.0.0.1`` (more
with ``--dns``/``--ip``). ``ks-stack`` does it for ``make up`` with ``KS_STACK_TLS=true``; a cluster
uses cert-manager instead (deploy/k8s/components/mtls).

Files already there are kept while they are still good: the CA while it is valid for more than
:data:`RENEW_WITHIN_DAYS`, a certificate while, in addition, the current CA signed it and it carries
the same names. Anything else is written anew (a new CA re-issues every certificate).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
CERT_SUFFIX = ".crt"
KEY_SUFFIX = ".key"
CA_VALIDITY_DAYS = 3650
CERTIFICATE_VALIDITY_DAYS = 397
RENEW_WITHIN_DAYS = 30
"""A CA or certificate that expires within this many days is replaced when files are generated."""
DEFAULT_DNS_NAMES: tuple[str, ...] = ("localhost",)
DEFAULT_IP_ADDRESSES: tuple[str, ...] = ("127.0.0.1",)
ORGANIZATION = "KnowSphere"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


class CertificateError(ValueError):
    """A name or address that cannot go into a certificate."""


def _now() -> datetime:
    return datetime.now(UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    os.replace(partial, path)


def _write_certificate(path: Path, certificate: x509.Certificate) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    os.replace(partial, path)


def _load(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if certificate.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        return None
    return certificate, key


def _lasts(certificate: x509.Certificate, now: datetime) -> bool:
    return certificate.not_valid_after_utc > now + timedelta(days=RENEW_WITHIN_DAYS)


def _alternative_names(
    name: str, dns_names: Sequence[str], ip_addresses: Sequence[str]
) -> x509.SubjectAlternativeName:
    dns = list(dict.fromkeys([name, *dns_names]))
    try:
        ips = [ipaddress.ip_address(address) for address in dict.fromkeys(ip_addresses)]
    except ValueError as error:
        raise CertificateError(str(error)) from None
    return x509.SubjectAlternativeName([*(x509.DNSName(d) for d in dns), *(x509.IPAddress(i) for i in ips)])


def _ensure_ca(folder: Path, now: datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, bool]:
    """The CA in ``folder``; a new one when missing or close to expiry (third value: it is new)."""
    cert_path, key_path = folder / CA_CERT_FILE, folder / CA_KEY_FILE
    loaded = _load(cert_path, key_path)
    if loaded is not None and _lasts(loaded[0], now):
        return loaded[0], loaded[1], False
    key = _new_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{ORGANIZATION} private CA"),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    _write_certificate(cert_path, certificate)
    return certificate, key, True


def _issued_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _current(
    certificate: x509.Certificate, ca: x509.Certificate, names: x509.SubjectAlternativeName, now: datetime
) -> bool:
    try:
        carried = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return _lasts(certificate, now) and _issued_by(certificate, ca) and set(carried) == set(names)


def _issue(
    name: str,
    names: x509.SubjectAlternativeName,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    now: datetime,
) -> x509.Certificate:
    not_after = min(now + timedelta(days=CERTIFICATE_VALIDITY_DAYS), ca.not_valid_after_utc)
    return (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                    x509.NameAttribute(NameOID.COMMON_NAME, name),
                ]
            )
        )
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(names, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def generate_certificates(
    folder: Path,
    names: Iterable[str],
    *,
    dns_names: Sequence[str] = DEFAULT_DNS_NAMES,
    ip_addresses: Sequence[str] = DEFAULT_IP_ADDRESSES,
) -> list[Path]:
    """Write the CA and a certificate per name into ``folder`` where missing or no longer good; the
    paths written (keys mode 0600, the folder 0700)."""
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if not _NAME.fullmatch(name) or name == CA_CERT_FILE.removesuffix(CERT_SUFFIX):
            raise CertificateError(
                f"certificate name {name!r}: letters, digits and _ . - only, at most 63, and not 'ca'"
            )
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    now = _now()
    ca, ca_key, new_ca = _ensure_ca(folder, now)
    written = [folder / CA_KEY_FILE, folder / CA_CERT_FILE] if new_ca else []
    for name in wanted:
        cert_path, key_path = folder / f"{name}{CERT_SUFFIX}", folder / f"{name}{KEY_SUFFIX}"
        alternative_names = _alternative_names(name, dns_names, ip_addresses)
        loaded = _load(cert_path, key_path)
        if loaded is not None and _current(loaded[0], ca, alternative_names, now):
            continue
        key = _new_key()
        _write_key(key_path, key)
        _write_certificate(cert_path, _issue(name, alternative_names, ca, ca_key, key, now))
        written.extend([key_path, cert_path])
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowsphere_runtime.rpc.certificates",
        description="Write a private CA (ca.crt, ca.key) and <name>.crt/<name>.key per name for mutual TLS.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    generate = sub.add_parser("generate", help="write what is missing or no longer good; keep the rest")
    generate.add_argument("folder", type=Path)
    generate.add_argument("names", nargs="+", help="one per service; each is also a DNS name of its own")
    generate.add_argument(
        "--dns",
        action="append",
        default=[],
        help=f"another DNS name for every certificate ({DEFAULT_DNS_NAMES})",
    )
    generate.add_argument(
        "--ip",
        action="append",
        default=[],
        help=f"another IP address for every certificate ({DEFAULT_IP_ADDRESSES})",
    )
    args = parser.parse_args(argv)
    try:
        written = generate_certificates(
            args.folder,
            args.names,
            dns_names=[*DEFAULT_DNS_NAMES, *args.dns],
            ip_addresses=[*DEFAULT_IP_ADDRESSES, *args.ip],
        )
    except CertificateError as error:
        print(error, file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
