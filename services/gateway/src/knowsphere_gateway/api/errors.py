"""gRPC failures from the services, turned into HTTP errors a client can act on.

Body: ``{"error": {"code", "message", "field"?, "model_id"?}}``; the message is the service's
user-facing text (modelhub's ``ModelErrorDetail.user_message`` when present).
"""

from __future__ import annotations

import grpc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}


class ServiceError(Exception):
    """A service call failed; rendered as ``{"error": {...}}`` with the mapped HTTP status."""

    def __init__(self, status_code: int, body: dict[str, object]) -> None:
        super().__init__(body.get("message"))
        self.status_code = status_code
        self.body = body


def install_error_handler(app: FastAPI) -> None:
    async def handle(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ServiceError)
        return JSONResponse({"error": error.body}, status_code=error.status_code)

    app.add_exception_handler(ServiceError, handle)


def service_error(error: grpc.aio.AioRpcError) -> ServiceError:
    body: dict[str, object] = {
        "code": error.code().name.lower(),
        "message": error.details() or error.code().name,
    }
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is not None:
        for detail in status.details:
            if detail.Is(modelhub_pb2.ModelErrorDetail.DESCRIPTOR):
                model_error = modelhub_pb2.ModelErrorDetail()
                detail.Unpack(model_error)
                body["code"] = (
                    modelhub_pb2.ModelErrorCode.Name(model_error.code)
                    .removeprefix("MODEL_ERROR_CODE_")
                    .lower()
                )
                body["message"] = model_error.user_message
                if model_error.field:
                    body["field"] = model_error.field
                if model_error.model_id:
                    body["model_id"] = model_error.model_id
    return ServiceError(HTTP_STATUS.get(error.code(), 502), body)
