"""A generic reflection client: lists the services and methods any gRPC server exposes.

It knows nothing of KnowSphere's generated code; it reads everything through the server's
reflection service. ``python -m knowsphere_runtime.rpc.reflect HOST:PORT [...]`` prints
``service/method (kind)`` lines; with ``KS_TLS_*`` set (a client certificate of the deployment's CA) it
connects over mutual TLS.
"""

from __future__ import annotations

import sys

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from knowsphere_runtime.rpc.tls import (
    INSTALLED,
    TlsChoice,
    TlsConfigError,
    TlsSettings,
    load_tls,
    resolve_tls,
)


def _channel(target: str, tls: TlsChoice) -> grpc.Channel:
    security = resolve_tls(tls)
    if security is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, security.channel_credentials())


def list_methods(target: str, timeout: float = 5.0, *, tls: TlsChoice = INSTALLED) -> dict[str, list[str]]:
    """Map each service the server at ``target`` reflects to its methods (``Name (kind)``)."""
    with _channel(target, tls) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = DescriptorPool(database)
        listing: dict[str, list[str]] = {}
        for service_name in database.get_services():
            service = pool.FindServiceByName(service_name)
            methods = []
            for method in service.methods:
                kind = {
                    (False, False): "unary",
                    (False, True): "server-streaming",
                    (True, False): "client-streaming",
                    (True, True): "bidi-streaming",
                }[(method.client_streaming, method.server_streaming)]
                methods.append(f"{method.name} ({kind})")
            listing[service_name] = methods
        return listing


def main(argv: list[str] | None = None) -> int:
    targets = sys.argv[1:] if argv is None else argv
    if not targets:
        print("usage: python -m knowsphere_runtime.rpc.reflect HOST:PORT [HOST:PORT ...]", file=sys.stderr)
        return 2
    try:
        tls = load_tls(TlsSettings())
    except TlsConfigError as error:
        print(error, file=sys.stderr)
        return 2
    for target in targets:
        try:
            listing = list_methods(target, tls=tls)
        except grpc.FutureTimeoutError:
            print(f"{target}: not reachable", file=sys.stderr)
            return 1
        for service, methods in sorted(listing.items()):
            for method in methods:
                print(f"{target} {service}/{method}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
