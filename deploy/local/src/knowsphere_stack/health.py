"""Health checks of the stack's components, as data (so they can travel to the supervisor) plus a probe.

Kinds:
- ``tcp``: a TCP connect succeeds;
- ``http``: a GET returns the expected status (NATS ``/healthz?js-enabled-only=true``, gateway ``/healthz``);
- ``grpc``: ``grpc.health.v1.Health/Check`` for a service name answers SERVING (the Temporal frontend
  with ``temporal.api.workflowservice.v1.WorkflowService``, KnowSphere services with ``""``), over
  mutual TLS with the check's client certificate when it has one (``KS_STACK_TLS``);
- ``uptime``: the process has stayed up for some seconds (for a worker that serves no port).

Proxies from the environment are ignored: every check targets the loopback interface.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Annotated, Literal

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import BaseModel, Field

from knowsphere_stack.tls import TlsFiles

PROBE_TIMEOUT = 1.0
"""Seconds one probe may take; probes are repeated, so a short timeout keeps the loop responsive."""


class TcpCheck(BaseModel):
    kind: Literal["tcp"] = "tcp"
    host: str
    port: int

    def describe(self) -> str:
        return f"tcp {self.host}:{self.port}"


class HttpCheck(BaseModel):
    kind: Literal["http"] = "http"
    url: str
    expect_status: int = 200

    def describe(self) -> str:
        return f"GET {self.url}"


class GrpcHealthCheck(BaseModel):
    kind: Literal["grpc"] = "grpc"
    address: str
    service: str = ""
    tls: TlsFiles | None = None

    def describe(self) -> str:
        return f"grpc health {self.address} service={self.service!r}" + (" over mTLS" if self.tls else "")


class UptimeCheck(BaseModel):
    kind: Literal["uptime"] = "uptime"
    seconds: float = 2.0

    def describe(self) -> str:
        return f"up for {self.seconds:g}s"


HealthCheck = Annotated[TcpCheck | HttpCheck | GrpcHealthCheck | UptimeCheck, Field(discriminator="kind")]


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    detail: str


def probe(check: HealthCheck, *, uptime: float | None = None, timeout: float = PROBE_TIMEOUT) -> ProbeResult:
    """Run one check once. ``uptime`` is how long the process has been running (for ``uptime`` checks)."""
    try:
        if isinstance(check, TcpCheck):
            with socket.create_connection((check.host, check.port), timeout=timeout):
                return ProbeResult(True, f"{check.describe()}: connected")
        if isinstance(check, HttpCheck):
            response = httpx.get(check.url, timeout=timeout, trust_env=False)
            ok = response.status_code == check.expect_status
            return ProbeResult(ok, f"{check.describe()}: HTTP {response.status_code}")
        if isinstance(check, GrpcHealthCheck):
            status = grpc_health_status(check.address, check.service, timeout=timeout, tls=check.tls)
            return ProbeResult(status == "SERVING", f"{check.describe()}: {status}")
        if isinstance(check, UptimeCheck):
            ok = uptime is not None and uptime >= check.seconds
            return ProbeResult(ok, f"{check.describe()}: up {uptime or 0:.1f}s")
    except (OSError, httpx.HTTPError) as exc:
        return ProbeResult(False, f"{check.describe()}: {exc.__class__.__name__}: {exc}")
    raise TypeError(f"unknown health check {check!r}")


def probe_all(checks: list[HealthCheck], *, uptime: float | None = None) -> ProbeResult:
    """All checks must pass; stops at the first that does not and reports it."""
    details: list[str] = []
    for check in checks:
        result = probe(check, uptime=uptime)
        if not result.ok:
            return result
        details.append(result.detail)
    return ProbeResult(True, "; ".join(details) or "no checks")


def grpc_health_status(
    address: str, service: str = "", *, timeout: float = PROBE_TIMEOUT, tls: TlsFiles | None = None
) -> str:
    """The serving status name from ``grpc.health.v1.Health/Check``, or the gRPC error code's name;
    with ``tls``, over mutual TLS presenting its certificate."""
    options = [("grpc.enable_http_proxy", 0)]
    channel = (
        grpc.insecure_channel(address, options=options)
        if tls is None
        else grpc.secure_channel(address, tls.channel_credentials(), options=options)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            return code.name if code is not None else "ERROR"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
