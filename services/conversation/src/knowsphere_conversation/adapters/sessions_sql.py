"""Sessions on SQLAlchemy 2 async: SQLite in the data dir by default, PostgreSQL in production
(``KS_CONVERSATION_DATABASE_URL``). Every statement filters by tenant and user."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    insert,
    select,
    update,
)

from knowsphere_conversation.domain.sessions import SessionPage, SessionRecord
from knowsphere_runtime.identity import Identity
from knowsphere_sqlstore import SqlDatabase, UtcDateTime

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("id", String(), primary_key=True),
    Column("title", Text, nullable=False),
    Column("agent_id", String(), nullable=False),
    Column("orchestrator_id", String(), nullable=False),
    Column("application_id", String(), nullable=False),
    Column("turn_count", Integer, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    Index("ix_sessions_recent", "tenant_id", "user_id", "update_time"),
)


def _record(row: Any) -> SessionRecord:
    values = dict(row._mapping)
    values["metadata"] = json.loads(values["metadata"])
    return SessionRecord(**values)


def _owned(owner: Identity, session_id: str) -> Any:
    return and_(
        sessions.c.tenant_id == owner.tenant_id,
        sessions.c.user_id == owner.user_id,
        sessions.c.id == session_id,
    )


class SqlSessionStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlSessionStore")

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def create(self, record: SessionRecord) -> None:
        values = {**record.__dict__, "metadata": json.dumps(record.metadata, sort_keys=True)}
        async with self._db.engine.begin() as conn:
            await conn.execute(insert(sessions).values(**values))

    async def get(self, owner: Identity, session_id: str) -> SessionRecord | None:
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(select(sessions).where(_owned(owner, session_id)))).first()
        return _record(row) if row is not None else None

    async def list(
        self,
        owner: Identity,
        *,
        agent_id: str,
        orchestrator_id: str,
        application_id: str,
        offset: int,
        limit: int,
    ) -> SessionPage:
        where = [sessions.c.tenant_id == owner.tenant_id, sessions.c.user_id == owner.user_id]
        for column, value in (
            (sessions.c.agent_id, agent_id),
            (sessions.c.orchestrator_id, orchestrator_id),
            (sessions.c.application_id, application_id),
        ):
            if value:
                where.append(column == value)
        query = (
            select(sessions)
            .where(and_(*where))
            .order_by(sessions.c.update_time.desc(), sessions.c.id)
            .offset(offset)
            .limit(limit + 1)
        )
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        found = [_record(r) for r in rows[:limit]]
        return SessionPage(found, offset + limit if len(rows) > limit else None)

    async def update_title(
        self, owner: Identity, session_id: str, title: str, when: datetime
    ) -> SessionRecord | None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                update(sessions).where(_owned(owner, session_id)).values(title=title, update_time=when)
            )
        return await self.get(owner, session_id)

    async def count_turn(self, owner: Identity, session_id: str, title: str, when: datetime) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                update(sessions)
                .where(_owned(owner, session_id))
                .values(
                    turn_count=sessions.c.turn_count + 1,
                    update_time=when,
                    title=func.coalesce(func.nullif(sessions.c.title, ""), title),
                )
            )

    async def delete(self, owner: Identity, session_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(delete(sessions).where(_owned(owner, session_id)))
        return bool(result.rowcount)


__all__ = ["SqlSessionStore"]
