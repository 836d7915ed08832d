"""How every ingestion handler answers: its result, or the status its error stands for.

A refusal of ingestion's own (:class:`~knowsphere_runtime.rpc.errors.RequestError`) and a peer's
refusal (:class:`~knowsphere_clients.errors.ServiceError` from modelhub or retrieval) both reach the
caller with their code, message and the request field at fault, so the caller of ingestion reads why
modelhub refused a model exactly as it would from modelhub.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from knowsphere_clients.errors import ServiceError
from knowsphere_runtime.rpc.errors import RequestError, abort, answer

T = TypeVar("T")


def passed_on(error: ServiceError) -> RequestError:
    """A peer's refusal as ingestion's own answer: the peer's code, words and field."""
    return RequestError(error.status, error.message, field=error.field)


async def reply(context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
    """The result of ``work``, or the call aborted with its error's status."""
    try:
        return await answer(context, work)
    except ServiceError as error:
        await abort(context, passed_on(error))
