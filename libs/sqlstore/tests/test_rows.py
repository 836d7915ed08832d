"""Records to rows and back (``row_from``, ``record_from_row``) through a real SQLite file."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, Text, select

from knowsphere_sqlstore import SqlDatabase, UtcDateTime, record_from_row, row_from

T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

metadata = MetaData()
notes = Table(
    "notes",
    metadata,
    Column("id", String(), primary_key=True),
    Column("title", Text, nullable=False),
    Column("tags_json", Text, nullable=False),  # encoded: JSON list
    Column("pages", Integer, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("archived", Integer, nullable=False),  # no record field: the store's own column
)


@dataclass(frozen=True)
class Note:
    id: str
    title: str
    create_time: datetime
    tags: tuple[str, ...] = ()
    pages: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # no column: kept at its default


class NoteLine(NamedTuple):
    id: str
    title: str


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[SqlDatabase]:
    db = SqlDatabase(f"sqlite+aiosqlite:///{tmp_path}/rows.db", metadata, owner="test")
    await db.open()
    yield db
    await db.close()


def _row(note: Note) -> dict[str, object]:
    return row_from(notes, note, tags_json=json.dumps(list(note.tags)), archived=0)


async def test_a_record_written_and_read_back_is_the_same_record(database: SqlDatabase) -> None:
    note = Note(id="n-1", title="Pumps", create_time=T0, tags=("a", "b"), pages=7)
    async with database.engine.begin() as conn:
        await conn.execute(notes.insert().values(_row(note)))
    async with database.engine.connect() as conn:
        row = (await conn.execute(select(notes))).one()
    assert row.tags_json == '["a", "b"]'  # the override is what is stored
    assert record_from_row(Note, row, tags=tuple(json.loads(row.tags_json))) == note


def test_the_row_holds_every_column_from_attributes_and_overrides() -> None:
    note = Note(id="n-1", title="Pumps", create_time=T0, pages=3)
    assert _row(note) == {
        "id": "n-1",
        "title": "Pumps",
        "tags_json": "[]",
        "pages": 3,
        "create_time": T0,
        "archived": 0,
    }


def test_a_column_the_record_lacks_must_be_given() -> None:
    note = Note(id="n-1", title="Pumps", create_time=T0)
    with pytest.raises(TypeError, match=r"notes\.archived"):
        row_from(notes, note, tags_json="[]")


def test_an_override_naming_no_column_is_refused() -> None:
    note = Note(id="n-1", title="Pumps", create_time=T0)
    with pytest.raises(TypeError, match="tags_jsn"):
        row_from(notes, note, tags_jsn="[]", archived=0)


async def test_fields_the_row_lacks_take_their_defaults(database: SqlDatabase) -> None:
    async with database.engine.begin() as conn:
        await conn.execute(notes.insert().values(_row(Note(id="n-1", title="Pumps", create_time=T0))))
        await conn.execute(notes.update().values(pages=4, tags_json='["x"]', title="Valves"))
    async with database.engine.connect() as conn:
        row = (await conn.execute(select(notes.c.id, notes.c.title, notes.c.create_time))).one()
    # Neither pages nor tags were selected: the defaults, not the stored values.
    assert record_from_row(Note, row) == Note(id="n-1", title="Valves", create_time=T0)


async def test_a_named_tuple_takes_the_selected_columns(database: SqlDatabase) -> None:
    async with database.engine.begin() as conn:
        await conn.execute(notes.insert().values(_row(Note(id="n-1", title="Pumps", create_time=T0))))
    async with database.engine.connect() as conn:
        row = (await conn.execute(select(notes))).one()
    assert record_from_row(NoteLine, row) == NoteLine("n-1", "Pumps")
    assert record_from_row(NoteLine, row, title="Decoded") == NoteLine("n-1", "Decoded")


def test_a_mapping_reads_like_a_row() -> None:
    # A JSON object written before ``pages`` existed still reads: the field takes its default.
    stored = {"id": "n-1", "title": "Pumps", "create_time": T0, "unknown_later_key": 1}
    assert record_from_row(Note, stored) == Note(id="n-1", title="Pumps", create_time=T0)


def test_a_required_field_missing_from_the_row_is_an_error_naming_it() -> None:
    with pytest.raises(TypeError, match="create_time"):
        record_from_row(Note, {"id": "n-1", "title": "Pumps"})


def test_a_decoded_value_naming_no_field_is_refused() -> None:
    with pytest.raises(TypeError, match="tag"):
        record_from_row(Note, {"id": "n-1", "title": "Pumps", "create_time": T0}, tag=("a",))


def test_only_records_can_be_built() -> None:
    with pytest.raises(TypeError, match="neither a dataclass nor a NamedTuple"):
        record_from_row(dict, {"id": "n-1"})
