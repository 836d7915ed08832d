"""A service's own key-value settings in one table of its database (e.g. the key ring's installation
salt and MASTER_KEY check value, :class:`knowsphere_runtime.secrets.SettingsStore`)."""

from __future__ import annotations

from sqlalchemy import Column, MetaData, String, Table, Text, select

from knowsphere_sqlstore.database import SqlDatabase


def settings_table(name: str, metadata: MetaData) -> Table:
    """The table: one row per key."""
    return Table(
        name,
        metadata,
        Column("key", String(), primary_key=True),
        Column("value", Text, nullable=False),
    )


class SettingsRows:
    """Reads and writes of a :func:`settings_table` of ``db``."""

    def __init__(self, db: SqlDatabase, table: Table) -> None:
        self._db = db
        self._table = table

    async def get_setting(self, key: str) -> str | None:
        query = select(self._table.c.value).where(self._table.c.key == key)
        async with self._db.engine.connect() as conn:
            value = (await conn.execute(query)).scalar()
        return str(value) if value is not None else None

    async def put_setting(self, key: str, value: str) -> None:
        statement = self._db.insert(self._table).values(key=key, value=value)
        statement = statement.on_conflict_do_update(
            index_elements=[self._table.c.key], set_={"value": statement.excluded.value}
        )
        async with self._db.engine.begin() as conn:
            await conn.execute(statement)

    async def add_setting(self, key: str, value: str) -> str:
        """Stores ``value`` unless ``key`` has one; returns what is stored (replicas starting together
        agree on the first)."""
        statement = self._db.insert(self._table).values(key=key, value=value).on_conflict_do_nothing()
        async with self._db.engine.begin() as conn:
            await conn.execute(statement)
            stored = (
                await conn.execute(select(self._table.c.value).where(self._table.c.key == key))
            ).scalar()
        return str(stored)


__all__ = ["SettingsRows", "settings_table"]
