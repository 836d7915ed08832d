"""A failed call to another service, decoded once into a typed exception.

Every client method raises a :class:`ServiceError` subclass named after the gRPC status code
(:class:`NotFound`, :class:`Unavailable` …) instead of ``grpc.aio.AioRpcError``. What the status
details carry is decoded here, once: the request field at fault (``google.rpc.BadRequest``, which
``knowsphere_runtime.rpc.errors`` attaches) and modelhub's :class:`ModelFailure`
(``ModelErrorDetail``: a machine code, a message for the user in the caller's language, the model and
provider, a retry delay).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode

# Codes a retry of the same request will not fix.
_PERMANENT = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.OUT_OF_RANGE,
    }
)


@dataclass(frozen=True)
class ModelFailure:
    """modelhub's account of a failed model call (``ModelErrorDetail``)."""

    code: ModelErrorCode | None
    user_message: str
    language: str = ""
    model_id: str = ""
    provider_id: str = ""
    field: str = ""
    retry_after_seconds: float | None = None


class ServiceError(Exception):
    """A call to ``service``'s ``method`` failed with ``code``; ``message`` is the service's text."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        service: str = "",
        method: str = "",
        field: str = "",
        model: ModelFailure | None = None,
        status: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.service = service
        self.method = method
        self.field = field or (model.field if model else "")
        self.model = model
        self.status = status or self.code

    @property
    def permanent(self) -> bool:
        """True when retrying the same request cannot succeed (bad input, missing thing, refused)."""
        return self.status in _PERMANENT

    @property
    def user_message(self) -> str:
        """The text to show a user: modelhub's translated message when there is one."""
        return self.model.user_message if self.model and self.model.user_message else self.message

    @property
    def model_code(self) -> ModelErrorCode | None:
        return self.model.code if self.model else None

    def __str__(self) -> str:
        where = f"{self.service}.{self.method}: " if self.service else ""
        return f"{where}{self.status.name}: {self.message}"


class Cancelled(ServiceError):
    code = grpc.StatusCode.CANCELLED


class Unknown(ServiceError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ServiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ServiceError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(ServiceError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(ServiceError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ServiceError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(ServiceError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: dict[grpc.StatusCode, type[ServiceError]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}


def error_class(code: grpc.StatusCode) -> type[ServiceError]:
    return _BY_CODE.get(code, Unknown)


def decode(error: grpc.aio.AioRpcError, *, service: str = "", method: str = "") -> ServiceError:
    """The typed error of a failed call, with the field and model failure its details carry."""
    code = error.code()
    message = error.details() or code.name
    field = ""
    model: ModelFailure | None = None
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is not None:
        for detail in status.details:
            if detail.Is(mpb.ModelErrorDetail.DESCRIPTOR):
                unpacked = mpb.ModelErrorDetail()
                detail.Unpack(unpacked)
                model = ModelFailure(
                    code=ModelErrorCode.from_number(unpacked.code),
                    user_message=unpacked.user_message,
                    language=unpacked.language,
                    model_id=unpacked.model_id,
                    provider_id=unpacked.provider_id,
                    field=unpacked.field,
                    retry_after_seconds=unpacked.retry_after.ToNanoseconds() / 1e9
                    if unpacked.HasField("retry_after")
                    else None,
                )
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                if bad.field_violations:
                    field = bad.field_violations[0].field
    return error_class(code)(message, service=service, method=method, field=field, model=model, status=code)


def from_code(code: grpc.StatusCode | str, message: str, *, field: str = "") -> ServiceError:
    """A typed error from a code carried as data (e.g. ``UploadError.code``), not from a call."""
    status = code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.__members__.get(code)
    status = status or grpc.StatusCode.UNKNOWN
    return error_class(status)(message, field=field, status=status)
