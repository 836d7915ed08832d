"""The guard connects to the checked address but TLS still verifies the certificate for the name."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from knowsphere_egress import EgressClient, EgressError, EgressErrorCode, EgressPolicy, StaticResolver

x509 = pytest.importorskip("cryptography.x509", reason="cryptography is needed to make a test certificate")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

NAME = "secure.example.com"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[int, Path, list[str]]]:
    cert_path, key_path = make_certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    server_names: list[str] = []
    context.sni_callback = lambda sock, name, ctx: server_names.append(name or "")  # type: ignore[func-returns-value]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], cert_path, server_names
    finally:
        server.close()
        await server.wait_closed()


async def test_tls_uses_the_name_for_sni_and_verification(tls_server: tuple[int, Path, list[str]]) -> None:
    port, cert_path, server_names = tls_server
    policy = EgressPolicy(allow_networks=("127.0.0.1/32",), allowed_ports=frozenset({port}))  # type: ignore[arg-type]
    resolver = StaticResolver({NAME: ["127.0.0.1"], "impostor.example.com": ["127.0.0.1"]})
    trust = ssl.create_default_context(cafile=str(cert_path))
    async with EgressClient(policy, resolver=resolver, verify=trust) as egress:
        response = await egress.fetch(f"https://{NAME}:{port}/")
        assert response.text == "secure"
        assert server_names == [NAME]
        # Same address, another name: the certificate does not match, so nothing is fetched.
        with pytest.raises(EgressError) as caught:
            await egress.fetch(f"https://impostor.example.com:{port}/")
    assert caught.value.code == EgressErrorCode.UNREACHABLE
