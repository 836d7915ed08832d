"""An async SQLAlchemy engine for SQLite (embedded) or PostgreSQL (production), and shared types.

A database URL may carry a password: it is used to connect and never shown. ``SqlDatabase.url`` and
every error :meth:`SqlDatabase.open` raises show it with the password replaced by ``***``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, DateTime, Engine, MetaData, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.types import TypeDecorator

from knowsphere_telemetry.redaction import redact_text, redact_url

SQLITE_BUSY_TIMEOUT_MS = 5000

T = TypeVar("T")


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends (SQLite keeps naive UTC text, sorted as text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("stored datetimes must be timezone-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Per connection: WAL (readers do not block the writer), enforced foreign keys, a busy timeout."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # WAL with NORMAL sync: a commit is not fsynced on its own (checkpoints are). A crash of the
        # process loses nothing; a power cut may lose the last commits but never corrupts the file.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


class StoreOpenError(Exception):
    """A store could not be opened: the message names the store, its URL (password shown as ``***``)
    and the cause (its type and message, redacted alike)."""


def _password_of(url: str) -> str | None:
    try:
        return make_url(url).password
    except Exception:  # a URL SQLAlchemy cannot parse: redact_text still hides its userinfo
        return None


class SqlDatabase:
    """One engine per store. ``open`` connects and creates the tables of ``metadata`` that are missing."""

    def __init__(self, url: str, metadata: MetaData, *, owner: str = "store") -> None:
        self._url = url  # may hold a password: only ever given to the engine
        self._metadata = metadata
        self._owner = owner
        self._engine: AsyncEngine | None = None
        self._reader: Engine | None = None

    @property
    def url(self) -> str:
        """The database URL as it may be logged or shown: its password replaced by ``***``."""
        return redact_url(self._url)

    async def open(self) -> None:
        """Connect and create the missing tables; :class:`StoreOpenError` when that fails."""
        try:
            await self._open()
        except Exception as error:
            cause = redact_text(f"{type(error).__name__}: {error}", [_password_of(self._url)])
            # "from None": a chained cause is printed unredacted wherever the error is logged, and what a
            # driver puts in its messages is not ours to vouch for; its redacted text is kept here.
            raise StoreOpenError(f"cannot open {self._owner} at {self.url}: {cause}") from None

    async def _open(self) -> None:
        url = make_url(self._url)
        on_file = url.get_backend_name() == "sqlite" and bool(url.database) and url.database != ":memory:"
        if on_file:
            Path(str(url.database)).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url)
        if engine.dialect.name == "sqlite":
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(self._create_missing)
        except BaseException:
            await engine.dispose()  # no pool left behind by a store that did not open
            raise
        self._engine = engine
        if on_file:
            # A file's readers need no event-loop driver: see read().
            self._reader = create_engine(url.set(drivername="sqlite"))
            event.listen(self._reader, "connect", _sqlite_pragmas)

    async def read(self, query: Callable[[Connection], T]) -> T:
        """``query(connection)``, synchronous SQLAlchemy that only reads, on a connection of its own.

        On a SQLite file it runs whole on a worker thread (one hand-over instead of one per cursor
        call of the async driver: hot reads take a third of the time); elsewhere on the async engine.
        """
        if self._reader is not None:
            return await asyncio.to_thread(self._read_on_thread, self._reader, query)
        async with self.engine.connect() as conn:
            return await conn.run_sync(query)

    @staticmethod
    def _read_on_thread(reader: Engine, query: Callable[[Connection], T]) -> T:
        with reader.connect() as conn:
            return query(conn)

    def _create_missing(self, connection: Any) -> None:
        # create_all adds missing tables with their indexes; an index added to a table that already
        # exists is created here, so an upgraded store gets it on its next start.
        self._metadata.create_all(connection)
        for table in self._metadata.sorted_tables:
            for index in table.indexes:
                index.create(connection, checkfirst=True)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.dispose()
            self._reader = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError(f"{self._owner}.open() has not been awaited")
        return self._engine

    def insert(self, table: Table) -> Any:
        """INSERT with ON CONFLICT support for this backend."""
        if self.engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)
