"""How modelhub answers a :class:`ModelError`: a gRPC status whose details carry ``ModelErrorDetail``.

The detail holds the code, the message in the caller's language (from ``accept-language``), the model
and provider, the request field at fault and when to retry; the raw provider detail goes to the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import grpc
import structlog
from google.protobuf.duration_pb2 import Duration

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_runtime.identity import LANGUAGE_KEY
from knowsphere_runtime.rpc.errors import status_with

log = structlog.get_logger(__name__)
T = TypeVar("T")

# Characters of a provider's raw error detail written to the log.
MAX_LOGGED_DETAIL_CHARS = 2000


def caller_language(context: grpc.aio.ServicerContext, default: str) -> str:
    """The first language of the call's ``accept-language``, else ``default``."""
    for key, value in context.invocation_metadata() or ():
        if key == LANGUAGE_KEY and value:
            first = str(value).split(",")[0].split(";")[0].strip()
            return first or default
    return default


async def abort(context: grpc.aio.ServicerContext, error: ModelError, language: str) -> NoReturn:
    """Ends the call with ``error`` as a status carrying ``ModelErrorDetail``."""
    message = error.user_message(language)
    detail = pb.ModelErrorDetail(
        code=error.code.to_proto(),
        user_message=message,
        language=language,
        model_id=error.model_id,
        provider_id=error.provider_id,
        field=error.field,
    )
    if error.retry_after is not None:
        detail.retry_after.CopyFrom(Duration(seconds=int(error.retry_after)))
    log.warning(
        "model call failed",
        code=error.code_name,
        model_id=error.model_id,
        provider_id=error.provider_id,
        detail=error.detail[:MAX_LOGGED_DETAIL_CHARS],
    )
    await context.abort_with_status(status_with(error.grpc_status, message, [detail]))
    raise AssertionError("abort_with_status returned")  # it always raises


async def answer(
    context: grpc.aio.ServicerContext, default_language: str, work: Callable[[], Awaitable[T]]
) -> T:
    """``work()``'s result, or the call aborted with the :class:`ModelError` it raised."""
    try:
        return await work()
    except ModelError as error:
        await abort(context, error, caller_language(context, default_language))
