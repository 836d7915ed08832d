"""Opening a store: tables and indexes that are missing are created, on a new file and on an old one;
a store that cannot open says where without saying its password."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
from sqlalchemy import Column, Index, Integer, MetaData, String, Table, inspect

from knowsphere_sqlstore import SqlDatabase, StoreOpenError


def _schema(with_ranking_index: bool) -> MetaData:
    metadata = MetaData()
    hits = Table(
        "hits",
        metadata,
        Column("owner", String(), primary_key=True),
        Column("document_id", String(), primary_key=True),
        Column("count", Integer, nullable=False),
    )
    if with_ranking_index:
        Index("ix_hits_ranking", hits.c.owner, hits.c.count, hits.c.document_id.desc())
    return metadata


async def _indexes(database: SqlDatabase) -> set[str]:
    async with database.engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_indexes("hits"))
    return {index["name"] for index in found if index["name"]}


async def test_an_index_added_to_an_existing_table_is_created_when_the_store_opens(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/store.db"
    old = SqlDatabase(url, _schema(with_ranking_index=False))
    await old.open()
    assert await _indexes(old) == set()
    await old.close()

    upgraded = SqlDatabase(url, _schema(with_ranking_index=True))
    await upgraded.open()
    assert await _indexes(upgraded) == {"ix_hits_ranking"}
    await upgraded.close()

    again = SqlDatabase(url, _schema(with_ranking_index=True))
    await again.open()  # opening a store that has everything changes nothing and does not fail
    assert await _indexes(again) == {"ix_hits_ranking"}
    await again.close()


async def test_a_read_sees_what_was_committed_on_a_file_and_in_memory(tmp_path: Path) -> None:
    for url in (f"sqlite+aiosqlite:///{tmp_path}/store.db", "sqlite+aiosqlite:///:memory:"):
        metadata = _schema(with_ranking_index=True)
        database = SqlDatabase(url, metadata)
        await database.open()
        hits = metadata.tables["hits"]
        async with database.engine.begin() as conn:
            await conn.execute(hits.insert(), [{"owner": "a", "document_id": "d1", "count": 3}])
        rows = await database.read(lambda conn, hits=hits: conn.execute(hits.select()).all())
        assert [(row.owner, row.document_id, row.count) for row in rows] == [("a", "d1", 3)], url
        await database.close()


async def test_a_store_that_cannot_open_names_its_host_but_never_its_password(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    password = "Sup3r-S3cret-pw"
    # Nothing listens on port 1 of the loopback: the connection is refused at once.
    url = f"postgresql+asyncpg://knowsphere:{password}@127.0.0.1:1/ks"
    database = SqlDatabase(url, _schema(with_ranking_index=False), owner="TestStore")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreOpenError) as caught:
        await database.open()
    shown = "".join(traceback.format_exception(caught.value))
    assert "cannot open TestStore at postgresql+asyncpg://knowsphere:***@127.0.0.1:1/ks" in shown
    assert "127.0.0.1" in shown and password not in shown
    assert database.url == "postgresql+asyncpg://knowsphere:***@127.0.0.1:1/ks"
    logged = caplog.text + "".join(capsys.readouterr())
    assert password not in logged
    with pytest.raises(RuntimeError, match="has not been awaited"):
        _ = database.engine  # nothing half-open is left behind


async def test_a_url_sqlalchemy_cannot_parse_is_refused_without_its_password() -> None:
    database = SqlDatabase("postgresql://knowsphere:pa55-word@db:notaport/ks", MetaData())
    with pytest.raises(StoreOpenError) as caught:
        await database.open()
    shown = "".join(traceback.format_exception(caught.value))
    assert "pa55-word" not in shown and "knowsphere:***@db:notaport/ks" in shown
    assert "ValueError" in shown
