"""Client channels to other services: deadlines, retries for idempotent calls, tracing, identity.

Retries are decided by the contract, not by the caller: a method marked
``option idempotency_level = NO_SIDE_EFFECTS`` or ``IDEMPOTENT`` in its .proto is retried by
gRPC on UNAVAILABLE with exponential backoff; any other method is never retried automatically.

With the process's mutual-TLS settings (``KS_TLS_*``, :mod:`knowsphere_runtime.rpc.tls`) a channel
presents the process's certificate and trusts only servers signed by the same CA; without, it is
plaintext.

A target may name several replicas of one service (:func:`balanced_target`): the channel then spreads
calls over every replica that is up.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.descriptor_pb2 import MethodOptions
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from knowsphere_runtime.rpc.identity_interceptors import identity_client_interceptors
from knowsphere_runtime.rpc.tls import INSTALLED, TlsChoice, resolve_tls

_RETRYABLE_LEVELS = (MethodOptions.NO_SIDE_EFFECTS, MethodOptions.IDEMPOTENT)

IPV4_SCHEME = "ipv4:"
"""gRPC's own target of literal IPv4 addresses, ``ipv4:host:port,host:port``."""
ROUND_ROBIN = "round_robin"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    initial_backoff_seconds: float = 0.1
    max_backoff_seconds: float = 2.0
    backoff_multiplier: float = 2.0
    retryable_status_codes: tuple[str, ...] = ("UNAVAILABLE",)


def is_idempotent(method: MethodDescriptor) -> bool:
    return method.GetOptions().idempotency_level in _RETRYABLE_LEVELS


def retry_service_config(services: Iterable[ServiceDescriptor], policy: RetryPolicy) -> str:
    """The gRPC service config (JSON) that retries exactly the idempotent methods of ``services``."""
    names = [
        {"service": service.full_name, "method": method.name}
        for service in services
        for method in service.methods
        if is_idempotent(method)
    ]
    config: dict[str, object] = {"methodConfig": []}
    if names:
        config["methodConfig"] = [
            {
                "name": names,
                "retryPolicy": {
                    "maxAttempts": policy.max_attempts,
                    "initialBackoff": f"{policy.initial_backoff_seconds}s",
                    "maxBackoff": f"{policy.max_backoff_seconds}s",
                    "backoffMultiplier": policy.backoff_multiplier,
                    "retryableStatusCodes": list(policy.retryable_status_codes),
                },
            }
        ]
    return json.dumps(config, sort_keys=True)


def balanced_target(target: str) -> tuple[str, list[tuple[str, object]]]:
    """``target`` as gRPC dials it, and the channel options it needs.

    ``host:port`` is dialled as it is. A comma-separated list of IPv4 ``host:port`` pairs (how
    ``ks-stack`` names the replicas of one service, ``127.0.0.1:7411,127.0.0.1:7421``), or gRPC's own
    ``ipv4:`` form of it, is one channel over all of them with the ``round_robin`` policy: gRPC's default
    (pick_first) would send every call to the first replica while it is up. Its authority, the name a
    server's certificate must carry under mutual TLS, is the first address: every replica serves with
    the certificate of the same service. Raises ``ValueError`` naming the part that is not an IPv4
    ``host:port`` (gRPC resolves no list of host names: give one DNS name resolving to every replica).
    """
    if not target.startswith(IPV4_SCHEME) and "," not in target:
        return target, []
    parts = [part.strip() for part in target.removeprefix(IPV4_SCHEME).split(",") if part.strip()]
    for part in parts:
        host, _, port = part.rpartition(":")
        try:
            ipaddress.IPv4Address(host)
            valid_port = 1 <= int(port) <= 65535
        except ValueError:
            valid_port = False
        if not valid_port:
            raise ValueError(
                f"gRPC target {target!r}: {part!r} is not an IPv4 host:port; a list of replicas must be "
                f"IPv4 addresses (127.0.0.1:7411,127.0.0.1:7421), one name must stand alone"
            )
    if not parts:
        raise ValueError(f"gRPC target {target!r} names no address")
    return IPV4_SCHEME + ",".join(parts), [
        ("grpc.lb_policy_name", ROUND_ROBIN),
        ("grpc.default_authority", parts[0]),
    ]


def open_channel(
    target: str,
    *,
    services: Sequence[ServiceDescriptor] = (),
    unary_timeout: float = 10.0,
    stream_timeout: float = 600.0,
    retry: RetryPolicy | None = None,
    tls: TlsChoice = INSTALLED,
) -> grpc.aio.Channel:
    """An aio channel to ``target`` (``host:port``, or several replicas: :func:`balanced_target`) for the
    given services: mutual TLS with ``tls`` (by default the process's ``KS_TLS_*`` settings), plaintext
    without.

    Every call gets a deadline (``unary_timeout`` / ``stream_timeout`` unless the caller sets one),
    the caller's identity and trace context in its metadata, and a client span.
    """
    target, balancing = balanced_target(target)
    options: list[tuple[str, object]] = [("grpc.enable_retries", 1), *balancing]
    if services:
        options.append(("grpc.service_config", retry_service_config(services, retry or RetryPolicy())))
    interceptors = [*aio_client_interceptors(), *identity_client_interceptors(unary_timeout, stream_timeout)]
    security = resolve_tls(tls)
    if security is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        target, security.channel_credentials(), options=options, interceptors=interceptors
    )
