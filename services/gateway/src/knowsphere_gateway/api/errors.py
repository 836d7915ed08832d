"""Failures turned into HTTP errors a client can act on, in one shape.

Body: ``{"error": {"code", "message", "field"?, "model_id"?}}``. A failed service call arrives as a
``knowsphere_clients.errors.ServiceError`` (decoded once by the clients) and is mapped here, once: the
HTTP status from its gRPC status, ``code`` from modelhub's model error code when there is one (else the
status name), ``message`` its user-facing text, ``field`` the request field it names, renamed to what the
HTTP caller sent (:data:`UPLOAD_FIELDS`). The gateway's own refusals (a malformed upload, a wrong part)
are :class:`HttpError`.
"""

from __future__ import annotations

from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from knowsphere_clients.errors import ServiceError

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
BAD_GATEWAY = 502

# Fields of ingestion's upload header as the HTTP caller knows them: the multipart form has a ``file``
# part, its name, a ``metadata`` part, and the knowledge base in the path.
UPLOAD_FIELDS = {
    "header.file_name": "file_name",
    "header.declared_size_bytes": "file",
    "header.content_sha256": "file",
    "header.metadata": "metadata",
    "header.knowledge_base_id": "kb_id",
    "chunk": "file",
}


class HttpError(Exception):
    """A refusal of the gateway's own; rendered as ``{"error": body}`` with ``status_code``."""

    def __init__(self, status_code: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body: dict[str, Any] = {"code": code, "message": message}
        if field:
            self.body["field"] = field


def http_field(field: str) -> str:
    """A service's name of a request field as the HTTP caller knows it."""
    return UPLOAD_FIELDS.get(field, field.removeprefix("header."))


def error_body(error: ServiceError) -> dict[str, Any]:
    """``{"code", "message", "field"?, "model_id"?}`` of a failed call (or of an error carried as data,
    ``errors.from_code``)."""
    code = error.model_code.value if error.model_code is not None else error.status.name.lower()
    message = error.user_message
    body: dict[str, Any] = {"code": code, "message": message}
    if error.field:
        field = http_field(error.field)
        # The services start a field's message with its name ("header.file_name: …"); the caller
        # should read the name it sent. The field comes from the error's detail, not from this text.
        if field != error.field and message.startswith(f"{error.field}: "):
            body["message"] = f"{field}: {message.removeprefix(f'{error.field}: ')}"
        body["field"] = field
    if error.model is not None and error.model.model_id:
        body["model_id"] = error.model.model_id
    return body


def http_status(error: ServiceError) -> int:
    return HTTP_STATUS.get(error.status, BAD_GATEWAY)


def install_error_handlers(app: FastAPI) -> None:
    async def service_failed(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ServiceError)
        return JSONResponse({"error": error_body(error)}, status_code=http_status(error))

    async def refused(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HttpError)
        return JSONResponse({"error": error.body}, status_code=error.status_code)

    app.add_exception_handler(ServiceError, service_failed)
    app.add_exception_handler(HttpError, refused)


__all__ = [
    "UPLOAD_FIELDS",
    "HttpError",
    "error_body",
    "http_field",
    "http_status",
    "install_error_handlers",
]
