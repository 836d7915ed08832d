"""Conversions between Python values and protobuf messages, written once for every boundary.

- :func:`timestamp`, :func:`datetime_of`, :func:`duration`, :func:`seconds_of`: the well-known types.
- :func:`message_from`: a message built from an object's same-named attributes (a dataclass record,
  another message), so a field added to both the record and the message crosses the boundary with no
  hand edit. Datetimes become Timestamps, float seconds Durations, :class:`ProtoEnum` members their
  numbers, nested records nested messages.
- :func:`record_from`: the other way, a dataclass built from a message's same-named fields, typed by
  the dataclass's annotations (Timestamps to datetimes, numbers to :class:`ProtoEnum` members, repeated
  fields to tuples or lists, unset optional fields to None).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere_contracts.protoenum import ProtoEnum, enum_class

M = TypeVar("M", bound=Message)
R = TypeVar("R")

# The well-known types converted to and from Python values (also by the gateway's JSON).
TIMESTAMP = Timestamp.DESCRIPTOR.full_name
DURATION = Duration.DESCRIPTOR.full_name
STRUCT = Struct.DESCRIPTOR.full_name
INTEGER_TYPES = frozenset(
    {
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_UINT64,
    }
)


def timestamp(value: datetime | None) -> Timestamp | None:
    """A protobuf Timestamp of an aware datetime; None stays None (the field is left unset)."""
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def datetime_of(message: Message, field: str) -> datetime | None:
    """The aware datetime of a Timestamp field; None when unset."""
    if not message.HasField(field):
        return None
    value: datetime = getattr(message, field).ToDatetime(tzinfo=UTC)
    return value


def duration(seconds: float | None) -> Duration | None:
    """A protobuf Duration of seconds; None stays None."""
    if seconds is None:
        return None
    value = Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def seconds_of(message: Message, field: str) -> float | None:
    """The seconds of a Duration field; None when unset."""
    if not message.HasField(field):
        return None
    return float(getattr(message, field).ToNanoseconds()) / 1e9


# --- record → message ---------------------------------------------------------------------------------


def _is_repeated(field: Any) -> bool:
    return bool(field.is_repeated)


def is_map(field: Any) -> bool:
    return (
        field.message_type is not None and field.message_type.GetOptions().map_entry and _is_repeated(field)
    )


Convert = Callable[[Any], Any]


def _scalar(field: Any) -> Convert:
    """How one value of a scalar field is given to a constructor."""
    integer = field.cpp_type in INTEGER_TYPES
    enum = field.enum_type
    if enum is not None:
        members = enum_class(enum.full_name)

        def convert_enum(value: Any) -> Any:
            if isinstance(value, ProtoEnum):
                return value.number
            if isinstance(value, str):  # a plain string names a member: "ready" → DOCUMENT_STATUS_READY
                try:
                    return members.parse(value).number
                except ValueError as error:
                    raise ValueError(f"{field.full_name}: {error}") from None
            return value

        return convert_enum

    def convert(value: Any) -> Any:
        if integer and isinstance(value, float):
            return round(value)
        return value

    return convert


def _single_message(field: Any) -> Convert:
    """How one value of a message field is given to a constructor."""
    name = field.message_type.full_name
    if name == TIMESTAMP:
        return lambda value: timestamp(value) if isinstance(value, datetime) else value
    if name == DURATION:
        return lambda value: value if isinstance(value, Message) else duration(float(value))
    if name == STRUCT:

        def struct(value: Any) -> Any:
            if isinstance(value, Message):
                return value
            message = Struct()
            message.update(dict(value))
            return message

        return struct
    message_class = GetMessageClass(field.message_type)
    return lambda value: value if isinstance(value, Message) else message_from(message_class, value)


def _converter(field: Any) -> Convert:
    """How the value of a field is given to a message constructor."""
    if is_map(field):
        return dict
    single = _scalar(field) if field.message_type is None else _single_message(field)
    if _is_repeated(field):
        return lambda values: [single(item) for item in values]
    return single


@cache
def _plan(descriptor: Any) -> tuple[tuple[str, Convert], ...]:
    """Each field of a message type with its converter, worked out once per type."""
    return tuple((name, _converter(field)) for name, field in descriptor.fields_by_name.items())


def message_from(cls: type[M], source: object = None, /, **overrides: Any) -> M:
    """A ``cls`` message whose fields take ``source``'s same-named attributes, then ``overrides``.

    Attributes ``source`` lacks and values that are None leave the field unset. Unknown names in
    ``overrides`` are an error (a typo would otherwise drop a value silently).
    """
    plan = _plan(cls.DESCRIPTOR)
    if overrides:
        unknown = set(overrides) - set(cls.DESCRIPTOR.fields_by_name)
        if unknown:
            raise TypeError(f"{cls.DESCRIPTOR.full_name} has no field {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name, convert in plan:
        raw = overrides[name] if name in overrides else getattr(source, name, None)
        if raw is not None:
            values[name] = convert(raw)
    return cls(**values)


# --- message → record ---------------------------------------------------------------------------------


@cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _record_value(message: Message, field: Any, hint: Any) -> Any:
    hint, optional = _unwrap_optional(hint)
    if is_map(field):
        return dict(getattr(message, field.name))
    value = getattr(message, field.name)
    origin = typing.get_origin(hint)
    if _is_repeated(field):
        item_hint = (typing.get_args(hint) or (Any,))[0]
        items = [_single(field, item, item_hint) for item in value]
        return tuple(items) if origin is tuple else items
    unset = field.has_presence and not message.HasField(field.name)
    if unset and (optional or field.message_type is not None):
        return None
    return _single(field, value, hint)


def _single(field: Any, value: Any, hint: Any) -> Any:
    message_type = field.message_type
    if message_type is None:
        if isinstance(hint, type) and issubclass(hint, ProtoEnum):
            return hint.from_number(value)
        return value
    if message_type.full_name == TIMESTAMP:
        return value.ToDatetime(tzinfo=UTC)
    if message_type.full_name == DURATION:
        return float(value.ToNanoseconds()) / 1e9
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return record_from(hint, value)
    return value


def record_from(cls: type[R], message: Message, /, **overrides: Any) -> R:
    """A ``cls`` dataclass from ``message``'s same-named fields, then ``overrides``.

    Dataclass fields the message lacks take ``overrides`` or their defaults.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    fields = message.DESCRIPTOR.fields_by_name
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        if item.name in overrides:
            values[item.name] = overrides[item.name]
        elif item.name in fields:
            values[item.name] = _record_value(message, fields[item.name], hints[item.name])
    return cls(**values)
