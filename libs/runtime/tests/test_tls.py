"""Mutual TLS against a real gRPC server on loopback, with certificates from a real private CA.

What a caller notices: a client with a certificate of the deployment's CA gets its answer; a plaintext
client, a client without a certificate, one whose certificate another CA signed, and one that trusts
another CA are all refused; the plaintext health port answers health (the same statuses) and nothing
else; the ``KS_TLS_*`` settings refuse a partial set or a file that cannot be used, naming the variable,
and a service process takes them from its environment.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc

from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity, require_identity
from knowsphere_runtime.lifecycle import install_transport_security
from knowsphere_runtime.rpc import GrpcServer, bind_service, certificates, check_health, open_channel
from knowsphere_runtime.rpc.certificates import generate_certificates
from knowsphere_runtime.rpc.reflect import list_methods
from knowsphere_runtime.rpc.tls import (
    MutualTls,
    TlsConfigError,
    TlsSettings,
    install_tls,
    install_tls_from_environment,
    installed_tls,
    load_tls,
)

CALLER = Identity("acme", "alice")
CONTRACT = CONTRACTS["memory"]
METHOD = CONTRACT.descriptor.methods_by_name["ListMemoryItems"]
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Servicer:
    """Answers ListMemoryItems and records who asked."""

    def __init__(self) -> None:
        self.callers: list[Identity] = []

    async def ListMemoryItems(self, request: object, context: grpc.aio.ServicerContext) -> object:
        self.callers.append(require_identity())
        return GetMessageClass(METHOD.output_type)()


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tls_of(
    folder: Path, name: str, *, ca_folder: Path | None = None, health_port: int | None = None
) -> MutualTls:
    ca = (ca_folder or folder) / "ca.crt"
    return MutualTls.from_files(folder / f"{name}.crt", folder / f"{name}.key", ca, health_port=health_port)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ours/`` (a CA, ``server`` and ``client``) and ``foreign/`` (another CA and its ``client``)."""
    root = tmp_path_factory.mktemp("pki")
    generate_certificates(root / "ours", ["server", "client"])
    generate_certificates(root / "foreign", ["client"])
    return root


@pytest.fixture
async def server(pki: Path) -> AsyncIterator[tuple[GrpcServer, Servicer]]:
    servicer = Servicer()
    running = GrpcServer(
        name="tls-test",
        bind="127.0.0.1:0",
        bindings=[bind_service(CONTRACT.descriptor, servicer, pending="")],
        grace=0.5,
        tls=tls_of(pki / "ours", "server", health_port=0),
    )
    await running.start()
    yield running, servicer
    await running.stop(0)


async def call(target: str, tls: MutualTls | None) -> object:
    async with open_channel(target, services=[CONTRACT.descriptor], tls=tls) as channel:
        stub = channel.unary_unary(
            f"/{CONTRACT.descriptor.full_name}/{METHOD.name}",
            request_serializer=GetMessageClass(METHOD.input_type).SerializeToString,
            response_deserializer=GetMessageClass(METHOD.output_type).FromString,
        )
        with bound_identity(CALLER):
            return await stub(GetMessageClass(METHOD.input_type)(), timeout=5)


async def refused(target: str, tls: MutualTls | None) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(target, tls)
    return raised.value.code()


# --- the TLS port ----------------------------------------------------------------------------------


async def test_a_client_with_a_certificate_of_the_ca_gets_its_answer(server, pki):
    running, servicer = server
    await call(f"127.0.0.1:{running.port}", tls_of(pki / "ours", "client"))
    # By name as well as by address: the certificate names localhost and 127.0.0.1.
    await call(f"localhost:{running.port}", tls_of(pki / "ours", "client"))
    assert servicer.callers == [CALLER, CALLER]


async def test_a_plaintext_client_is_refused(server):
    running, servicer = server
    assert await refused(f"127.0.0.1:{running.port}", None) == grpc.StatusCode.UNAVAILABLE
    assert servicer.callers == []


