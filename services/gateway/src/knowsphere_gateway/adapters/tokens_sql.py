"""API tokens on SQLAlchemy 2 async: SQLite in the data dir by default, PostgreSQL in production
(``KS_GATEWAY_DATABASE_URL``). Only hashes are stored; every read and change but the hash lookup filters
by tenant."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import (
    Column,
    ColumnElement,
    Index,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    insert,
    or_,
    select,
    update,
)

from knowsphere_gateway.domain.tokens import Role, TokenRecord
from knowsphere_sqlstore import AnyRow, SqlDatabase, UtcDateTime, record_from_row, row_from

metadata = MetaData()

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("user_id", String(), nullable=False),
    Column("application_id", String(), nullable=False),
    Column("name", String(), nullable=False),
    Column("role", String(), nullable=False),
    Column("token_hash", String(), nullable=False, unique=True),
    Column("created_by", String(), nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("expire_time", UtcDateTime, nullable=False),
    Column("revoke_time", UtcDateTime, nullable=True),
    Column("last_used_time", UtcDateTime, nullable=True),
    Index("ix_api_tokens_tenant", "tenant_id", "create_time"),
)


def _record(row: AnyRow) -> TokenRecord:
    return record_from_row(TokenRecord, row, role=Role(row.role))


def _owned(tenant_id: str, token_id: str) -> ColumnElement[bool]:
    return and_(api_tokens.c.tenant_id == tenant_id, api_tokens.c.id == token_id)


class SqlTokenStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlTokenStore")

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def add(self, record: TokenRecord) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                insert(api_tokens).values(row_from(api_tokens, record, role=record.role.value))
            )

    async def find_by_hash(self, token_hash: str) -> TokenRecord | None:
        async with self._db.engine.connect() as conn:
            row = (
                await conn.execute(select(api_tokens).where(api_tokens.c.token_hash == token_hash))
            ).first()
        return _record(row) if row is not None else None

    async def get(self, tenant_id: str, token_id: str) -> TokenRecord | None:
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(select(api_tokens).where(_owned(tenant_id, token_id)))).first()
        return _record(row) if row is not None else None

    async def list(self, tenant_id: str) -> list[TokenRecord]:
        query = (
            select(api_tokens)
            .where(api_tokens.c.tenant_id == tenant_id)
            .order_by(api_tokens.c.create_time.desc(), api_tokens.c.id)
        )
        async with self._db.engine.connect() as conn:
            return [_record(row) for row in (await conn.execute(query)).all()]

    async def revoke(self, tenant_id: str, token_id: str, when: datetime) -> TokenRecord | None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                update(api_tokens)
                .where(_owned(tenant_id, token_id), api_tokens.c.revoke_time.is_(None))
                .values(revoke_time=when)
            )
        return await self.get(tenant_id, token_id)

    async def revoke_for_application(self, tenant_id: str, application_id: str, when: datetime) -> int:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                update(api_tokens)
                .where(
                    api_tokens.c.tenant_id == tenant_id,
                    api_tokens.c.application_id == application_id,
                    api_tokens.c.revoke_time.is_(None),
                )
                .values(revoke_time=when)
            )
        return int(result.rowcount)

    async def record_last_used(self, times: Mapping[str, datetime]) -> None:
        if not times:
            return
        statement = (
            update(api_tokens)
            .where(api_tokens.c.id == bindparam("token_id"))
            # Replicas flush on their own: an older time never overwrites a newer one.
            .where(
                or_(api_tokens.c.last_used_time.is_(None), api_tokens.c.last_used_time < bindparam("used"))
            )
            .values(last_used_time=bindparam("used"))
        )
        async with self._db.engine.begin() as conn:
            await conn.execute(statement, [{"token_id": i, "used": t} for i, t in times.items()])


class TokenStoreComponent:
    """The store as a lifecycle component: opened (tables created) before the API serves, closed last."""

    name = "token-store"

    def __init__(self, store: SqlTokenStore) -> None:
        self.store = store

    async def start(self) -> object:
        await self.store.open()
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self.store.close()


__all__ = ["SqlTokenStore", "TokenStoreComponent", "api_tokens", "metadata"]
