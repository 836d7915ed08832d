"""Protobuf messages as the gateway's JSON, and JSON request bodies as messages: one mapping for every route.

The public JSON of a message follows from its descriptor, so a field added to a proto reaches the HTTP
API (and its OpenAPI document) with no hand edit:

- every field under its proto name, in declaration order;
- enums as the lower-case names of ``knowsphere.<svc>.v1.<svc>_enums`` (``DOCUMENT_STATUS_READY`` →
  ``"ready"``); the zero value (and a number this build does not know) → null; in a list, such values
  are left out;
- ``google.protobuf.Timestamp`` as an RFC 3339 string; ``google.protobuf.Duration`` as float seconds under
  the field name with ``_seconds`` appended (``eta`` → ``eta_seconds``);
- an unset message field or unset ``optional`` / oneof scalar → null; repeated → list; map → object;
  ``google.protobuf.Struct`` → object; int64 → number; bytes → base64.

:func:`to_json` renders a message, :func:`json_model` is the pydantic model of that JSON (the routes'
``response_model``, which documents it and checks it), :func:`body_model` the pydantic model of a
request body for a message (every field optional, enum names checked, unknown keys refused) and
:func:`from_json` turns such a body into the message, keeping presence: a key that is absent or null
leaves its field unset. :class:`RequestBody` is the base of every request body, generated or
hand-written.
"""

from __future__ import annotations

import base64
import keyword
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from google.protobuf import descriptor_pool, json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import ListValue, Value
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
    create_model,
)
from pydantic_core import PydanticCustomError

# The well-known type names, the integer kinds and the map test are the record↔message conversion's.
from knowsphere_contracts.convert import DURATION, INTEGER_TYPES, STRUCT, TIMESTAMP, duration, is_map
from knowsphere_contracts.protoenum import enum_class
from knowsphere_contracts.services import CONTRACTS

M = TypeVar("M", bound=Message)

ProtoField = Any
"""A ``FieldDescriptor`` (typed loosely: the stubs tell the pure-Python and upb descriptor classes apart)."""
Render = Callable[[Any], Any]
"""How one message type is rendered instead of by the rules (see ``replace`` of :func:`to_json`)."""

_JSON_TYPES = frozenset({STRUCT, Value.DESCRIPTOR.full_name, ListValue.DESCRIPTOR.full_name})
_FLOATS = frozenset({FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT})
DURATION_SUFFIX = "_seconds"

RFC3339 = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
BASE64 = Annotated[str, WithJsonSchema({"type": "string", "format": "byte"})]


class RequestBody(BaseModel):
    """The base of every JSON request body: a key it does not declare is refused (422 naming the key)
    instead of dropped, so a misspelt key is never taken for an absent one."""

    model_config = ConfigDict(extra="forbid")


def _json_integer(value: Any) -> Any:
    # JSON has numbers, not integers: 64.0 is the integer 64, but true and "64" are no integers (which
    # pydantic's lax mode would take).
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


JSON_INTEGER = BeforeValidator(_json_integer)
"""Makes an ``int`` of a request body a JSON number without a fraction, never a boolean or a string:
``Annotated[int, Field(ge=…, le=…), JSON_INTEGER]`` (after the bounds, so that the schema shows them)."""
JsonFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A number of a request body: never a boolean, a string, infinite or NaN."""
JsonBool = StrictBool
"""A boolean of a request body: ``true`` or ``false``, never 0, 1 or a string."""

INTEGER_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}
"""What each proto integer kind holds: a body value outside it is a 422, not a failed conversion."""


class ProtoJson(BaseModel):
    """The base of the models generated from messages; ``proto_message`` is the message's full name."""

    model_config = ConfigDict(protected_namespaces=(), populate_by_name=True)
    proto_message: ClassVar[str] = ""


class ProtoJsonBody(ProtoJson, RequestBody):
    """The base of the request bodies generated from messages (:func:`body_model`)."""


# --- names ---------------------------------------------------------------------------------------