async def test_a_client_without_a_certificate_is_refused(server, pki):
    running, servicer = server
    target = f"127.0.0.1:{running.port}"
    credentials = grpc.ssl_channel_credentials(root_certificates=(pki / "ours" / "ca.crt").read_bytes())
    async with grpc.aio.secure_channel(target, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert servicer.callers == []


async def test_a_client_whose_certificate_another_ca_signed_is_refused(server, pki):
    running, servicer = server
    # It trusts the server (our CA), but its own certificate comes from the foreign CA.
    intruder = tls_of(pki / "foreign", "client", ca_folder=pki / "ours")
    assert await refused(f"127.0.0.1:{running.port}", intruder) == grpc.StatusCode.UNAVAILABLE
    assert servicer.callers == []


async def test_a_client_that_trusts_another_ca_does_not_talk_to_the_server(server, pki):
    running, servicer = server
    stranger = tls_of(pki / "ours", "client", ca_folder=pki / "foreign")
    assert await refused(f"127.0.0.1:{running.port}", stranger) == grpc.StatusCode.UNAVAILABLE
    assert servicer.callers == []


async def test_reflection_over_mutual_tls(server, pki):
    running, _ = server
    target = f"127.0.0.1:{running.port}"
    listing = await asyncio.to_thread(list_methods, target, tls=tls_of(pki / "ours", "client"))
    assert f"{METHOD.name} (unary)" in listing[CONTRACT.descriptor.full_name]


# --- the plaintext health port ---------------------------------------------------------------------


async def test_the_health_port_answers_health_in_plaintext_with_the_servers_statuses(server, pki):
    running, _ = server
    assert running.health_port and running.health_port != running.port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.health_port}") as channel:
        assert await check_health(channel) == "SERVING"
        assert await check_health(channel, CONTRACT.descriptor.full_name) == "SERVING"
        await running.health.set("", NOT_SERVING)  # type: ignore[arg-type]
        assert await check_health(channel) == "NOT_SERVING"
    async with open_channel(f"127.0.0.1:{running.port}", tls=tls_of(pki / "ours", "client")) as channel:
        assert await check_health(channel) == "NOT_SERVING"


async def test_the_health_port_serves_nothing_but_health(server):
    running, servicer = server
    target = f"127.0.0.1:{running.health_port}"
    assert await refused(target, None) == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as raised:
        await asyncio.to_thread(list_methods, target, tls=None)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    assert servicer.callers == []


async def test_without_a_health_port_setting_there_is_none(pki):
    running = GrpcServer(
        name="tls-test", bind="127.0.0.1:0", bindings=[], grace=0.1, tls=tls_of(pki / "ours", "server")
    )
    await running.start()
    try:
        assert running.health_port is None
    finally:
        await running.stop(0)


async def test_a_busy_health_port_fails_start_naming_the_setting(pki):
    first = GrpcServer(
        name="a",
        bind="127.0.0.1:0",
        bindings=[],
        grace=0.1,
        tls=tls_of(pki / "ours", "server", health_port=0),
    )
    await first.start()
    try:
        second = GrpcServer(
            name="b",
            bind="127.0.0.1:0",
            bindings=[],
            grace=0.1,
            tls=tls_of(pki / "ours", "server", health_port=first.health_port),
        )
        with pytest.raises(OSError, match="KS_TLS_HEALTH_PORT"):
            await second.start()
    finally:
        await first.stop(0)


# --- the process's installed settings --------------------------------------------------------------


@pytest.fixture
def clean_install() -> Iterator[None]:
    install_tls(None)
    yield
    install_tls(None)


async def test_servers_and_channels_use_the_installed_settings_by_default(pki, clean_install):
    servicer = Servicer()
    install_tls(tls_of(pki / "ours", "server"))  # a certificate for both sides, as every service has
    running = GrpcServer(
        name="installed",
        bind="127.0.0.1:0",
        bindings=[bind_service(CONTRACT.descriptor, servicer, pending="")],
        grace=0.1,
    )
    await running.start()
    try:
        async with open_channel(f"127.0.0.1:{running.port}", services=[CONTRACT.descriptor]) as channel:
            stub = channel.unary_unary(
                f"/{CONTRACT.descriptor.full_name}/{METHOD.name}",
                request_serializer=GetMessageClass(METHOD.input_type).SerializeToString,
                response_deserializer=GetMessageClass(METHOD.output_type).FromString,
            )
            with bound_identity(CALLER):
                await stub(GetMessageClass(METHOD.input_type)(), timeout=5)
        assert await refused(f"127.0.0.1:{running.port}", None) == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop(0)
    assert servicer.callers == [CALLER]


