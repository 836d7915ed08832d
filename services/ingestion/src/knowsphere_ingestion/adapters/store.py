"""Knowledge bases and documents in SQL (SQLite embedded, PostgreSQL in production): the queries.

Every read and write takes the tenant id, so one tenant never sees another's rows even with the other's
ids. Status changes are guarded by the ingest run: a worker of an older run can no longer overwrite the
status of a document that was re-ingested or deleted meanwhile. The tables are in ``store_tables``, the
conversion of records to and from their columns in ``store_codec``; what the store returns is typed with
the shared vocabulary (``DocumentStatus``, ``IngestionStage``, ``MigrationState``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Update, and_, bindparam, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from knowsphere_contracts.vocabulary import DocumentStatus, IngestionStage
from knowsphere_ingestion.adapters.store_codec import (
    NO_COUNTS,
    document_columns,
    document_from_row,
    kb_columns,
    kb_from_row,
    new_document_row,
    new_kb_row,
    now,
    progress_to_json,
    stage_value,
    status_value,
    status_values,
)
from knowsphere_ingestion.adapters.store_tables import documents, knowledge_bases, metadata
from knowsphere_ingestion.domain.records import Document, KnowledgeBase, Progress
from knowsphere_sqlstore import SqlDatabase

__all__ = [
    "DuplicateContent",
    "DuplicateName",
    "IngestionStore",
]


def _while_run_current(tenant: str) -> Update:
    """An UPDATE of the document bound as ``b_id`` while ``b_run`` is its current ingest run, for an
    executemany with one parameter set per document."""
    return update(documents).where(
        documents.c.tenant_id == tenant,
        documents.c.id == bindparam("b_id"),
        documents.c.ingest_run_id == bindparam("b_run"),
    )


class DuplicateName(Exception):
    """A knowledge base with this name already exists for the tenant."""


class DuplicateContent(Exception):
    """A document with this content already exists in the knowledge base."""

    def __init__(self, existing: Document) -> None:
        super().__init__(existing.id)
        self.existing = existing


class IngestionStore(SqlDatabase):
    def __init__(self, url: str) -> None:
        super().__init__(url, metadata, owner="IngestionStore")

    # --- knowledge bases ------------------------------------------------------------------------

    async def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        try:
            async with self.engine.begin() as conn:
                await conn.execute(knowledge_bases.insert().values(**new_kb_row(kb)))
        except IntegrityError as error:
            raise DuplicateName(kb.name) from error
        return kb

    async def _counts(
        self, conn: AsyncConnection, tenant: str, kb_ids: Sequence[str]
    ) -> dict[str, tuple[int, int, int]]:
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
        return kb_from_row(row, counts.get(kb_id, NO_COUNTS))

    async def list_kbs(self, tenant: str, limit: int, after_name: str | None) -> list[KnowledgeBase]:
        query = select(knowledge_bases).where(knowledge_bases.c.tenant_id == tenant)
        if after_name is not None:
            query = query.where(knowledge_bases.c.name > after_name)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.order_by(knowledge_bases.c.name).limit(limit))).all()
            counts = await self._counts(conn, tenant, [row.id for row in rows])
        return [kb_from_row(row, counts.get(row.id, NO_COUNTS)) for row in rows]

    async def update_kb(self, tenant: str, kb_id: str, **values: Any) -> KnowledgeBase | None:
        columns = kb_columns(values)
        columns["update_time"] = now()
        try:
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(knowledge_bases)
                    .where(knowledge_bases.c.tenant_id == tenant, knowledge_bases.c.id == kb_id)
                    .values(**columns)
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
                await conn.execute(documents.insert(), new_document_row(document))
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
        return document_from_row(row) if row is not None else None

    async def get_document(
        self, tenant: str, document_id: str, *, include_deleting: bool = False
    ) -> Document | None:
        query = select(documents).where(documents.c.tenant_id == tenant, documents.c.id == document_id)
        if not include_deleting:
            query = query.where(documents.c.deleting.is_(False))
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return document_from_row(row) if row is not None else None

    async def get_documents(self, tenant: str, document_ids: Sequence[str]) -> list[Document]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents).where(
                    documents.c.tenant_id == tenant,
                    documents.c.id.in_(list(document_ids)),
                    documents.c.deleting.is_(False),
                )
            )
            return [document_from_row(row) for row in rows]

    async def list_documents(
        self,
        tenant: str,
        kb_id: str,
        *,
        statuses: Sequence[DocumentStatus | str],
        limit: int,
        after: tuple[float, str] | None,
    ) -> list[Document]:
        """Newest first (by create time, then id); ``after`` is the (rank, id) of the previous page's
        last document; no statuses means all."""
        query = select(documents).where(
            documents.c.tenant_id == tenant,
            documents.c.knowledge_base_id == kb_id,
            documents.c.deleting.is_(False),
        )
        if statuses:
            query = query.where(documents.c.status.in_(status_values(statuses)))
        if after is not None:
            rank, doc_id = after
            query = query.where(
                (documents.c.rank < rank) | and_(documents.c.rank == rank, documents.c.id < doc_id)
            )
        query = query.order_by(documents.c.rank.desc(), documents.c.id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [document_from_row(row) for row in await conn.execute(query)]

    async def update_document(
        self, tenant: str, document_id: str, *, run_id: str | None = None, **values: Any
    ) -> Document | None:
        """Changes a document; with ``run_id``, only while that run is the document's current one."""
        columns = document_columns(values)
        columns["update_time"] = now()
        condition = [
            documents.c.tenant_id == tenant,
            documents.c.id == document_id,
            documents.c.deleting.is_(False),
        ]
        if run_id is not None:
            condition.append(documents.c.ingest_run_id == run_id)
        async with self.engine.begin() as conn:
            result = await conn.execute(update(documents).where(*condition).values(**columns))
        if result.rowcount == 0:
            return None
        return await self.get_document(tenant, document_id)

    async def set_stage(
        self, tenant: str, entries: Sequence[tuple[str, str, Progress]], status: DocumentStatus | str
    ) -> None:
        """Sets the status and progress of documents (id, run id, progress) in one statement run once
        per document, each only while that run is its current one."""
        if not entries:
            return
        statement = (
            _while_run_current(tenant)
            .where(documents.c.deleting.is_(False))
            .values(status=status_value(status), progress=bindparam("b_progress"), update_time=now())
        )
        rows = [
            {"b_id": document_id, "b_run": run_id, "b_progress": progress_to_json(progress)}
            for document_id, run_id, progress in entries
        ]
        async with self.engine.begin() as conn:
            await conn.execute(statement, rows)

    async def finish_stages(
        self,
        tenant: str,
        stage: IngestionStage | str,
        entries: Sequence[tuple[str, str, float, dict[str, Any]]],
    ) -> set[str]:
        """Stores the results of one stage for documents (id, run id, seconds, values — the same
        fields for each) in one transaction, adding the time each took; only for runs still current.
        Returns the ids of the documents recorded."""
        if not entries:
            return set()
        stage_name = stage_value(stage)
        runs = {document_id: run_id for document_id, run_id, _, _ in entries}
        columns = sorted(document_columns(entries[0][3]))
        statement = _while_run_current(tenant).values(
            stage_seconds=bindparam("b_stage_seconds"),
            update_time=now(),
            **{name: bindparam(f"b_{name}") for name in columns},
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
                spent[stage_name] = round(float(spent.get(stage_name, 0.0)) + seconds, 6)
                encoded = document_columns(values)
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
                .values(deleting=True, update_time=now())
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
            return [document_from_row(row) for row in rows]

    async def stale_queued(self, before: datetime, limit: int = 500) -> list[Document]:
        """Queued documents not touched since ``before``: their workflow may never have started."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents)
                .where(
                    documents.c.status == DocumentStatus.QUEUED.value,
                    documents.c.update_time < before,
                    documents.c.deleting.is_(False),
                )
                .limit(limit)
            )
            return [document_from_row(row) for row in rows]

    async def kb_documents(
        self, tenant: str, kb_id: str, statuses: Sequence[DocumentStatus | str]
    ) -> list[Document]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(documents).where(
                    documents.c.tenant_id == tenant,
                    documents.c.knowledge_base_id == kb_id,
                    documents.c.status.in_(status_values(statuses)),
                    documents.c.deleting.is_(False),
                )
            )
            return [document_from_row(row) for row in rows]
