"""The registry's persistence on SQLAlchemy 2 async: SQLite (aiosqlite) by default, PostgreSQL (asyncpg).

Tables: ``models`` (one row per record; types as a comma-separated list of type names, parameters as
JSON, the API key only as ciphertext), ``model_defaults`` (tenant, type name → model id),
``model_usages`` (tenant, model, consumer) and ``settings`` (key/value). Tables are created on
:meth:`SqlModelStore.open`. Every query filters by tenant: a tenant sees its rows plus the built-in
rows (``tenant_id = ''``). Foreign keys from defaults and usages to models make a delete of a model
that is still referenced fail even when two requests race.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    case,
    delete,
    exists,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from knowsphere.modelhub.v1.modelhub_enums import ModelConsumerKind, ModelType
from knowsphere_modelhub.domain.ports import ModelReferenced, Page, StoredKey, Usage
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord, in_proto_order
from knowsphere_sqlstore import (
    AnyRow,
    SettingsRows,
    SqlDatabase,
    UtcDateTime,
    record_from_row,
    row_from,
    settings_table,
)

PAGE_TOKEN_VERSION = 1
TYPE_SEPARATOR = ","


metadata = MetaData()

models = Table(
    "models",
    metadata,
    Column("id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("display_name", Text, nullable=False),
    Column("provider_id", String(), nullable=False),
    Column("model_name", Text, nullable=False),
    Column("types", Text, nullable=False),
    Column("base_url", Text, nullable=False),
    Column("parameters", Text, nullable=False),
    Column("api_key_ciphertext", Text, nullable=True),
    Column("api_key_hint", Text, nullable=False),
    Column("builtin", Boolean, nullable=False),
    Column("description", Text, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    Index("ix_models_tenant_order", "tenant_id", "create_time", "id"),
)

model_defaults = Table(
    "model_defaults",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("model_type", String(), primary_key=True),
    Column("model_id", String(), ForeignKey("models.id"), nullable=False),
    Index("ix_model_defaults_model", "model_id"),
)

model_usages = Table(
    "model_usages",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("model_id", String(), ForeignKey("models.id"), primary_key=True),
    Column("consumer_kind", Integer, primary_key=True),
    Column("consumer_id", String(), primary_key=True),
    Column("consumer_name", Text, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Index("ix_model_usages_model", "model_id"),
)

settings = settings_table("settings", metadata)

# Columns an update or a built-in upsert may change: all but these.
_IMMUTABLE = frozenset({"id", "tenant_id", "builtin", "create_time"})
_MUTABLE = tuple(column.name for column in models.columns if column.name not in _IMMUTABLE)

# Built-in rows sort before the tenant's own.
_rank = case((models.c.tenant_id == "", 0), else_=1)


def _types_text(types: frozenset[ModelType]) -> str:
    return TYPE_SEPARATOR.join(in_proto_order(types))


def _types_from_text(text: str) -> frozenset[ModelType]:
    return frozenset(ModelType(name) for name in text.split(TYPE_SEPARATOR) if name)


def _params_json(params: ModelParams) -> str:
    # Only the parameters that are set: unset ones (None) and no extras leave no key.
    data = {key: value for key, value in asdict(params).items() if value is not None and value != {}}
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


def _params_from_json(text: str) -> ModelParams:
    data = json.loads(text) if text else {}
    return record_from_row(ModelParams, data, extra=dict(data.get("extra") or {}))


def _row(record: ModelRecord) -> dict[str, Any]:
    return row_from(
        models, record, types=_types_text(record.types), parameters=_params_json(record.parameters)
    )


def _record(row: AnyRow) -> ModelRecord:
    return record_from_row(
        ModelRecord, row, types=_types_from_text(row.types), parameters=_params_from_json(row.parameters)
    )


def _kind_number(kind: ModelConsumerKind | None) -> int:
    if kind is None:
        raise ValueError("a usage needs a consumer kind")
    return kind.number


def _visible(tenant_id: str) -> ColumnElement[bool]:
    return or_(models.c.tenant_id == tenant_id, models.c.tenant_id == "")


def _filter_key(model_type: ModelType | None, provider_id: str | None) -> str:
    return f"{model_type.number if model_type else ''}|{provider_id or ''}"


def _encode_token(record: ModelRecord, filter_key: str) -> str:
    data = {
        "v": PAGE_TOKEN_VERSION,
        "r": 0 if record.tenant_id == "" else 1,
        "t": record.create_time.astimezone(UTC).isoformat(),
        "i": record.id,
        "f": filter_key,
    }
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode_token(token: str, filter_key: str) -> tuple[int, datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        if data["v"] != PAGE_TOKEN_VERSION:
            raise ValueError("page token of another version")
        rank, after_time, after_id = int(data["r"]), datetime.fromisoformat(data["t"]), str(data["i"])
        given_filter = data["f"]
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise ValueError("page_token is not a token returned by a previous list call") from exc
    if given_filter != filter_key:
        raise ValueError("page_token was returned for other filters (type or provider) than this call's")
    if after_time.tzinfo is None:
        raise ValueError("page_token is not a token returned by a previous list call")
    return rank, after_time, after_id


class SqlModelStore(SqlDatabase):
    """:class:`~knowsphere_modelhub.domain.ports.ModelStore` on a SQLAlchemy async URL."""

    def __init__(self, url: str) -> None:
        super().__init__(url, metadata, owner="SqlModelStore")
        self._settings = SettingsRows(self, settings)

    # --- models -----------------------------------------------------------------------------------

    async def create(self, record: ModelRecord) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(models.insert().values(_row(record)))

    async def get(self, tenant_id: str, model_id: str) -> ModelRecord | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(models).where(models.c.id == model_id, _visible(tenant_id)))
            ).first()
        return _record(row) if row is not None else None

    async def list(
        self,
        tenant_id: str,
        *,
        model_type: ModelType | None,
        provider_id: str | None,
        page_size: int,
        page_token: str,
    ) -> Page:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        filter_key = _filter_key(model_type, provider_id)
        query = select(models).where(_visible(tenant_id))
        if model_type:
            # ",embedding,knowledge_qa," contains ",knowledge_qa," (autoescape: "_" is a LIKE wildcard).
            wrapped = literal(TYPE_SEPARATOR) + models.c.types + literal(TYPE_SEPARATOR)
            query = query.where(wrapped.contains(f",{model_type.value},", autoescape=True))
        if provider_id:
            query = query.where(models.c.provider_id == provider_id)
        if page_token:
            rank, after_time, after_id = _decode_token(page_token, filter_key)
            query = query.where(
                or_(
                    _rank > rank,
                    and_(_rank == rank, models.c.create_time > after_time),
                    and_(_rank == rank, models.c.create_time == after_time, models.c.id > after_id),
                )
            )
        query = query.order_by(_rank, models.c.create_time, models.c.id).limit(page_size + 1)
        async with self.engine.connect() as conn:
            records = [_record(row) for row in (await conn.execute(query)).all()]
        if len(records) <= page_size:
            return Page(records=records, next_page_token="")
        records = records[:page_size]
        return Page(records=records, next_page_token=_encode_token(records[-1], filter_key))

    async def update(self, record: ModelRecord) -> None:
        values = {key: value for key, value in _row(record).items() if key in _MUTABLE}
        statement = (
            update(models)
            .where(models.c.id == record.id, models.c.tenant_id == record.tenant_id, models.c.tenant_id != "")
            .values(values)
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(statement)
        if result.rowcount == 0:
            raise LookupError(f"tenant {record.tenant_id!r} has no model {record.id!r}")

    async def delete(self, tenant_id: str, model_id: str) -> bool:
        try:
            async with self.engine.begin() as conn:
                if await self._referenced(conn, model_id):
                    raise ModelReferenced(f"model {model_id} is still a default or in use")
                result = await conn.execute(
                    delete(models).where(models.c.id == model_id, models.c.tenant_id == tenant_id)
                )
        except IntegrityError as exc:
            # A default or usage was added between the check and the delete.
            raise ModelReferenced(f"model {model_id} is still a default or in use") from exc
        return bool(result.rowcount)

    @staticmethod
    async def _referenced(conn: AsyncConnection, model_id: str) -> bool:
        query = select(
            or_(
                exists().where(model_defaults.c.model_id == model_id),
                exists().where(model_usages.c.model_id == model_id),
            )
        )
        return bool((await conn.execute(query)).scalar())

    async def upsert_builtin(self, record: ModelRecord) -> None:
        if record.tenant_id != "" or not record.builtin:
            raise ValueError("upsert_builtin takes built-in records (builtin=True, tenant_id='') only")
        statement = self.insert(models).values(_row(record))
        statement = statement.on_conflict_do_update(
            index_elements=[models.c.id],
            set_={key: statement.excluded[key] for key in _MUTABLE},
            where=models.c.tenant_id == "",
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(statement)
        if result.rowcount == 0:
            raise ValueError(f"model id {record.id!r} is taken by a tenant's model")

    # --- defaults ---------------------------------------------------------------------------------

    async def set_default(self, tenant_id: str, model_type: ModelType, model_id: str) -> None:
        key = (model_defaults.c.tenant_id == tenant_id, model_defaults.c.model_type == model_type.value)
        async with self.engine.begin() as conn:
            if not model_id:
                await conn.execute(delete(model_defaults).where(*key))
                return
            statement = self.insert(model_defaults).values(
                tenant_id=tenant_id, model_type=model_type.value, model_id=model_id
            )
            statement = statement.on_conflict_do_update(
                index_elements=[model_defaults.c.tenant_id, model_defaults.c.model_type],
                set_={"model_id": statement.excluded.model_id},
            )
            await conn.execute(statement)

    async def get_default(self, tenant_id: str, model_type: ModelType) -> str | None:
        query = select(model_defaults.c.model_id).where(
            model_defaults.c.tenant_id == tenant_id, model_defaults.c.model_type == model_type.value
        )
        async with self.engine.connect() as conn:
            value = (await conn.execute(query)).scalar()
        return str(value) if value is not None else None

    async def defaults_of(self, tenant_id: str, model_id: str) -> builtins.list[ModelType]:
        query = select(model_defaults.c.model_type).where(
            model_defaults.c.tenant_id == tenant_id, model_defaults.c.model_id == model_id
        )
        async with self.engine.connect() as conn:
            names = (await conn.execute(query)).scalars().all()
        return in_proto_order(ModelType(name) for name in names)

    # --- usages -----------------------------------------------------------------------------------

    async def put_usage(self, tenant_id: str, usage: Usage) -> None:
        statement = self.insert(model_usages).values(
            row_from(
                model_usages,
                usage,
                tenant_id=tenant_id,
                consumer_kind=_kind_number(usage.consumer_kind),
                create_time=datetime.now(UTC),
            )
        )
        statement = statement.on_conflict_do_update(
            index_elements=[
                model_usages.c.tenant_id,
                model_usages.c.model_id,
                model_usages.c.consumer_kind,
                model_usages.c.consumer_id,
            ],
            set_={"consumer_name": statement.excluded.consumer_name},
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def delete_usage(
        self, tenant_id: str, model_id: str, consumer_kind: ModelConsumerKind, consumer_id: str
    ) -> bool:
        statement = delete(model_usages).where(
            model_usages.c.tenant_id == tenant_id,
            model_usages.c.model_id == model_id,
            model_usages.c.consumer_kind == consumer_kind.number,
            model_usages.c.consumer_id == consumer_id,
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def list_usages(self, tenant_id: str, model_id: str) -> builtins.list[Usage]:
        query = (
            select(model_usages)
            .where(model_usages.c.tenant_id == tenant_id, model_usages.c.model_id == model_id)
            .order_by(model_usages.c.create_time, model_usages.c.consumer_kind, model_usages.c.consumer_id)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            record_from_row(Usage, row, consumer_kind=ModelConsumerKind.from_number(row.consumer_kind))
            for row in rows
        ]

    # --- settings and key rotation ----------------------------------------------------------------

    async def get_setting(self, key: str) -> str | None:
        return await self._settings.get_setting(key)

    async def put_setting(self, key: str, value: str) -> None:
        await self._settings.put_setting(key, value)

    async def add_setting(self, key: str, value: str) -> str:
        return await self._settings.add_setting(key, value)

    async def list_api_keys(self) -> builtins.list[StoredKey]:
        query = (
            select(
                models.c.tenant_id,
                models.c.id.label("model_id"),
                models.c.api_key_ciphertext.label("ciphertext"),
            )
            .where(models.c.api_key_ciphertext.is_not(None))
            .order_by(models.c.id)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [record_from_row(StoredKey, row) for row in rows]

    async def replace_api_key(self, model_id: str, old_ciphertext: str, new_ciphertext: str) -> bool:
        statement = (
            update(models)
            .where(models.c.id == model_id, models.c.api_key_ciphertext == old_ciphertext)
            .values(api_key_ciphertext=new_ciphertext)
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)