def env_for(folder: Path, name: str) -> dict[str, str]:
    return {
        "KS_TLS_CERT_FILE": str(folder / f"{name}.crt"),
        "KS_TLS_KEY_FILE": str(folder / f"{name}.key"),
        "KS_TLS_CA_FILE": str(folder / "ca.crt"),
    }


def test_the_environment_installs_the_settings_read_once(pki, monkeypatch, clean_install):
    for key, value in {**env_for(pki / "ours", "server"), "KS_TLS_HEALTH_PORT": "7499"}.items():
        monkeypatch.setenv(key, value)
    tls = install_tls_from_environment()
    assert tls is not None and installed_tls() is tls and tls.health_port == 7499
    assert tls.certificate_chain == (pki / "ours" / "server.crt").read_bytes()
    assert "PRIVATE KEY" not in repr(tls), "the private key shows in logs and tracebacks"


def test_nothing_set_means_plaintext(monkeypatch, clean_install):
    for key in ("KS_TLS_CERT_FILE", "KS_TLS_KEY_FILE", "KS_TLS_CA_FILE", "KS_TLS_HEALTH_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert install_tls_from_environment() is None and installed_tls() is None


@pytest.mark.parametrize("left_out", ["KS_TLS_CERT_FILE", "KS_TLS_KEY_FILE", "KS_TLS_CA_FILE"])
def test_a_partial_set_is_refused_naming_what_is_missing(pki, left_out):
    values = {k.removeprefix("KS_TLS_").lower(): v for k, v in env_for(pki / "ours", "server").items()}
    values.pop(left_out.removeprefix("KS_TLS_").lower())
    with pytest.raises(TlsConfigError, match=f"not set: {left_out}"):
        load_tls(TlsSettings(**values))


def test_a_health_port_without_tls_is_refused():
    with pytest.raises(TlsConfigError, match="KS_TLS_HEALTH_PORT is set but TLS is not"):
        load_tls(TlsSettings(health_port=7499))


def test_an_unreadable_file_is_refused_naming_its_variable(pki, tmp_path):
    values = {k.removeprefix("KS_TLS_").lower(): v for k, v in env_for(pki / "ours", "server").items()}
    with pytest.raises(TlsConfigError, match=r"KS_TLS_CA_FILE=.*missing\.crt: cannot read it"):
        load_tls(TlsSettings(**{**values, "ca_file": tmp_path / "missing.crt"}))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(TlsConfigError, match=r"KS_TLS_CERT_FILE=.*garbage\.pem holds no PEM certificate"):
        load_tls(TlsSettings(**{**values, "cert_file": garbage}))
    with pytest.raises(TlsConfigError, match=r"KS_TLS_KEY_FILE=.*garbage\.pem holds no unencrypted PEM"):
        load_tls(TlsSettings(**{**values, "key_file": garbage}))


def test_a_key_of_another_certificate_is_refused(pki):
    values = {k.removeprefix("KS_TLS_").lower(): v for k, v in env_for(pki / "ours", "server").items()}
    values["key_file"] = str(pki / "ours" / "client.key")
    with pytest.raises(TlsConfigError, match=r"KS_TLS_KEY_FILE=.* is not the key of the certificate"):
        load_tls(TlsSettings(**values))


def test_an_expired_certificate_is_refused(tmp_path, monkeypatch):
    long_ago = datetime.now(UTC) - timedelta(days=certificates.CERTIFICATE_VALIDITY_DAYS + 10)
    monkeypatch.setattr(certificates, "_now", lambda: long_ago)
    generate_certificates(tmp_path, ["old"])
    with pytest.raises(TlsConfigError, match=r"KS_TLS_CERT_FILE=.*old\.crt: the certificate .* expired on"):
        tls_of(tmp_path, "old")


def test_a_service_with_a_partial_set_does_not_start(pki, monkeypatch, capsys, clean_install):
    monkeypatch.setenv("KS_TLS_CERT_FILE", str(pki / "ours" / "server.crt"))
    for key in ("KS_TLS_KEY_FILE", "KS_TLS_CA_FILE", "KS_TLS_HEALTH_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit) as exited:
        install_transport_security("memory")
    assert exited.value.code == 2
    assert "memory: mutual TLS needs all three" in capsys.readouterr().err


# --- a service process ------------------------------------------------------------------------------

SERVICE_SCRIPT = """
import sys
from pathlib import Path
from knowsphere_runtime.lifecycle import run_grpc_service
from knowsphere_runtime.settings import ServiceSettings

settings = ServiceSettings(grpc_port=int(sys.argv[1]), data_dir=Path(sys.argv[2]))
run_grpc_service("tls-probe", settings, lambda: [])
"""


def start_service(port: int, data_dir: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KS_TLS_")}
    return subprocess.Popen(
        [sys.executable, "-c", SERVICE_SCRIPT, str(port), str(data_dir)],
        env={**clean, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def health_of(target: str, tls: MutualTls | None) -> str:
    async def check() -> str:
        async with open_channel(target, tls=tls) as channel:
            return await check_health(channel, timeout=1)

    return asyncio.run(check())


def test_a_service_process_serves_mutual_tls_and_health_from_its_environment(pki, tmp_path):
    port, health_port = free_ports(2)
    env = {**env_for(pki / "ours", "server"), "KS_TLS_HEALTH_PORT": str(health_port)}
    process = start_service(port, tmp_path, env)
    try:
        client = tls_of(pki / "ours", "client")
        deadline = time.monotonic() + 30
        while health_of(f"127.0.0.1:{port}", client) != "SERVING":
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the service did not come up"
            time.sleep(0.2)
        assert health_of(f"127.0.0.1:{health_port}", None) == "SERVING"
        assert health_of(f"127.0.0.1:{port}", None) == "UNREACHABLE"  # plaintext gets no answer
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_a_service_process_with_a_partial_set_exits_naming_the_missing_variables(pki, tmp_path):
    (port,) = free_ports(1)
    env = env_for(pki / "ours", "server")
    del env["KS_TLS_CA_FILE"]
    process = start_service(port, tmp_path, env)
    try:
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 2
    assert "tls-probe: mutual TLS needs all three" in err and "not set: KS_TLS_CA_FILE" in err


# --- generating certificates -----------------------------------------------------------------------


def test_generated_certificates_name_the_service_and_loopback_and_are_kept(tmp_path):
    written = generate_certificates(tmp_path, ["retrieval"])
    assert {p.name for p in written} == {"ca.crt", "ca.key", "retrieval.crt", "retrieval.key"}
    certificate = x509.load_pem_x509_certificate((tmp_path / "retrieval.crt").read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["retrieval", "localhost"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    for key in ("ca.key", "retrieval.key"):
        assert stat.S_IMODE(os.stat(tmp_path / key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700
    # Run again: nothing to do; a new name gets a certificate of the same CA.
    assert generate_certificates(tmp_path, ["retrieval"]) == []
    assert [p.name for p in generate_certificates(tmp_path, ["retrieval", "modelhub"])] == [
        "modelhub.key",
        "modelhub.crt",
    ]


def test_a_new_ca_reissues_every_certificate(tmp_path):
    generate_certificates(tmp_path, ["retrieval"])
    (tmp_path / "ca.key").unlink()
    written = {p.name for p in generate_certificates(tmp_path, ["retrieval"])}
    assert written == {"ca.crt", "ca.key", "retrieval.crt", "retrieval.key"}
    tls_of(tmp_path, "retrieval")  # loads and matches


def test_a_name_that_cannot_be_a_file_or_dns_name_is_refused(tmp_path):
    with pytest.raises(certificates.CertificateError, match=r"'\.\./x'"):
        generate_certificates(tmp_path, ["../x"])
    assert certificates.main(["generate", str(tmp_path / "cli"), "ca"]) == 2