def json_name(field: ProtoField) -> str:
    """The JSON key of a field: its proto name, with ``_seconds`` appended for a Duration."""
    if field.message_type is not None and field.message_type.full_name == DURATION:
        return field.name + DURATION_SUFFIX
    return field.name


@cache
def _fields(message: Any) -> tuple[ProtoField, ...]:
    """The fields of a message descriptor, in declaration order (worked out once per message type)."""
    return tuple(message.fields)


@cache
def _fields_by_json_name(message: Any) -> dict[str, ProtoField]:
    """The fields of a message descriptor by their JSON keys (once per message type)."""
    return {json_name(field): field for field in _fields(message)}


def _enum_name(enum: EnumDescriptor, number: int) -> str | None:
    member = enum_class(enum.full_name).from_number(number)
    return member.value if member is not None else None


@cache
def _shared_names() -> frozenset[str]:
    """Top-level message names that more than one contract declares (they get a service prefix)."""
    counts = Counter(
        name for contract in CONTRACTS.values() for name in contract.descriptor.file.message_types_by_name
    )
    return frozenset(name for name, count in counts.items() if count > 1)


def schema_name(message: Descriptor) -> str:
    """The OpenAPI schema name of a message: its name (``Document``), prefixed with its service
    (``RetrievalDeleteDocumentRequest``) when another contract uses the same name."""
    nested = message.full_name.removeprefix(message.file.package + ".").replace(".", "")
    if nested in _shared_names():
        service = message.file.package.split(".")[1] if "." in message.file.package else message.file.package
        return service.capitalize() + nested
    return nested


# --- message → JSON ------------------------------------------------------------------------------


def to_json(message: Message, *, replace: Mapping[str, Render] | None = None) -> dict[str, Any]:
    """Every field of ``message`` as JSON (see the module docstring). ``replace`` maps a message type's
    full name to a function that renders values of that type instead (the type's schema must then be
    replaced the same way in :func:`json_model`)."""
    replace = replace or {}
    out: dict[str, Any] = {}
    for field in _fields(message.DESCRIPTOR):
        value = getattr(message, field.name)
        if is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {
                str(key): _json_value(value_field, item, replace) for key, item in value.items()
            }
        elif field.is_repeated:
            items = [_json_value(field, item, replace) for item in value]
            out[field.name] = [item for item in items if item is not None]
        elif field.has_presence and not message.HasField(field.name):
            out[json_name(field)] = None
        else:
            out[json_name(field)] = _json_value(field, value, replace)
    return out


