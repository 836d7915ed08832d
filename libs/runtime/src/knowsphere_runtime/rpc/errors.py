"""Request errors a gRPC handler raises, and the wrapper that turns them into gRPC statuses.

A handler raises :class:`RequestError` (or :func:`invalid` for a bad field, naming it and the limit);
:func:`answer` awaits the handler's work and aborts the call with the error's code and message. When
the error names a field, the status also carries a ``google.rpc.BadRequest`` detail with that field,
so a caller reads it from the detail (``knowsphere_clients`` does) instead of from the message text.
A ``ValueError`` from deeper down counts as INVALID_ARGUMENT, since stores and adapters reject
malformed data with one that names the field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

T = TypeVar("T")


class RequestError(Exception):
    """A call refused with ``code``; ``field`` names the request field at fault, when one is."""

    def __init__(self, code: grpc.StatusCode, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


def invalid(field: str, reason: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {reason}", field=field)


def precondition(field: str, reason: str) -> RequestError:
    """FAILED_PRECONDITION about a field (the request is well-formed, the state does not allow it)."""
    return RequestError(grpc.StatusCode.FAILED_PRECONDITION, f"{field}: {reason}", field=field)


def not_found(what: str, ident: str) -> RequestError:
    return RequestError(grpc.StatusCode.NOT_FOUND, f"{what} {ident} not found")


def status_with(code: grpc.StatusCode, message: str, details: Sequence[Message] = ()) -> grpc.Status:
    """A gRPC status whose rich details (``google.rpc.Status.details``) are ``details``."""
    packed = []
    for detail in details:
        item = any_pb2.Any()
        item.Pack(detail)
        packed.append(item)
    return rpc_status.to_status(status_pb2.Status(code=code.value[0], message=message, details=packed))


def status_of(error: RequestError) -> grpc.Status:
    """The gRPC status of a request error, with a BadRequest detail when it names a field."""
    details: list[Message] = []
    if error.field:
        violation = error_details_pb2.BadRequest.FieldViolation(field=error.field, description=error.message)
        details.append(error_details_pb2.BadRequest(field_violations=[violation]))
    return status_with(error.code, error.message, details)


async def abort(context: grpc.aio.ServicerContext, error: RequestError) -> NoReturn:
    await context.abort_with_status(status_of(error))
    raise AssertionError("unreachable: abort raises")


async def answer(context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
    """The result of ``work``, or the call aborted with the status its error stands for."""
    try:
        return await work()
    except RequestError as error:
        await abort(context, error)
    except ValueError as error:
        await abort(context, RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(error)))
