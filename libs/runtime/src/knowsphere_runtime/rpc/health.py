"""Reading another process's gRPC health (standard grpc.health.v1)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


async def check_health(channel: grpc.aio.Channel, service: str = "", timeout: float = 2.0) -> str:
    """The status name (SERVING, NOT_SERVING, …) or UNREACHABLE / the gRPC error code name."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.aio.AioRpcError as error:
        if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return "UNREACHABLE"
        return str(error.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
