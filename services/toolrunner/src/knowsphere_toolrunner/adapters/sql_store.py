"""Externalised tool results and artifacts on SQLAlchemy 2 async: SQLite by default, PostgreSQL.

Tables: ``tool_result_refs`` (one row per stored result: owner, session, turn, tool, the full text and
its summary), ``tool_artifacts`` (files tools produced, bytes included, so every replica of the
service reads what another wrote) and ``workspace_files`` (deep agents' workspaces, one row per file of
a session). Every read filters by tenant and user: another caller's id reads as missing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    delete,
    func,
    insert,
    select,
    text,
)

from knowsphere.toolrunner.v1.toolrunner_enums import ContentFormat
from knowsphere_sqlstore import SqlDatabase, UtcDateTime, record_from_row, row_from
from knowsphere_toolrunner.domain.ports import StoredArtifact, StoredResult
from knowsphere_toolrunner.domain.workspace import (
    WorkspaceEntry,
    WorkspaceError,
    WorkspaceErrorCode,
    WorkspaceKey,
    WorkspaceLimits,
    full_message,
)

metadata = MetaData()

tool_result_refs = Table(
    "tool_result_refs",
    metadata,
    Column("ref_id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("user_id", String(), nullable=False),
    Column("session_id", String(), nullable=False),
    Column("turn_id", String(), nullable=False),
    Column("tool_name", String(), nullable=False),
    Column("content", Text, nullable=False),
    Column("format", String(), nullable=False),
    Column("char_count", Integer, nullable=False),
    Column("summary", Text, nullable=False),
    Column("distilled", Boolean, nullable=False),
    Column("degraded", Boolean, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Index("ix_tool_result_refs_session", "tenant_id", "session_id", "create_time"),
)

tool_artifacts = Table(
    "tool_artifacts",
    metadata,
    Column("artifact_id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("user_id", String(), nullable=False),
    Column("session_id", String(), nullable=False),
    Column("turn_id", String(), nullable=False),
    Column("tool_name", String(), nullable=False),
    Column("file_name", Text, nullable=False),
    Column("content_type", String(), nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Index("ix_tool_artifacts_session", "tenant_id", "session_id", "create_time"),
)


workspace_files = Table(
    "workspace_files",
    metadata,
    Column("tenant_id", String(), nullable=False),
    Column("user_id", String(), nullable=False),
    Column("session_id", String(), nullable=False),
    Column("path", Text, nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("tenant_id", "user_id", "session_id", "path"),
)


def _in_workspace(key: WorkspaceKey) -> tuple[Any, ...]:
    return (
        workspace_files.c.tenant_id == key.tenant_id,
        workspace_files.c.user_id == key.user_id,
        workspace_files.c.session_id == key.session_id,
    )


class SqlToolResultStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlToolResultStore")

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def put_result(self, result: StoredResult) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                insert(tool_result_refs).values(
                    row_from(tool_result_refs, result, format=result.format.value)
                )
            )

    def _owned(self, tenant_id: str, user_id: str, ref_id: str) -> tuple[Any, ...]:
        return (
            tool_result_refs.c.ref_id == ref_id,
            tool_result_refs.c.tenant_id == tenant_id,
            tool_result_refs.c.user_id == user_id,
        )

    async def get_result(self, tenant_id: str, user_id: str, ref_id: str) -> StoredResult | None:
        query = select(tool_result_refs).where(*self._owned(tenant_id, user_id, ref_id))
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return record_from_row(StoredResult, row, format=ContentFormat(row.format))

    async def get_result_page(
        self, tenant_id: str, user_id: str, ref_id: str, offset: int, length: int
    ) -> StoredResult | None:
        if offset < 0 or length < 0:
            raise ValueError(f"offset {offset} and length {length} must not be negative")
        # substr counts characters on both backends (SQLite on TEXT, PostgreSQL), 1-based.
        page = func.substr(tool_result_refs.c.content, offset + 1, length).label("content")
        columns = [c for c in tool_result_refs.c if c.name != "content"]
        query = select(*columns, page).where(*self._owned(tenant_id, user_id, ref_id))
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return record_from_row(StoredResult, row, format=ContentFormat(row.format))

    async def put_artifact(self, artifact: StoredArtifact, data: bytes) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(insert(tool_artifacts).values(row_from(tool_artifacts, artifact, data=data)))

    async def get_artifact(
        self, tenant_id: str, user_id: str, artifact_id: str
    ) -> tuple[StoredArtifact, bytes] | None:
        query = select(tool_artifacts).where(
            tool_artifacts.c.artifact_id == artifact_id,
            tool_artifacts.c.tenant_id == tenant_id,
            tool_artifacts.c.user_id == user_id,
        )
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return record_from_row(StoredArtifact, row), bytes(row.data)

    async def list_files(self, key: WorkspaceKey) -> list[WorkspaceEntry]:
        query = (
            select(workspace_files.c.path, workspace_files.c.size_bytes, workspace_files.c.update_time)
            .where(*_in_workspace(key))
            .order_by(workspace_files.c.path)
        )
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [WorkspaceEntry(row.path, row.size_bytes, row.update_time) for row in rows]

    async def read_file(self, key: WorkspaceKey, path: str) -> bytes | None:
        query = select(workspace_files.c.data).where(*_in_workspace(key), workspace_files.c.path == path)
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else bytes(row.data)

    async def write_file(self, key: WorkspaceKey, path: str, data: bytes, limits: WorkspaceLimits) -> None:
        async with self._db.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Writers of one workspace take turns, so two cannot pass the limits together (SQLite
                # writes one transaction at a time anyway).
                lock = f"{key.tenant_id}\x00{key.user_id}\x00{key.session_id}"
                await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": lock})
            others = (
                await conn.execute(
                    select(func.count(), func.coalesce(func.sum(workspace_files.c.size_bytes), 0)).where(
                        *_in_workspace(key), workspace_files.c.path != path
                    )
                )
            ).one()
            files, total = int(others[0]) + 1, int(others[1]) + len(data)
            if files > limits.max_files or total > limits.max_total_bytes:
                raise WorkspaceError(WorkspaceErrorCode.FULL, full_message(files, total, limits))
            await conn.execute(
                delete(workspace_files).where(*_in_workspace(key), workspace_files.c.path == path)
            )
            await conn.execute(
                insert(workspace_files).values(
                    tenant_id=key.tenant_id,
                    user_id=key.user_id,
                    session_id=key.session_id,
                    path=path,
                    size_bytes=len(data),
                    data=data,
                    update_time=datetime.now(UTC),
                )
            )
