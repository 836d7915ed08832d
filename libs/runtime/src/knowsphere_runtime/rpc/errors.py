"""Request errors a gRPC handler raises, and the wrapper that turns them into gRPC statuses.

A handler raises :class:`RequestError` (or :func:`invalid` for a bad field, naming it and the limit);
:func:`answer` awaits the handler's work and aborts the call with the error's code and message. A
``ValueError`` from deeper down counts as INVALID_ARGUMENT, since stores and adapters reject malformed
data with one that names the field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

T = TypeVar("T")


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(field: str, reason: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {reason}")


def not_found(what: str, ident: str) -> RequestError:
    return RequestError(grpc.StatusCode.NOT_FOUND, f"{what} {ident} not found")


async def answer(context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
    """The result of ``work``, or the call aborted with the status its error stands for."""
    try:
        return await work()
    except RequestError as error:
        await context.abort(error.code, error.message)
    except ValueError as error:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
    raise AssertionError("unreachable: abort raises")
