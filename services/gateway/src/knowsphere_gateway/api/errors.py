"""Failures turned into HTTP errors a client can act on, in one shape.

Body: ``{"error": {"code", "message", "field"?, "model_id"?}}``. A failed service call arrives as a
``knowsphere_clients.errors.ServiceError`` (decoded once by the clients) and is mapped here, once: the
HTTP status from its gRPC status, ``code`` from modelhub's model error code when there is one (else the
status name), ``message`` its user-facing text, ``field`` the request field it names, renamed to what the
HTTP caller sent (:data:`UPLOAD_FIELDS`). The gateway's own refusals (a malformed upload, a wrong part)
are :class:`HttpError`.

Nothing internal reaches a client: a failure whose text is the service's or the transport's own
(``UNKNOWN``, ``INTERNAL``, ``UNAVAILABLE`` …, unless modelhub wrote a message for the user) and any
exception of the gateway's own answer with a generic message and a ``correlation_id`` — the trace id
of the request, also in the ``X-Correlation-Id`` header and on the log line holding the details.

A request the framework refuses keeps the same shape: a body that does not match its schema is a 422
whose ``error`` names the first field at fault (FastAPI's ``detail`` list stays beside it); an unknown
path is a 404; a method the path does not have is a 405 with ``Allow`` listing the methods the OpenAPI
document declares for it, and ``OPTIONS`` is answered 204 with that ``Allow`` (and no CORS headers,
so it is no preflight a browser would accept).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import structlog
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from opentelemetry import trace
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from knowsphere_clients.errors import ServiceError
from knowsphere_telemetry.attributes import ERROR_CODE

log = structlog.get_logger(__name__)

CORRELATION_HEADER = "x-correlation-id"

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


# Failures whose text comes from the service's internals or from the transport, not from a refusal
# written for the caller.
INTERNAL_STATUSES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
    }
)
INTERNAL_MESSAGES = {
    grpc.StatusCode.UNAVAILABLE: "the {service} service is unavailable; try again shortly",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the {service} service did not answer in time; try again shortly",
}
INTERNAL_MESSAGE = "the {service} service failed"


class ErrorBody(BaseModel):
    """What went wrong, for a program (``code``) and for a person (``message``)."""

    code: str = Field(description="e.g. invalid_argument, not_found, rate_limited, payload_too_large")
    message: str = Field(description="what was wrong, naming the field and the limit")
    field: str | None = Field(default=None, description="the request field at fault, e.g. file_name")
    model_id: str | None = Field(default=None, description="the model at fault, when a model call failed")
    correlation_id: str | None = Field(
        default=None, description="quote it when reporting a failure: it finds the request's logs and trace"
    )


class ErrorResponse(BaseModel):
    """Every error of the API."""

    error: ErrorBody


class ValidationErrorResponse(ErrorResponse):
    """A request that does not match its schema: ``error`` names the first field at fault, ``detail``
    lists every problem (FastAPI's own form)."""

    detail: list[dict[str, Any]] = Field(description="each problem: loc (where), msg, type")


class HttpError(Exception):
    """A refusal of the gateway's own; rendered as ``{"error": body}`` with ``status_code`` (and
    ``headers``, e.g. ``Retry-After``)."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body: dict[str, Any] = {"code": code, "message": message}
        if field:
            self.body["field"] = field
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.body}, status_code=self.status_code, headers=self.headers)


def correlation_id() -> str:
    """The current request's trace id (so logs and traces find it), or a random one without a trace."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else uuid.uuid4().hex


def error_response(description: str) -> dict[str, Any]:
    """An OpenAPI response entry with the error schema."""
    return {"model": ErrorResponse, "description": description}


GUARDED_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: error_response("no usable credentials: no token, or an unknown, expired or revoked one"),
    403: error_response("the caller's role may not use this route, or a cross-site browser request"),
    408: error_response("the request body did not arrive in time"),
    413: error_response("the request body is over the size limit"),
    422: {
        "model": ValidationErrorResponse,
        "description": "the request does not match its schema; error.field names the first field",
    },
    429: error_response(
        "too many requests, or too many at once, for this caller; retry after Retry-After seconds"
    ),
    500: error_response("the gateway failed; error.correlation_id finds the details"),
}
"""What every guarded route may answer before or around its own work: the guard's refusals, a body
refused for its size, time or shape, and a failure of the gateway itself."""

SERVICE_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: error_response("the service refused the request; error.field names the field"),
    404: error_response("no such resource (or not the caller's)"),
    409: error_response("the resource is not in a state that allows this, or already exists"),
    501: error_response("this deployment lacks the capability; the message names it"),
    502: error_response("a service failed; error.correlation_id finds the details"),
    503: error_response("a service is unavailable; try again shortly"),
    504: error_response("a service did not answer in time"),
}
"""What a route that calls a service may answer when the call fails (:data:`HTTP_STATUS`)."""


