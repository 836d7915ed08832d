"""gRPC plumbing: server and channel factories, identity propagation, mutual TLS, health and reflection."""

from knowsphere_runtime.rpc.channel import RetryPolicy, open_channel, retry_service_config
from knowsphere_runtime.rpc.health import check_health
from knowsphere_runtime.rpc.server import GrpcServer, ServiceBinding, bind_service

__all__ = [
    "GrpcServer",
    "RetryPolicy",
    "ServiceBinding",
    "bind_service",
    "check_health",
    "open_channel",
    "retry_service_config",
]
