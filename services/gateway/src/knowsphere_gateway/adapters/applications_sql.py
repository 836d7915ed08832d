"""Applications on SQLAlchemy 2 async, in the tokens' database (``KS_GATEWAY_DATABASE_URL``: SQLite in
the data dir by default, PostgreSQL in production). Every read and change filters by tenant; a name is
unique per tenant (a unique constraint, so two replicas cannot both take it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    and_,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from knowsphere_gateway.domain.applications import ApplicationNameTaken, ApplicationRecord, Platform
from knowsphere_sqlstore import AnyRow, SqlDatabase, UtcDateTime, record_from_row, row_from

metadata = MetaData()

applications = Table(
    "applications",
    metadata,
    Column("id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("name", String(), nullable=False),
    Column("display_name", String(), nullable=False),
    Column("platform", String(), nullable=False),
    Column("orchestrator_id", String(), nullable=False),
    Column("active", Boolean(), nullable=False),
    Column("rate_limit_per_second", Float(), nullable=False),
    Column("rate_limit_burst", Integer(), nullable=False),
    Column("created_by", String(), nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "name", name="uq_applications_tenant_name"),
)


def _record(row: AnyRow) -> ApplicationRecord:
    return record_from_row(ApplicationRecord, row, platform=Platform(row.platform))


def _owned(tenant_id: str, application_id: str) -> ColumnElement[bool]:
    return and_(applications.c.tenant_id == tenant_id, applications.c.id == application_id)


class SqlApplicationStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlApplicationStore")

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def add(self, record: ApplicationRecord) -> None:
        try:
            async with self._db.engine.begin() as conn:
                await conn.execute(
                    insert(applications).values(
                        row_from(applications, record, platform=record.platform.value)
                    )
                )
        except IntegrityError:
            raise ApplicationNameTaken(record.name) from None

    async def get(self, tenant_id: str, application_id: str) -> ApplicationRecord | None:
        return await self._one(_owned(tenant_id, application_id))

    async def get_by_name(self, tenant_id: str, name: str) -> ApplicationRecord | None:
        return await self._one(and_(applications.c.tenant_id == tenant_id, applications.c.name == name))

    async def _one(self, where: ColumnElement[bool]) -> ApplicationRecord | None:
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(select(applications).where(where))).first()
        return _record(row) if row is not None else None

    async def list(self, tenant_id: str) -> list[ApplicationRecord]:
        query = (
            select(applications)
            .where(applications.c.tenant_id == tenant_id)
            .order_by(applications.c.name, applications.c.id)
        )
        async with self._db.engine.connect() as conn:
            return [_record(row) for row in (await conn.execute(query)).all()]

    async def update(
        self, tenant_id: str, application_id: str, changes: Mapping[str, Any]
    ) -> ApplicationRecord | None:
        values = {k: v.value if isinstance(v, Platform) else v for k, v in changes.items()}
        unknown = values.keys() - set(applications.c.keys()) | values.keys() & {"id", "tenant_id"}
        if unknown:
            raise TypeError(f"applications cannot change {', '.join(sorted(unknown))}")
        if values:
            try:
                async with self._db.engine.begin() as conn:
                    await conn.execute(
                        update(applications).where(_owned(tenant_id, application_id)).values(**values)
                    )
            except IntegrityError:
                raise ApplicationNameTaken(str(values.get("name", ""))) from None
        return await self.get(tenant_id, application_id)

    async def delete(self, tenant_id: str, application_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(delete(applications).where(_owned(tenant_id, application_id)))
        return bool(result.rowcount)


class ApplicationStoreComponent:
    """The store as a lifecycle component: opened (tables created) before the API serves, closed last."""

    name = "application-store"

    def __init__(self, store: SqlApplicationStore) -> None:
        self.store = store

    async def start(self) -> object:
        await self.store.open()
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self.store.close()


__all__ = ["ApplicationStoreComponent", "SqlApplicationStore", "applications", "metadata"]