def as_json_errors(responses: Mapping[int | str, Mapping[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """``responses`` for a route whose own answer is not JSON (an event stream): FastAPI would document
    a ``model`` under the route's media type, but its errors are JSON."""
    converted: dict[int | str, dict[str, Any]] = {}
    for status, entry in responses.items():
        model = entry.get("model")
        if model is None:
            converted[status] = dict(entry)
            continue
        schema = {"$ref": f"#/components/schemas/{model.__name__}"}
        converted[status] = {
            "description": entry.get("description", ""),
            "content": {"application/json": {"schema": schema}},
        }
    return converted


def http_field(field: str) -> str:
    """A service's name of a request field as the HTTP caller knows it."""
    return UPLOAD_FIELDS.get(field, field.removeprefix("header."))


def error_body(error: ServiceError) -> dict[str, Any]:
    """``{"code", "message", "field"?, "model_id"?}`` of a failed call (or of an error carried as data,
    ``errors.from_code``)."""
    code = error.model_code.value if error.model_code is not None else error.status.name.lower()
    if hides_details(error):
        reference = correlation_id()
        log.warning("service call failed", error=str(error), correlation_id=reference)
        template = INTERNAL_MESSAGES.get(error.status, INTERNAL_MESSAGE)
        return {
            "code": code,
            "message": template.format(service=error.service or "upstream"),
            "correlation_id": reference,
        }
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


def hides_details(error: ServiceError) -> bool:
    """True when the failure's text is internal: shown to nobody but the logs."""
    written_for_the_user = error.model is not None and bool(error.model.user_message)
    return not written_for_the_user and (error.status in INTERNAL_STATUSES or error.status not in HTTP_STATUS)


def http_status(error: ServiceError) -> int:
    return HTTP_STATUS.get(error.status, BAD_GATEWAY)


REQUEST_PARTS = ("body", "query", "path", "header", "cookie")


def validation_body(errors: Sequence[Any]) -> dict[str, Any]:
    """The error body of a request that does not match its schema: the first problem, its field named
    as the caller sent it (``body.chunking.strategy`` → ``chunking.strategy``)."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        where = first.get("loc", ("body", 0))[-1]
        return {
            "code": "invalid_argument",
            "message": f"body: not valid JSON at character {where} ({first.get('ctx', {}).get('error', '')})",
            "field": "body",
        }
    location = [str(part) for part in first.get("loc", ())]
    where = location[1:] if len(location) > 1 and location[0] in REQUEST_PARTS else location
    field = ".".join(where) or "body"
    return {
        "code": "invalid_argument",
        "message": f"{field}: {first.get('msg', 'invalid')}",
        "field": field,
    }


class AllowedMethods:
    """The methods the OpenAPI document declares for a request's path (for ``Allow``)."""

    def __init__(self, app: FastAPI) -> None:
        self._app = app
        self._paths: list[tuple[re.Pattern[str], frozenset[str]]] | None = None

    def of(self, path: str) -> frozenset[str]:
        if self._paths is None:
            self._paths = [
                (compile_path(template)[0], frozenset(method.upper() for method in methods))
                for template, methods in self._app.openapi().get("paths", {}).items()
            ]
        found: set[str] = set()
        for pattern, methods in self._paths:
            if pattern.match(path):
                found |= methods
        if "GET" in found:
            found.add("HEAD")
        return frozenset(found)

    def header(self, path: str) -> str:
        return ", ".join(sorted({*self.of(path), "OPTIONS"}))


def _refused_by_framework(status_code: int, detail: Any) -> dict[str, Any]:
    codes = {
        400: "invalid_argument",
        404: "not_found",
        405: "method_not_allowed",
        413: "payload_too_large",
        415: "unsupported_media_type",
    }
    message = detail if isinstance(detail, str) else "the request was refused"
    return {"code": codes.get(status_code, "invalid_argument"), "message": message}


def record_refusal(code: str) -> None:
    """Marks the request's span with the error code it was answered with."""
    trace.get_current_span().set_attribute(ERROR_CODE, code)


def install_error_handlers(app: FastAPI) -> None:
    allowed = AllowedMethods(app)

    async def service_failed(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ServiceError)
        body = error_body(error)
        record_refusal(body["code"])
        headers = {CORRELATION_HEADER: body["correlation_id"]} if "correlation_id" in body else None
        return JSONResponse({"error": body}, status_code=http_status(error), headers=headers)

    async def refused(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HttpError)
        record_refusal(error.body["code"])
        return error.response()

    async def invalid_request(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        errors = list(error.errors())
        record_refusal("invalid_argument")
        # ``input`` echoes what was sent, and ``ctx`` may hold an exception: neither is the caller's
        # business beyond the location and the reason.
        detail = [{key: e[key] for key in ("type", "loc", "msg") if key in e} for e in errors]
        return JSONResponse({"error": validation_body(errors), "detail": detail}, status_code=422)

    async def framework_refusal(request: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        headers = dict(error.headers or {})
        if error.status_code == 405:
            headers["allow"] = allowed.header(request.url.path)
            if request.method == "OPTIONS":
                return Response(status_code=204, headers=headers)
        body = _refused_by_framework(error.status_code, error.detail)
        return JSONResponse({"error": body}, status_code=error.status_code, headers=headers)

    async def failed(request: Request, error: Exception) -> JSONResponse:
        reference = correlation_id()
        log.error("request failed", exc_info=error, correlation_id=reference, path=request.url.path)
        record_refusal("internal")
        body = {
            "code": "internal",
            "message": "the gateway failed to answer this request",
            "correlation_id": reference,
        }
        return JSONResponse({"error": body}, status_code=500, headers={CORRELATION_HEADER: reference})

    app.add_exception_handler(ServiceError, service_failed)
    app.add_exception_handler(HttpError, refused)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, framework_refusal)
    app.add_exception_handler(Exception, failed)


__all__ = [
    "CORRELATION_HEADER",
    "GUARDED_RESPONSES",
    "SERVICE_RESPONSES",
    "UPLOAD_FIELDS",
    "AllowedMethods",
    "ErrorBody",
    "ErrorResponse",
    "HttpError",
    "ValidationErrorResponse",
    "as_json_errors",
    "correlation_id",
    "error_body",
    "error_response",
    "hides_details",
    "http_field",
    "http_status",
    "install_error_handlers",
    "record_refusal",
    "validation_body",
]
