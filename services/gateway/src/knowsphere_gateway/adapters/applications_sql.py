"""Applications on SQLAlchemy 2 async, in the tokens' database (``KS_GATEWAY_DATABASE_URL``: SQLite in
the data dir by default, PostgreSQL in production). Every read and change filters by tenant; a name is
unique per tenant (a unique constraint, so two replicas cannot both take it).

Beside them: ``application_messages``, the channel message ids already taken (a WeCom message sent
again makes no second turn; a primary key, so two replicas cannot both take one), and
``gateway_settings``, the gateway's own key/value settings (the key ring's salt and check value).

The store creates what is missing when it opens: tables (``SqlDatabase``), and columns added to
``applications`` since a database was made (``ALTER TABLE … ADD COLUMN`` with the column's server
default), so an upgraded gateway opens its old database as it is.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    delete,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from knowsphere_gateway.domain.applications import (
    ApplicationNameTaken,
    ApplicationRecord,
    Platform,
    SealedSecret,
)
from knowsphere_gateway.domain.channel_config import ChannelSecrets
from knowsphere_runtime.lifecycle import StartupError
from knowsphere_runtime.secrets import MasterKeyError
from knowsphere_sqlstore import (
    AnyRow,
    SettingsRows,
    SqlDatabase,
    UtcDateTime,
    record_from_row,
    row_from,
    settings_table,
)

log = structlog.get_logger(__name__)

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
    # Added with the WeCom channels: JSON objects, "{}" for the rows that were there before.
    Column("platform_config", Text(), nullable=False, server_default="{}"),
    Column("platform_secrets", Text(), nullable=False, server_default="{}"),
    UniqueConstraint("tenant_id", "name", name="uq_applications_tenant_name"),
)

application_messages = Table(
    "application_messages",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("application_id", String(), primary_key=True),
    Column("message_id", String(), primary_key=True),
    Column("claim_time", UtcDateTime, nullable=False),
    Index("ix_application_messages_claim_time", "claim_time"),
)

gateway_settings = settings_table("gateway_settings", metadata)


def _encode_secrets(sealed: Mapping[str, SealedSecret]) -> str:
    return json.dumps(
        {name: {"ciphertext": s.ciphertext, "hint": s.hint} for name, s in sorted(sealed.items())},
        separators=(",", ":"),
    )


def _decode_secrets(text: str) -> dict[str, SealedSecret]:
    return {name: SealedSecret(**value) for name, value in json.loads(text or "{}").items()}


def _encode_config(config: Mapping[str, str | int]) -> str:
    return json.dumps(dict(sorted(config.items())), separators=(",", ":"), ensure_ascii=False)


def _record(row: AnyRow) -> ApplicationRecord:
    return record_from_row(
        ApplicationRecord,
        row,
        platform=Platform(row.platform),
        platform_config=json.loads(row.platform_config or "{}"),
        platform_secrets=_decode_secrets(row.platform_secrets),
    )


def _add_missing_columns(connection: Connection) -> None:
    """``ALTER TABLE applications ADD COLUMN`` for each column the table lacks (each has a server
    default, so the rows already there get it)."""
    present = {column["name"] for column in inspect(connection).get_columns(applications.name)}
    for column in applications.columns:
        if column.name in present:
            continue
        assert column.server_default is not None, f"an added column needs a server default: {column.name}"
        kind = column.type.compile(dialect=connection.dialect)
        default = column.server_default.arg  # type: ignore[attr-defined]
        connection.exec_driver_sql(
            f"ALTER TABLE {applications.name} ADD COLUMN {column.name} {kind} NOT NULL DEFAULT '{default}'"
        )


def _row(record: ApplicationRecord) -> dict[str, Any]:
    return row_from(
        applications,
        record,
        platform=record.platform.value,
        platform_config=_encode_config(record.platform_config),
        platform_secrets=_encode_secrets(record.platform_secrets),
    )


def _column_value(name: str, value: Any) -> Any:
    """A changed field as its column stores it."""
    if isinstance(value, Platform):
        return value.value
    if name == "platform_config":
        return _encode_config(value)
    if name == "platform_secrets":
        return _encode_secrets(value)
    return value


def _owned(tenant_id: str, application_id: str) -> ColumnElement[bool]:
    return and_(applications.c.tenant_id == tenant_id, applications.c.id == application_id)


class SqlApplicationStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlApplicationStore")
        self._settings = SettingsRows(self._db, gateway_settings)

    async def open(self) -> None:
        await self._db.open()
        try:
            async with self._db.engine.begin() as conn:
                await conn.run_sync(_add_missing_columns)
        except (OperationalError, ProgrammingError):
            # Another replica added them at the same moment ("duplicate column"): check once more.
            async with self._db.engine.begin() as conn:
                await conn.run_sync(_add_missing_columns)

    async def close(self) -> None:
        await self._db.close()

    async def add(self, record: ApplicationRecord) -> None:
        try:
            async with self._db.engine.begin() as conn:
                await conn.execute(insert(applications).values(_row(record)))
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
        values = {k: _column_value(k, v) for k, v in changes.items()}
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
            await conn.execute(
                delete(application_messages).where(
                    application_messages.c.tenant_id == tenant_id,
                    application_messages.c.application_id == application_id,
                )
            )
        return bool(result.rowcount)

    # --- channel messages taken -------------------------------------------------------------------

    async def claim_message(
        self, tenant_id: str, application_id: str, message_id: str, now: datetime, keep: timedelta
    ) -> bool:
        claimed = self._db.insert(application_messages).values(
            tenant_id=tenant_id, application_id=application_id, message_id=message_id, claim_time=now
        )
        async with self._db.engine.begin() as conn:
            await conn.execute(
                delete(application_messages).where(application_messages.c.claim_time < now - keep)
            )
            result = await conn.execute(claimed.on_conflict_do_nothing())
        return bool(result.rowcount)

    # --- the gateway's settings -------------------------------------------------------------------

    async def get_setting(self, key: str) -> str | None:
        return await self._settings.get_setting(key)

    async def put_setting(self, key: str, value: str) -> None:
        await self._settings.put_setting(key, value)

    async def add_setting(self, key: str, value: str) -> str:
        return await self._settings.add_setting(key, value)

    # --- key rotation -----------------------------------------------------------------------------

    async def list_sealed(self) -> builtins.list[ApplicationRecord]:
        query = (
            select(applications).where(applications.c.platform_secrets != "{}").order_by(applications.c.id)
        )
        async with self._db.engine.connect() as conn:
            return [_record(row) for row in (await conn.execute(query)).all()]

    async def replace_secrets(
        self,
        tenant_id: str,
        application_id: str,
        old: Mapping[str, SealedSecret],
        new: Mapping[str, SealedSecret],
    ) -> bool:
        statement = (
            update(applications)
            .where(_owned(tenant_id, application_id), applications.c.platform_secrets == _encode_secrets(old))
            .values(platform_secrets=_encode_secrets(new))
        )
        async with self._db.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)


class ApplicationStoreComponent:
    """The store as a lifecycle component: opened (tables created) before the API serves, closed last.
    With ``secrets`` (a key ring: MASTER_KEY is set), MASTER_KEY is checked against what the store holds
    and channel secrets under a previous key are re-encrypted, before anything is served."""

    name = "application-store"

    def __init__(self, store: SqlApplicationStore, secrets: ChannelSecrets | None = None) -> None:
        self.store = store
        self._secrets = secrets

    async def start(self) -> object:
        await self.store.open()
        if self._secrets is not None:
            try:
                report = await self._secrets.verify(self.store)
            except MasterKeyError as error:
                raise StartupError(str(error)) from error
            if report.rotated:
                log.info("channel secrets re-encrypted with the current master key", records=report.rotated)
            for record, why in report.rejected:
                log.warning("channel secret cannot be decrypted; left as it is", record=record, reason=why)
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self.store.close()


__all__ = [
    "ApplicationStoreComponent",
    "SqlApplicationStore",
    "application_messages",
    "applications",
    "gateway_settings",
    "metadata",
]
