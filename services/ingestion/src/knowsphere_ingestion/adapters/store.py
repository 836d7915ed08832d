"""Knowledge bases and documents in SQL (SQLite embedded, PostgreSQL in production).

Every read and write takes the tenant id, so one tenant never sees another's rows even with the other's
ids. Status changes are guarded by the ingest run: a worker of an older run can no longer overwrite the
status of a document that was re-ingested or deleted meanwhile.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from knowsphere_ingestion.domain.records import (
    ChunkingSettings,
    Document,
    Failure,
    KnowledgeBase,
    Migration,
    Progress,
    Status,
)
from knowsphere_sqlstore import SqlDatabase, UtcDateTime

metadata = MetaData()

knowledge_bases = Table(
    "ingestion_knowledge_bases",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("embedding_model_id", String(128), nullable=False),
    Column("embedding_dimension", Integer, nullable=False),
    Column("chunking", JSON, nullable=False),
    Column("graph_enabled", Boolean, nullable=False, default=False),
    Column("language_hint", String(16), nullable=False, default=""),
    Column("migration", JSON, nullable=True),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "name", name="uq_ingestion_kb_tenant_name"),
)

documents = Table(
    "ingestion_documents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("knowledge_base_id", String(64), nullable=False),
    Column("file_name", String(512), nullable=False),
    Column("content_type", String(256), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("blob_key", String(512), nullable=False),
    Column("status", String(16), nullable=False),
    Column("ingest_run_id", String(64), nullable=False, default=""),
    Column("failure", JSON, nullable=True),
    Column("warnings", JSON, nullable=False),
    Column("progress", JSON, nullable=False),
    Column("title", Text, nullable=False, default=""),
    Column("page_count", Integer, nullable=False, default=0),
    Column("chunk_count", Integer, nullable=False, default=0),
    Column("language", String(16), nullable=False, default=""),
    Column("metadata", JSON, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    Column("ready_time", UtcDateTime, nullable=True),
    Column("stage_seconds", JSON, nullable=False),
    Column("deleting", Boolean, nullable=False, default=False),
    Column("rank", Float, nullable=False, default=0.0),
    UniqueConstraint("tenant_id", "knowledge_base_id", "content_sha256", name="uq_ingestion_doc_content"),
    Index("ix_ingestion_doc_kb_created", "tenant_id", "knowledge_base_id", "create_time"),
)


class DuplicateName(Exception):
    """A knowledge base with this name already exists for the tenant."""


class DuplicateContent(Exception):
    """A document with this content already exists in the knowledge base."""

    def __init__(self, existing: Document) -> None:
        super().__init__(existing.id)
        self.existing = existing


def _now() -> datetime:
    return datetime.now(UTC)


def _failure_to_json(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {
        "stage": failure.stage,
        "code": failure.code,
        "reason": failure.reason,
        "attempts": failure.attempts,
        "time": (failure.time or _now()).isoformat(),
    }


def _failure_from_json(data: dict[str, Any] | None) -> Failure | None:
    if not data:
        return None
    return Failure(
        stage=data.get("stage", ""),
        code=data.get("code", ""),
        reason=data.get("reason", ""),
        attempts=int(data.get("attempts", 1)),
        time=datetime.fromisoformat(data["time"]) if data.get("time") else None,
    )


def _progress_to_json(progress: Progress) -> dict[str, Any]:
    return {
        "percent": progress.percent,
        "pages_parsed": progress.pages_parsed,
        "pages_total": progress.pages_total,
        "chunks_total": progress.chunks_total,
        "chunks_embedded": progress.chunks_embedded,
        "chunks_indexed": progress.chunks_indexed,
        "chunks_graphed": progress.chunks_graphed,
        "eta_seconds": progress.eta_seconds,
    }


def _progress_from_json(data: dict[str, Any] | None) -> Progress:
    data = data or {}
    return Progress(
        percent=float(data.get("percent", 0.0)),
        pages_parsed=int(data.get("pages_parsed", 0)),
        pages_total=int(data.get("pages_total", 0)),
        chunks_total=int(data.get("chunks_total", 0)),
        chunks_embedded=int(data.get("chunks_embedded", 0)),
        chunks_indexed=int(data.get("chunks_indexed", 0)),
        chunks_graphed=int(data.get("chunks_graphed", 0)),
        eta_seconds=data.get("eta_seconds"),
    )


def _migration_to_json(migration: Migration | None) -> dict[str, Any] | None:
    if migration is None:
        return None
    return {
        "from_model_id": migration.from_model_id,
        "to_model_id": migration.to_model_id,
        "to_dimension": migration.to_dimension,
        "state": migration.state,
        "documents_done": migration.documents_done,
        "documents_total": migration.documents_total,
        "failure_reason": migration.failure_reason,
        "start_time": migration.start_time.isoformat() if migration.start_time else None,
        "end_time": migration.end_time.isoformat() if migration.end_time else None,
    }


def _migration_from_json(data: dict[str, Any] | None) -> Migration | None:
    if not data:
        return None
    return Migration(
        from_model_id=data["from_model_id"],
        to_model_id=data["to_model_id"],
        to_dimension=int(data.get("to_dimension", 0)),
        state=data["state"],
        documents_done=int(data.get("documents_done", 0)),
        documents_total=int(data.get("documents_total", 0)),
        failure_reason=data.get("failure_reason", ""),
        start_time=datetime.fromisoformat(data["start_time"]) if data.get("start_time") else None,
        end_time=datetime.fromisoformat(data["end_time"]) if data.get("end_time") else None,
    )


def _document_columns(values: dict[str, Any]) -> dict[str, Any]:
    """Document fields as column values: failures, warnings and progress become JSON."""
    out = dict(values)
    if "failure" in out:
        out["failure"] = _failure_to_json(out["failure"])
    if "warnings" in out:
        out["warnings"] = [_failure_to_json(w) for w in out["warnings"]]
    if "progress" in out:
        out["progress"] = _progress_to_json(out["progress"])
    return out


def _kb_from_row(row: Any, counts: tuple[int, int, int] = (0, 0, 0)) -> KnowledgeBase:
    return KnowledgeBase(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        description=row.description,
        embedding_model_id=row.embedding_model_id,
        embedding_dimension=row.embedding_dimension,
        chunking=ChunkingSettings.from_dict(row.chunking or {}),
        graph_enabled=bool(row.graph_enabled),
        language_hint=row.language_hint,
        migration=_migration_from_json(row.migration),
        create_time=row.create_time,
        update_time=row.update_time,
        document_count=counts[0],
        chunk_count=counts[1],
        size_bytes=counts[2],
    )


def _doc_from_row(row: Any) -> Document:
    return Document(
        id=row.id,
        tenant_id=row.tenant_id,
        knowledge_base_id=row.knowledge_base_id,
        file_name=row.file_name,
        content_type=row.content_type,
        size_bytes=row.size_bytes,
        content_sha256=row.content_sha256,
        blob_key=row.blob_key,
        status=row.status,
        ingest_run_id=row.ingest_run_id,
        failure=_failure_from_json(row.failure),
        warnings=tuple(f for f in (_failure_from_json(w) for w in row.warnings or []) if f is not None),
        progress=_progress_from_json(row.progress),
        title=row.title,
        page_count=row.page_count,
        chunk_count=row.chunk_count,
        language=row.language,
        metadata=dict(row.metadata or {}),
        create_time=row.create_time,
        update_time=row.update_time,
        ready_time=row.ready_time,
    )


def encode_page_token(values: Sequence[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(values)).encode()).decode()


def decode_page_token(token: str, size: int) -> list[str]:
    try:
        values = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError) as error:
        raise ValueError("page_token: not a token from a previous response") from error
    if not isinstance(values, list) or len(values) != size or not all(isinstance(v, str) for v in values):
        raise ValueError("page_token: not a token from a previous response")
    return values


class IngestionStore(SqlDatabase):
    def __init__(self, url: str) -> None:
        super().__init__(url, metadata, owner="IngestionStore")

    # --- knowledge bases ------------------------------------------------------------------------

    async def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    knowledge_bases.insert().values(
                        id=kb.id,
                        tenant_id=kb.tenant_id,
                        name=kb.name,
                        description=kb.description,
                        embedding_model_id=kb.embedding_model_id,
                        embedding_dimension=kb.embedding_dimension,
                        chunking=kb.chunking.as_dict(),
                        graph_enabled=kb.graph_enabled,
                        language_hint=kb.language_hint,
                        migration=None,
                        create_time=kb.create_time,
                        update_time=kb.update_time,
                    )
                )
        except IntegrityError as error:
            raise DuplicateName(kb.name) from error
        return kb

    async def _counts(self, conn: Any, tenant: str, kb_ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        if not kb_ids:
            return {}
        rows = await conn.execute(
            select(
                documents.c.knowledge_base_id,
                func.count(),
                func.coalesce(func.sum(documents.c.chunk_count), 0),
                func.coalesce(func.sum(documents.c.size_bytes), 0),
            )
            .where(
                documents.c.tenant_id == tenant,
                documents.c.knowledge_base_id.in_(list(kb_ids)),
                documents.c.deleting.is_(False),
            )
            .group_by(documents.c.knowledge_base_id)
        )
        return {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in rows}

    async def get_kb(self, tenant: str, kb_id: str, *, with_counts: bool = True) -> KnowledgeBase | None:
        """One knowledge base; ``with_counts=False`` skips counting its documents (zeros instead)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(knowledge_bases).where(
                        knowledge_bases.c.tenant_id == tenant, knowledge_bases.c.id == kb_id
                    )
                )
            ).first()
            if row is None:
                return None
            counts = await self._counts(conn, tenant, [kb_id]) if with_counts else {}
        return _kb_from_row(row, counts.get(kb_id, (0, 0, 0)))

    async def list_kbs(self, tenant: str, limit: int, after_name: str | None) -> list[KnowledgeBase]:
        query = select(knowledge_bases).where(knowledge_bases.c.tenant_id == tenant)
        if after_name is not None:
            query = query.where(knowledge_bases.c.name > after_name)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.order_by(knowledge_bases.c.name).limit(limit))).all()
            counts = await self._counts(conn, tenant, [row.id for row in rows])
        return [_kb_from_row(row, counts.get(row.id, (0, 0, 0))) for row in rows]

    async def update_kb(self, tenant: str, kb_id: str, **values: Any) -> KnowledgeBase | None:
        if "chunking" in values and isinstance(values["chunking"], ChunkingSettings):
            values["chunking"] = values["chunking"].as_dict()
        if "migration" in values:
            values["migration"] = _migration_to_json(values["migration"])
        values["update_time"] = _now()
        try:
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(knowledge_bases)
                    .where(knowledge_bases.c.tenant_id == tenant, knowledge_bases.c.id == kb_id)
                    .values(**values)
                )
        except IntegrityError as error:
            raise DuplicateName(str(values.get("name", ""))) from error
        if result.rowcount == 0:
            return None
        return await self.get_kb(tenant, kb_id)

    async def delete_kb(self, tenant: str, kb_id: str) -> bool:
        """Removes the knowledge base row; its documents are marked for deletion (clean-up follows)."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                delete(knowledge_bases).where(
                    knowledge_bases.c.tenant_id == tenant, knowledge_bases.c.id == kb_id
                )
            )
            await conn.execute(
                update(documents)
                .where(documents.c.tenant_id == tenant, documents.c.knowledge_base_id == kb_id)
                .values(deleting=True)
            )
        return bool(result.rowcount)

    # --- documents ------------------------------------------------------------------------------

    async def create_document(self, document: Document) -> Document:
        """Records a new document; raises DuplicateContent with the existing one for the same content."""
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    documents.insert().values(
                        id=document.id,
                        tenant_id=document.tenant_id,
                        knowledge_base_id=document.knowledge_base_id,
                        file_name=document.file_name,
                        content_type=document.content_type,
                        size_bytes=document.size_bytes,
                        content_sha256=document.content_sha256,
                        blob_key=document.blob_key,
                        status=document.status,
                        ingest_run_id=document.ingest_run_id,
                        failure=None,
                        warnings=[],
                        progress=_progress_to_json(document.progress),
                        title="",
                        page_count=0,
                        chunk_count=0,
                        language="",
                        metadata=document.metadata,
                        create_time=document.create_time,
                        update_time=document.update_time,
                        ready_time=None,
                        stage_seconds={},
                        deleting=False,
                        rank=document.create_time.timestamp(),
                    )
                )
        except IntegrityError:
            existing = await self.find_by_content(
                document.tenant_id, document.knowledge_base_id, document.content_sha256
            )
            if existing is None:
                raise
            raise DuplicateContent(existing) from None
        return document

    async def find_by_content(self, tenant: str, kb_id: str, sha256: str) -> Document | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(documents).where(
                        documents.c.tenant_id == tenant,
                        documents.c.knowledge_base_id == kb_id,
                        documents.c.content_sha256 == sha256,
                        documents.c.deleting.is_(False),
                    )
                )
            ).first()
        return _doc_from_row(row) if row is not None else None

    async def get_document(
        self, tenant: str, document_id: str, *, include_deleting: bool = False
    ) -> Document | None:
        query = select(documents).where(documents.c.tenant_id == tenant, documents.c.id == document_id)
        if not include_deleting:
            query = query.where(documents.c.deleting.is_(False))
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _doc_from_row(row) if row is not None else None

    async def get_documents(self, tenant: str, document_ids: Sequence[str]) -> list[Document]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents).where(
                    documents.c.tenant_id == tenant,
                    documents.c.id.in_(list(document_ids)),
                    documents.c.deleting.is_(False),
                )
            )
            return [_doc_from_row(row) for row in rows]

    async def list_documents(
        self,
        tenant: str,
        kb_id: str,
        *,
        statuses: Sequence[str],
        limit: int,
        after: tuple[float, str] | None,
    ) -> list[Document]:
        query = select(documents).where(
            documents.c.tenant_id == tenant,
            documents.c.knowledge_base_id == kb_id,
            documents.c.deleting.is_(False),
        )
        if statuses:
            query = query.where(documents.c.status.in_(list(statuses)))
        if after is not None:
            rank, doc_id = after
            query = query.where(
                (documents.c.rank < rank) | and_(documents.c.rank == rank, documents.c.id < doc_id)
            )
        query = query.order_by(documents.c.rank.desc(), documents.c.id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [_doc_from_row(row) for row in await conn.execute(query)]

    async def update_document(
        self, tenant: str, document_id: str, *, run_id: str | None = None, **values: Any
    ) -> Document | None:
        """Changes a document; with ``run_id``, only while that run is the document's current one."""
        values = _document_columns(values)
        values["update_time"] = _now()
        condition = [
            documents.c.tenant_id == tenant,
            documents.c.id == document_id,
            documents.c.deleting.is_(False),
        ]
        if run_id is not None:
            condition.append(documents.c.ingest_run_id == run_id)
        async with self.engine.begin() as conn:
            result = await conn.execute(update(documents).where(*condition).values(**values))
        if result.rowcount == 0:
            return None
        return await self.get_document(tenant, document_id)

    async def set_stage(self, tenant: str, entries: Sequence[tuple[str, str, Progress]], status: str) -> None:
        """Sets the status and progress of documents (id, run id, progress) in one statement run once
        per document, each only while that run is its current one."""
        if not entries:
            return
        statement = (
            update(documents)
            .where(
                documents.c.tenant_id == tenant,
                documents.c.id == bindparam("b_id"),
                documents.c.ingest_run_id == bindparam("b_run"),
                documents.c.deleting.is_(False),
            )
            .values(status=status, progress=bindparam("b_progress"), update_time=_now())
        )
        rows = [
            {"b_id": document_id, "b_run": run_id, "b_progress": _progress_to_json(progress)}
            for document_id, run_id, progress in entries
        ]
        async with self.engine.begin() as conn:
            await conn.execute(statement, rows)

    async def finish_stages(
        self, tenant: str, stage: str, entries: Sequence[tuple[str, str, float, dict[str, Any]]]
    ) -> set[str]:
        """Stores the results of one stage for documents (id, run id, seconds, values — the same
        fields for each) in one transaction, adding the time each took; only for runs still current.
        Returns the ids of the documents recorded."""
        if not entries:
            return set()
        runs = {document_id: run_id for document_id, run_id, _, _ in entries}
        columns = sorted(_document_columns(entries[0][3]))
        statement = (
            update(documents)
            .where(
                documents.c.tenant_id == tenant,
                documents.c.id == bindparam("b_id"),
                documents.c.ingest_run_id == bindparam("b_run"),
            )
            .values(
                stage_seconds=bindparam("b_stage_seconds"),
                update_time=_now(),
                **{name: bindparam(f"b_{name}") for name in columns},
            )
        )
        async with self.engine.begin() as conn:
            found = await conn.execute(
                select(documents.c.id, documents.c.ingest_run_id, documents.c.stage_seconds).where(
                    documents.c.tenant_id == tenant,
                    documents.c.id.in_(list(runs)),
                    documents.c.deleting.is_(False),
                )
            )
            current = {row[0]: dict(row[2] or {}) for row in found if runs.get(row[0]) == row[1]}
            rows = []
            for document_id, run_id, seconds, values in entries:
                if document_id not in current:
                    continue
                spent = current[document_id]
                spent[stage] = round(float(spent.get(stage, 0.0)) + seconds, 6)
                encoded = _document_columns(values)
                rows.append(
                    {
                        "b_id": document_id,
                        "b_run": run_id,
                        "b_stage_seconds": spent,
                        **{f"b_{name}": encoded[name] for name in columns},
                    }
                )
            if rows:
                await conn.execute(statement, rows)
        return set(current)

    async def run_size(self, tenant: str, run_id: str) -> int:
        """How many documents an ingest run holds (the documents of one upload batch share it)."""
        async with self.engine.connect() as conn:
            return int(
                (
                    await conn.execute(
                        select(func.count()).where(
                            documents.c.tenant_id == tenant, documents.c.ingest_run_id == run_id
                        )
                    )
                ).scalar_one()
            )

    async def stage_seconds(self, tenant: str, kb_id: str) -> list[dict[str, float]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents.c.stage_seconds).where(
                    documents.c.tenant_id == tenant, documents.c.knowledge_base_id == kb_id
                )
            )
            return [dict(row[0] or {}) for row in rows]

    async def mark_deleting(self, tenant: str, document_id: str) -> Document | None:
        document = await self.get_document(tenant, document_id)
        if document is None:
            return None
        async with self.engine.begin() as conn:
            await conn.execute(
                update(documents)
                .where(documents.c.tenant_id == tenant, documents.c.id == document_id)
                .values(deleting=True, update_time=_now())
            )
        return document

    async def purge_document(self, tenant: str, document_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(documents).where(documents.c.tenant_id == tenant, documents.c.id == document_id)
            )

    async def purge_kb_documents(self, tenant: str, kb_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(documents).where(
                    documents.c.tenant_id == tenant, documents.c.knowledge_base_id == kb_id
                )
            )

    async def deleting_documents(self, limit: int = 100) -> list[Document]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(documents).where(documents.c.deleting.is_(True)).limit(limit))
            return [_doc_from_row(row) for row in rows]

    async def stale_queued(self, before: datetime, limit: int = 500) -> list[Document]:
        """Queued documents not touched since ``before``: their workflow may never have started."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents)
                .where(
                    documents.c.status == "queued",
                    documents.c.update_time < before,
                    documents.c.deleting.is_(False),
                )
                .limit(limit)
            )
            return [_doc_from_row(row) for row in rows]

    async def kb_documents(self, tenant: str, kb_id: str, statuses: Sequence[Status]) -> list[Document]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents).where(
                    documents.c.tenant_id == tenant,
                    documents.c.knowledge_base_id == kb_id,
                    documents.c.status.in_(list(statuses)),
                    documents.c.deleting.is_(False),
                )
            )
            return [_doc_from_row(row) for row in rows]
