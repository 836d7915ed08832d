"""``KS_STACK_TLS``: the stack's certificates, the ``KS_TLS_*`` wiring of each process, and its health
probe presenting the ``local-client`` certificate to a real mutual-TLS server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from knowsphere_runtime.rpc import GrpcServer
from knowsphere_stack.components import LOCAL_CLIENT_ISSUER, build_components
from knowsphere_stack.config import INGESTION_WORKER, SERVICE_NAMES, StackConfig
from knowsphere_stack.health import GrpcHealthCheck, grpc_health_status, probe
from knowsphere_stack.stack import Stack
from knowsphere_stack.tls import ensure_tls_certificates, tls_files


def test_without_tls_nothing_about_it_is_wired(tmp_path: Path, clean_env: None) -> None:
    config = StackConfig(data_dir=tmp_path, ingestion_worker=True)
    for spec in build_components(config):
        assert not [key for key in spec.env if key.startswith("KS_TLS_")], spec.name
        assert all(getattr(check, "tls", None) is None for check in spec.health), spec.name
    assert not config.tls_dir.exists()
    assert Stack(config).local_client_tls() is None


def test_with_tls_every_process_gets_its_own_certificate_of_one_ca(tmp_path: Path, clean_env: None) -> None:
    config = StackConfig(data_dir=tmp_path, ingestion_worker=True, tls=True)
    specs = {spec.name: spec for spec in build_components(config)}
    folder = tmp_path / "secrets" / "tls"
    assert config.tls_dir == folder
    for name in [*SERVICE_NAMES, INGESTION_WORKER]:
        env = specs[name].env
        assert env["KS_TLS_CERT_FILE"] == str(folder / f"{name}.crt")
        assert env["KS_TLS_KEY_FILE"] == str(folder / f"{name}.key")
        assert env["KS_TLS_CA_FILE"] == str(folder / "ca.crt")
        assert "KS_TLS_HEALTH_PORT" not in env  # the stack's probe presents a certificate instead
        # The files are there and load as the service will load them.
        tls_files(folder, name).load()
    for name in SERVICE_NAMES:
        (check,) = [c for c in specs[name].health if isinstance(c, GrpcHealthCheck)]
        assert check.tls == tls_files(folder, LOCAL_CLIENT_ISSUER)
    for name in ("nats", "temporal"):
        assert not [k for k in specs[name].env if k.startswith("KS_TLS_")]
    assert Stack(config).local_client_tls() == tls_files(folder, LOCAL_CLIENT_ISSUER).load()


def test_the_probe_checks_a_tls_port_with_the_local_client_certificate(tmp_path: Path) -> None:
    folder = ensure_tls_certificates(tmp_path / "tls", ["retrieval", LOCAL_CLIENT_ISSUER])

    async def scenario() -> tuple[str, str, bool]:
        server = GrpcServer(
            name="retrieval",
            bind="127.0.0.1:0",
            bindings=[],
            grace=0.1,
            tls=tls_files(folder, "retrieval").load(),
        )
        await server.start()
        address = f"127.0.0.1:{server.port}"
        client = tls_files(folder, LOCAL_CLIENT_ISSUER)
        try:
            with_certificate = await asyncio.to_thread(grpc_health_status, address, tls=client)
            plaintext = await asyncio.to_thread(grpc_health_status, address)
            result = await asyncio.to_thread(probe, GrpcHealthCheck(address=address, tls=client))
        finally:
            await server.stop(0)
        return with_certificate, plaintext, result.ok

    assert asyncio.run(scenario()) == ("SERVING", "UNAVAILABLE", True)


def test_a_probe_whose_certificate_is_missing_fails_saying_why(tmp_path: Path) -> None:
    check = GrpcHealthCheck(address="127.0.0.1:1", tls=tls_files(tmp_path, LOCAL_CLIENT_ISSUER))
    result = probe(check)
    assert not result.ok and "FileNotFoundError" in result.detail and "over mTLS" in result.detail
