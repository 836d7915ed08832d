"""Conversions between registry records and the modelhub proto messages, one per shape.

Same-named fields cross through :mod:`knowsphere_contracts.convert` (enum members become numbers and
back, datetimes Timestamps); what is written here is only what differs: lists of types in proto order,
an empty ``extra`` left unset, proto numbers that name no member refused with the field named.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.json_format import MessageToDict

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_contracts.convert import message_from, record_from
from knowsphere_modelhub.domain.ports import Usage
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord, in_proto_order
from knowsphere_modelhub.domain.validation import model_type_of


def params_to_proto(params: ModelParams) -> pb.ModelParameters:
    return message_from(pb.ModelParameters, params, extra=params.extra or None)


def params_from_proto(message: pb.ModelParameters) -> ModelParams:
    extra = MessageToDict(message.extra) if message.HasField("extra") else {}
    return record_from(ModelParams, message, extra=extra)


def record_to_proto(record: ModelRecord, default_for: Iterable[ModelType] = ()) -> pb.Model:
    """The API view of a record: the key is never included (the message has no field for it)."""
    return message_from(
        pb.Model,
        record,
        types=in_proto_order(record.types),
        parameters=params_to_proto(record.parameters),
        default_for=in_proto_order(default_for),
    )


def model_types_of(numbers: Iterable[int], field: str = "types") -> list[ModelType]:
    """Model types of a request's numbers; INVALID_INPUT naming ``field`` for an unknown one."""
    return [model_type_of(field, number) for number in numbers]


def usage_to_proto(usage: Usage) -> pb.ModelUsage:
    return message_from(pb.ModelUsage, usage)


def usage_from_proto(request: pb.PutModelUsageRequest) -> Usage:
    """The usage a request describes; an unset or unknown consumer kind is None (the registry refuses it)."""
    return record_from(Usage, request)
