"""The base of the string enums generated from proto enums (``knowsphere/<service>/v1/*_enums.py``).

A member's value is its proto value name without the enum's prefix, lower-cased
(``DOCUMENT_STATUS_READY`` → ``"ready"``): what code compares against, what is stored in SQL and what
JSON carries. Members come in proto number order; the zero value (``*_UNSPECIFIED``, "not set") is never
a member, so :meth:`ProtoEnum.from_number` answers ``None`` for it, and for a number this build does not
know (a newer peer's value).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from enum import StrEnum
from functools import cache
from typing import Any, Self

from google.protobuf import descriptor_pool

# The numbers of each generated enum, filled by ``register_numbers`` as the generated module loads.
_NUMBERS: dict[type[Any], dict[Any, int]] = {}
_MEMBERS: dict[type[Any], dict[int, Any]] = {}


class ProtoEnum(StrEnum):
    """A proto enum as strings; see the module docstring."""

    @classmethod
    def register_numbers(cls, numbers: Mapping[Self, int]) -> None:
        _NUMBERS[cls] = dict(numbers)
        _MEMBERS[cls] = {number: member for member, number in numbers.items()}

    @property
    def number(self) -> int:
        """The proto number of this member."""
        return _NUMBERS[type(self)][self]

    @classmethod
    def from_number(cls, number: int) -> Self | None:
        """The member of a proto number; None for the zero value or an unknown number."""
        member: Self | None = _MEMBERS[cls].get(number)
        return member

    @classmethod
    def parse(cls, value: str) -> Self:
        """The member named ``value`` (its string value); ValueError naming the accepted values."""
        try:
            return cls(value)
        except ValueError:
            accepted = ", ".join(member.value for member in cls)
            raise ValueError(f"{value!r} is not one of: {accepted}") from None


@cache
def enum_class(full_name: str) -> type[ProtoEnum]:
    """The generated :class:`ProtoEnum` of a proto enum by its full name (``knowsphere.<svc>.v1.X``)."""
    enum = descriptor_pool.Default().FindEnumTypeByName(full_name)
    module = importlib.import_module(enum.file.name.removesuffix(".proto").replace("/", ".") + "_enums")
    found = getattr(module, enum.name, None)
    if enum.containing_type is not None or not (isinstance(found, type) and issubclass(found, ProtoEnum)):
        raise TypeError(f"no generated string enum for {full_name} in {module.__name__}")
    return found