def _json_value(field: ProtoField, value: Any, replace: Mapping[str, Render]) -> Any:
    message_type = field.message_type
    if message_type is not None:
        if message_type.full_name in replace:
            return replace[message_type.full_name](value)
        if message_type.full_name == TIMESTAMP:
            return value.ToJsonString()
        if message_type.full_name == DURATION:
            return value.ToNanoseconds() / 1e9
        if message_type.full_name in _JSON_TYPES:
            return json_format.MessageToDict(value)
        return to_json(value, replace=replace)
    if field.enum_type is not None:
        return _enum_name(field.enum_type, value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


# --- the schema of that JSON ---------------------------------------------------------------------


def json_model(message: Descriptor, *, replace: Mapping[str, Any] | None = None) -> type[ProtoJson]:
    """The pydantic model of :func:`to_json`'s output for ``message`` (cached): every field required,
    nullable where :func:`to_json` gives null. ``replace`` maps a message type's full name to the type
    its values have instead (as rendered by the same ``replace`` of :func:`to_json`)."""
    return _json_model(message.full_name, tuple(sorted((replace or {}).items(), key=lambda kv: kv[0])))


@cache
def _json_model(full_name: str, replace: tuple[tuple[str, Any], ...]) -> type[ProtoJson]:
    message = descriptor_pool.Default().FindMessageTypeByName(full_name)
    replaced = dict(replace)
    fields: dict[str, Any] = {}
    for field in _fields(message):
        if is_map(field):
            value_type = _json_type(field.message_type.fields_by_name["value"], replaced)
            fields[field.name] = dict[str, value_type]  # type: ignore[valid-type]
        elif field.is_repeated:
            fields[field.name] = list[_json_type(field, replaced)]  # type: ignore[misc]
        elif field.has_presence:
            fields[json_name(field)] = _json_type(field, replaced) | None
        else:
            fields[json_name(field)] = _json_type(field, replaced)
    return _model(schema_name(message), message.full_name, fields, base=ProtoJson)


def _json_type(field: ProtoField, replace: Mapping[str, Any]) -> Any:
    message_type = field.message_type
    if message_type is not None:
        if message_type.full_name in replace:
            return replace[message_type.full_name]
        return _well_known_type(message_type) or _json_model(message_type.full_name, tuple(replace.items()))
    if field.enum_type is not None:
        values = tuple(member.value for member in enum_class(field.enum_type.full_name))
        # Singular enums are nullable (the zero value); a list leaves such values out.
        return Literal[values] if field.is_repeated else Literal[values] | None  # type: ignore[valid-type]
    return _scalar_type(field)


def _well_known_type(message: Descriptor) -> Any:
    if message.full_name == TIMESTAMP:
        return RFC3339
    if message.full_name == DURATION:
        return float
    if message.full_name == STRUCT:
        return dict[str, Any]
    if message.full_name == ListValue.DESCRIPTOR.full_name:
        return list[Any]
    if message.full_name == Value.DESCRIPTOR.full_name:
        return Any
    return None


def _scalar_type(field: ProtoField) -> Any:
    if field.cpp_type in INTEGER_TYPES:
        return int
    if field.cpp_type in _FLOATS:
        return float
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return bool
    if field.type == FieldDescriptor.TYPE_BYTES:
        return BASE64
    return str


def _model(name: str, full_name: str, fields: Mapping[str, Any], *, base: type[ProtoJson]) -> type[ProtoJson]:
    """A model of ``fields``: every one required for JSON the gateway writes, optional for a body."""
    definitions: dict[str, Any] = {}
    for key, annotation in fields.items():
        # A proto name that a model attribute or a keyword would shadow is kept as the JSON alias.
        attribute = f"{key}_" if keyword.iskeyword(key) or hasattr(base, key) else key
        default = None if issubclass(base, RequestBody) else ...
        definitions[attribute] = (annotation, Field(default, alias=key) if attribute != key else default)
    model: type[ProtoJson] = create_model(  # type: ignore[call-overload]
        name, __base__=base, __doc__=f"JSON of `{full_name}`.", **definitions
    )
    model.proto_message = full_name
    return model


# --- JSON → message ------------------------------------------------------------------------------


def body_model(message: Descriptor, *, exclude: frozenset[str] = frozenset()) -> type[ProtoJson]:
    """The pydantic model of a request body for ``message`` (cached): the JSON keys of
    :func:`to_json`, every one optional (absent or null = unset), enum names checked against the
    generated enum, unknown keys refused; an object given for a message field must set at least one
    of its keys. ``exclude`` leaves out fields the route takes from elsewhere (the path)."""
    return _body_model(message.full_name, exclude)


@cache
def _body_model(full_name: str, exclude: frozenset[str]) -> type[ProtoJson]:
    message = descriptor_pool.Default().FindMessageTypeByName(full_name)
    fields: dict[str, Any] = {}
    for field in _fields(message):
        if field.name in exclude:
            continue
        if is_map(field):
            annotation: Any = dict[str, _body_type(field.message_type.fields_by_name["value"])]  # type: ignore[misc]
        elif field.is_repeated:
            annotation = list[_body_type(field)]  # type: ignore[misc]
        else:
            annotation = _body_type(field)
        fields[json_name(field)] = annotation | None
    return _model(schema_name(message) + "Body", message.full_name, fields, base=ProtoJsonBody)


def _body_type(field: ProtoField) -> Any:
    message_type = field.message_type
    if message_type is not None:
        if message_type.full_name == TIMESTAMP:
            return datetime
        well_known = _well_known_type(message_type)
        if well_known is not None:
            return well_known
        nested = _body_model(message_type.full_name, frozenset())
        keys = [info.alias or name for name, info in nested.model_fields.items()]
        # The schema says what _sets_something checks: at least one key with a value.
        sets_one: dict[str, Any] = {
            "anyOf": [{"required": [k], "properties": {k: {"not": {"type": "null"}}}} for k in keys]
        }
        return Annotated[nested, AfterValidator(_sets_something), Field(json_schema_extra=sets_one)]
    if field.enum_type is not None:
        return Literal[tuple(member.value for member in enum_class(field.enum_type.full_name))]  # type: ignore[misc]
    if field.cpp_type in INTEGER_TYPES:
        low, high = INTEGER_RANGES[field.cpp_type]
        return Annotated[int, Field(ge=low, le=high), JSON_INTEGER]
    if field.cpp_type in _FLOATS:
        return JsonFloat
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return JsonBool
    return _scalar_type(field)


def _sets_something(body: ProtoJson) -> ProtoJson:
    # An empty object would set the message with every value at its default: for a PATCH, a reset of
    # the whole set that nobody asked for.
    if not body.model_dump(exclude_unset=True, exclude_none=True):
        keys = ", ".join(field.alias or name for name, field in type(body).model_fields.items())
        raise ValueError(f"an empty object sets nothing; give at least one of: {keys}")
    return body


def from_json(cls: type[M], data: Mapping[str, Any] | BaseModel) -> M:
    """A ``cls`` message from its JSON (keys as :func:`to_json` writes them; a pydantic body is taken
    with only the fields that were given). An absent or null key leaves its field unset, so presence
    survives for ``optional`` fields and partial updates; enum values are the generated names (or
    :class:`ProtoEnum` members). An unknown key or enum name raises ``ValueError`` naming it."""
    if isinstance(data, BaseModel):
        data = data.model_dump(by_alias=True, exclude_unset=True)
    message = cls()
    _fill(message, data)
    return message


def _fill(message: Message, data: Mapping[str, Any]) -> None:
    fields = _fields_by_json_name(message.DESCRIPTOR)
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            raise ValueError(f"{message.DESCRIPTOR.full_name} has no field {key!r}")
        if value is None:
            continue
        target = getattr(message, field.name)
        if is_map(field):
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            for map_key, item in value.items():
                proto_key = _scalar(key_field, map_key)
                if value_field.message_type is not None:
                    _fill_message(target[proto_key], item)
                else:
                    target[proto_key] = _scalar(value_field, item)
        elif field.is_repeated:
            for item in value:
                if field.message_type is not None:
                    _fill_message(target.add(), item)
                else:
                    target.append(_scalar(field, item))
        elif field.message_type is not None:
            target.SetInParent()
            _fill_message(target, value)
        else:
            setattr(message, field.name, _scalar(field, value))


def _fill_message(target: Message, value: Any) -> None:
    name = target.DESCRIPTOR.full_name
    if name == TIMESTAMP:
        if isinstance(value, datetime):
            target.FromDatetime(value)  # type: ignore[attr-defined]
        else:
            target.FromJsonString(value)  # type: ignore[attr-defined]
    elif name == DURATION:
        target.CopyFrom(duration(float(value)))  # type: ignore[arg-type]  # None only for None
    elif name in _JSON_TYPES:
        json_format.ParseDict(value, target)
    else:
        _fill(target, value)


def _scalar(field: ProtoField, value: Any) -> Any:
    if field.enum_type is not None:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return enum_class(field.enum_type.full_name).parse(str(value)).number
        except ValueError as error:
            raise ValueError(f"{field.name}: {error}") from None
    if field.type == FieldDescriptor.TYPE_BYTES and isinstance(value, str):
        return base64.b64decode(value)
    if field.cpp_type in INTEGER_TYPES and isinstance(value, str):
        return int(value)
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL and isinstance(value, str):
        return value == "true"
    return value


__all__ = [
    "DURATION_SUFFIX",
    "ProtoJson",
    "ProtoJsonBody",
    "RequestBody",
    "body_model",
    "from_json",
    "json_model",
    "json_name",
    "schema_name",
    "to_json",
]
