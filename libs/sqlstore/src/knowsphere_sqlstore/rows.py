"""Records to rows and rows to records, by name, written once for every store.

- :func:`row_from`: the values of a table's row from a record's same-named attributes; a column the
  store encodes (JSON text, a joined list, a value of another type) is given as an override.
- :func:`record_from_row`: a dataclass (or NamedTuple) record from a row's same-named columns; a field
  the store decodes is given as an override.

So a field added to a record and a same-named column to its table is stored and read with no other
hand edit, and a store's mapping names only what it encodes. Unknown override names are an error: a
typo would otherwise drop a value silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar, cast

from sqlalchemy import Table
from sqlalchemy.engine import Row

R = TypeVar("R")

# A result row of any number of columns (``Row[Any]`` would be a row of exactly one).
AnyRow = Row[*tuple[Any, ...]]


def row_from(table: Table, record: object, /, **encoded: Any) -> dict[str, Any]:
    """Every column of ``table`` → the ``encoded`` value given for it, else ``record``'s same-named
    attribute.

    Raises ``TypeError`` for an override that names no column, and for a column that is neither
    overridden nor an attribute of ``record`` (a row is written whole: nothing is left to chance).
    """
    names = table.c.keys()
    if encoded:
        unknown = encoded.keys() - set(names)
        if unknown:
            raise TypeError(f"table {table.name} has no column {', '.join(sorted(unknown))}")
    row: dict[str, Any] = {}
    for name in names:
        if name in encoded:
            row[name] = encoded[name]
            continue
        try:
            row[name] = getattr(record, name)
        except AttributeError:
            raise TypeError(
                f"{type(record).__name__} has no attribute for column {table.name}.{name}: pass its value"
            ) from None
    return row


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    """The names a record class takes in its constructor, worked out once per class."""
    if dataclasses.is_dataclass(cls):
        return tuple(item.name for item in dataclasses.fields(cls) if item.init)
    names = getattr(cls, "_fields", None)
    if issubclass(cls, tuple) and isinstance(names, tuple):  # a NamedTuple
        return names
    raise TypeError(f"{cls.__name__} is neither a dataclass nor a NamedTuple")


def record_from_row(cls: type[R], row: AnyRow | Mapping[str, Any], /, **decoded: Any) -> R:
    """A ``cls`` record whose fields take the ``decoded`` values given, else ``row``'s same-named
    columns.

    ``row`` is a SQLAlchemy result row or any mapping (a JSON object read from a column). Columns
    that name no field are ignored; a field the row lacks takes its default, and one without a default
    makes the constructor raise ``TypeError`` naming it. Raises ``TypeError`` for an override that names
    no field.
    """
    names = _field_names(cast(type, cls))  # mypy holds an unbound type[R] unhashable
    if decoded:
        unknown = decoded.keys() - set(names)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    # A plain dict of the row reads faster than its RowMapping (grep builds one record per chunk read).
    columns: Mapping[str, Any] = dict(zip(row._fields, row, strict=True)) if isinstance(row, Row) else row
    values = {name: columns[name] for name in names if name not in decoded and name in columns}
    values.update(decoded)
    return cls(**values)
