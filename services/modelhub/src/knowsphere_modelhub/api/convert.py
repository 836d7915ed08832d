"""Conversions between registry records and the modelhub proto messages."""

from __future__ import annotations

from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord


def _timestamp(value: object) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)  # type: ignore[arg-type]
    return stamp


def params_to_proto(params: ModelParams) -> pb.ModelParameters:
    message = pb.ModelParameters()
    if params.temperature is not None:
        message.temperature = params.temperature
    if params.max_tokens is not None:
        message.max_tokens = params.max_tokens
    if params.context_window is not None:
        message.context_window = params.context_window
    if params.embedding_dimension is not None:
        message.embedding_dimension = params.embedding_dimension
    if params.extra:
        extra = Struct()
        extra.update(params.extra)
        message.extra.CopyFrom(extra)
    return message


def params_from_proto(message: pb.ModelParameters) -> ModelParams:
    return ModelParams(
        temperature=message.temperature if message.HasField("temperature") else None,
        max_tokens=message.max_tokens if message.HasField("max_tokens") else None,
        context_window=message.context_window if message.HasField("context_window") else None,
        embedding_dimension=message.embedding_dimension if message.HasField("embedding_dimension") else None,
        extra=MessageToDict(message.extra) if message.HasField("extra") else {},
    )


def record_to_proto(record: ModelRecord, default_for: list[int] | None = None) -> pb.Model:
    """The API view of a record: the key is never included, only its masked hint."""
    return pb.Model(
        id=record.id,
        display_name=record.display_name,
        provider_id=record.provider_id,
        model_name=record.model_name,
        types=sorted(record.types),  # type: ignore[arg-type]
        base_url=record.base_url,
        parameters=params_to_proto(record.parameters),
        api_key_hint=record.api_key_hint,
        builtin=record.builtin,
        tenant_id=record.tenant_id,
        default_for=sorted(default_for or []),  # type: ignore[arg-type]
        create_time=_timestamp(record.create_time),
        update_time=_timestamp(record.update_time),
        description=record.description,
    )
