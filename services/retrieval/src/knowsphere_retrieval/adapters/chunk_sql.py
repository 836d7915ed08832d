"""The chunk store on SQLAlchemy 2 async: SQLite (aiosqlite, WAL) by default, PostgreSQL (asyncpg).

The queries. The tables are in ``chunk_sql_tables``; what may be stored and how records become rows
and back in ``chunk_sql_codec``. Writes are upserts by key; a re-sent chunk that did not change is not
rewritten (its index time stays). ``grep`` streams the scope's chunks in reading order in pages,
pre-filtered in SQL by a literal every match must contain when the pattern has one, and runs RE2 in a
worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Table, and_, delete, distinct, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from knowsphere_retrieval.adapters.chunk_sql_codec import (
    DocumentChunks,
    candidate_from_row,
    check_chunk,
    check_document_info,
    check_text,
    chunk_from_row,
    chunk_row,
    document_chunks_from_row,
    document_from_row,
    document_row,
    kb_config_from_row,
    kb_config_row,
)
from knowsphere_retrieval.adapters.chunk_sql_tables import (
    CHUNK_CONTENT,
    GREP_COLUMNS,
    chunk_table,
    document_table,
    kb_config_table,
    metadata,
    parent_table,
)
from knowsphere_retrieval.domain.grep import GrepScan
from knowsphere_retrieval.domain.ports import (
    DocumentInfo,
    DocumentMetadata,
    GrepPlan,
    GrepResult,
    KnowledgeBaseConfig,
    KnowledgeBaseCounts,
    Scope,
    StoredChunk,
)
from knowsphere_sqlstore import AnyRow, SqlDatabase, record_from_row

R = TypeVar("R")

# Ids per IN (…) list: far below SQLite's and asyncpg's bound-parameter limits.
ID_BATCH = 500


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _replace_all_but_key(statement: Any, table: Table, row: dict[str, Any]) -> Any:
    """An upsert that replaces every other column of ``row`` when its primary key exists."""
    key = list(table.primary_key.columns)
    keys = {column.name for column in key}
    return statement.on_conflict_do_update(
        index_elements=key, set_={name: statement.excluded[name] for name in row if name not in keys}
    )


class SqlChunkStore(SqlDatabase):
    """:class:`~knowsphere_retrieval.domain.ports.ChunkStore` on a SQLAlchemy async URL.

    ``sqlite+aiosqlite:///path/chunks.db`` (the embedded default) or ``postgresql+asyncpg://…``.
    Call :meth:`open` before use and :meth:`close` after.
    """

    def __init__(self, url: str, *, clock: Callable[[], datetime] = _utc_now) -> None:
        super().__init__(url, metadata, owner="SqlChunkStore")
        self._clock = clock

    # --- writes -------------------------------------------------------------------------------------

    async def put_chunks(self, chunks: Sequence[StoredChunk], parents: dict[str, str]) -> None:
        """Upsert chunks and parent passages in one transaction (all or nothing).

        Raises ``ValueError`` naming the chunk and field when a chunk lacks an id, tenant, knowledge
        base or document, or when text holds a NUL character.
        """
        if not chunks:
            return
        for chunk in chunks:
            check_chunk(chunk)
        tenants = {chunk.tenant_id for chunk in chunks}
        if len(tenants) != 1:
            raise ValueError(f"a put_chunks batch belongs to one tenant (got {len(tenants)})")
        (tenant_id,) = tenants
        for parent_id, text in parents.items():
            if not parent_id:
                raise ValueError("parent ids must not be empty")
            check_text("text", f"parent {parent_id!r}", text)

        now = self._clock()
        # The last occurrence of a chunk id in a batch wins.
        rows = list({chunk.chunk_id: chunk_row(chunk, now) for chunk in chunks}.values())
        parent_rows = [
            {"tenant_id": tenant_id, "parent_id": parent_id, "text": text}
            for parent_id, text in parents.items()
        ]
        async with self.engine.begin() as conn:
            # executemany of one statement: its SQL is compiled once and cached, where a multi-row
            # VALUES statement would be compiled anew for every batch.
            chunk_upsert = self.insert(chunk_table)
            excluded = chunk_upsert.excluded
            chunk_upsert = chunk_upsert.on_conflict_do_update(
                index_elements=list(chunk_table.primary_key.columns),
                set_={name: excluded[name] for name in (*CHUNK_CONTENT, "index_time")},
                where=or_(*(chunk_table.c[name] != excluded[name] for name in CHUNK_CONTENT)),
            )
            await conn.execute(chunk_upsert, rows)
            if parent_rows:
                parent_upsert = self.insert(parent_table)
                parent_upsert = parent_upsert.on_conflict_do_update(
                    index_elements=[parent_table.c.tenant_id, parent_table.c.parent_id],
                    set_={"text": parent_upsert.excluded.text},
                    where=parent_table.c.text != parent_upsert.excluded.text,
                )
                await conn.execute(parent_upsert, parent_rows)

    async def put_document_info(self, info: DocumentMetadata) -> None:
        """Store the document's metadata, replacing the previous record."""
        await self.put_document_infos([info])

    async def put_document_infos(self, infos: Sequence[DocumentMetadata]) -> None:
        """Store several documents' metadata in one transaction, each replacing its previous record."""
        for info in infos:
            check_document_info(info)
        rows = [document_row(info) for info in infos]
        if not rows:
            return
        statement = _replace_all_but_key(self.insert(document_table), document_table, rows[0])
        async with self.engine.begin() as conn:
            await conn.execute(statement, rows)

    async def put_kb_config(self, config: KnowledgeBaseConfig) -> None:
        """Store a knowledge base's index settings, replacing the previous ones."""
        row = kb_config_row(config, self._clock())
        statement = _replace_all_but_key(self.insert(kb_config_table).values(row), kb_config_table, row)
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def get_kb_configs(
        self, tenant_id: str, knowledge_base_ids: Sequence[str]
    ) -> list[KnowledgeBaseConfig]:
        """The configs of the given knowledge bases of ``tenant_id`` that exist, in request order."""
        return await self._read_by_ids(
            kb_config_table, "knowledge_base_id", tenant_id, knowledge_base_ids, kb_config_from_row
        )

    async def delete_kb_config(self, tenant_id: str, knowledge_base_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(kb_config_table).where(
                    kb_config_table.c.tenant_id == tenant_id,
                    kb_config_table.c.knowledge_base_id == knowledge_base_id,
                )
            )

    # --- reads --------------------------------------------------------------------------------------

    async def _read_by_ids(
        self,
        table: Table,
        id_column: str,
        tenant_id: str,
        ids: Sequence[str],
        decode: Callable[[AnyRow], R],
    ) -> list[R]:
        """The records of ``tenant_id``'s rows whose ``id_column`` is among ``ids``: in request order,
        each once, unknown ids skipped."""
        wanted = _unique(ids)
        found: dict[str, R] = {}
        async with self.engine.connect() as conn:
            for batch in _batches(wanted, ID_BATCH):
                query = select(table).where(table.c.tenant_id == tenant_id, table.c[id_column].in_(batch))
                for row in (await conn.execute(query)).all():
                    found[getattr(row, id_column)] = decode(row)
        return [found[item] for item in wanted if item in found]

    async def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        return await self._read_by_ids(chunk_table, "chunk_id", tenant_id, chunk_ids, chunk_from_row)

    async def get_parents(self, tenant_id: str, parent_ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        async with self.engine.connect() as conn:
            for batch in _batches(_unique(parent_ids), ID_BATCH):
                query = select(parent_table.c.parent_id, parent_table.c.text).where(
                    parent_table.c.tenant_id == tenant_id, parent_table.c.parent_id.in_(batch)
                )
                found.update({row.parent_id: row.text for row in (await conn.execute(query)).all()})
        return found

    async def neighbours(
        self, tenant_id: str, document_id: str, first_position: int, last_position: int
    ) -> list[StoredChunk]:
        query = (
            select(chunk_table)
            .where(
                chunk_table.c.tenant_id == tenant_id,
                chunk_table.c.document_id == document_id,
                chunk_table.c.position >= first_position,
                chunk_table.c.position <= last_position,
            )
            .order_by(chunk_table.c.position, chunk_table.c.chunk_id)
        )
        async with self.engine.connect() as conn:
            return [chunk_from_row(row) for row in (await conn.execute(query)).all()]

    async def document_chunk_ids(self, tenant_id: str, document_id: str) -> list[str]:
        query = (
            select(chunk_table.c.chunk_id)
            .where(chunk_table.c.tenant_id == tenant_id, chunk_table.c.document_id == document_id)
            .order_by(chunk_table.c.position, chunk_table.c.chunk_id)
        )
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).scalars().all())

    async def get_document_info(self, tenant_id: str, document_ids: Sequence[str]) -> list[DocumentInfo]:
        wanted = _unique(document_ids)
        pushed: dict[str, DocumentMetadata] = {}
        stored: dict[str, DocumentChunks] = {}
        async with self.engine.connect() as conn:
            for batch in _batches(wanted, ID_BATCH):
                query = select(document_table).where(
                    document_table.c.tenant_id == tenant_id, document_table.c.document_id.in_(batch)
                )
                pushed.update(
                    {row.document_id: document_from_row(row) for row in (await conn.execute(query)).all()}
                )
                counts = (
                    select(
                        chunk_table.c.document_id,
                        func.min(chunk_table.c.knowledge_base_id).label("knowledge_base_id"),
                        func.min(chunk_table.c.file_name).label("file_name"),
                        func.count().label("chunk_count"),
                        func.count(distinct(func.nullif(chunk_table.c.parent_id, ""))).label("parent_count"),
                        func.max(chunk_table.c.index_time).label("last_index_time"),
                    )
                    .where(chunk_table.c.tenant_id == tenant_id, chunk_table.c.document_id.in_(batch))
                    .group_by(chunk_table.c.document_id)
                )
                for row in (await conn.execute(counts)).all():
                    stored[row.document_id] = document_chunks_from_row(row)
        infos: list[DocumentInfo] = []
        for document_id in wanted:
            meta = pushed.get(document_id)
            if meta is None and document_id not in stored:
                continue
            have = stored.get(document_id) or DocumentChunks(document_id)
            # The counts are the chunks'; the knowledge base and file name the pushed metadata's if any.
            infos.append(
                record_from_row(
                    DocumentInfo,
                    asdict(have),
                    knowledge_base_id=meta.knowledge_base_id if meta else have.knowledge_base_id,
                    file_name=(meta.file_name if meta else "") or have.file_name,
                    metadata=meta,
                )
            )
        return infos

    async def knowledge_base_counts(
        self, tenant_id: str, knowledge_base_ids: Sequence[str]
    ) -> dict[str, KnowledgeBaseCounts]:
        """Documents with chunks, chunks and distinct parents per knowledge base (0s when unknown)."""
        wanted = _unique(knowledge_base_ids)
        counts = {kb: KnowledgeBaseCounts(0, 0, 0) for kb in wanted}
        async with self.engine.connect() as conn:
            for batch in _batches(wanted, ID_BATCH):
                query = (
                    select(
                        chunk_table.c.knowledge_base_id,
                        func.count(distinct(chunk_table.c.document_id)).label("document_count"),
                        func.count().label("chunk_count"),
                        func.count(distinct(func.nullif(chunk_table.c.parent_id, ""))).label("parent_count"),
                    )
                    .where(chunk_table.c.tenant_id == tenant_id, chunk_table.c.knowledge_base_id.in_(batch))
                    .group_by(chunk_table.c.knowledge_base_id)
                )
                for row in (await conn.execute(query)).all():
                    counts[row.knowledge_base_id] = record_from_row(KnowledgeBaseCounts, row)
        return counts

    # --- grep ---------------------------------------------------------------------------------------

    async def grep(self, scope: Scope, plan: GrepPlan) -> GrepResult:
        """Scan the scope's chunks in reading order (knowledge base, document, position) with RE2.

        Knowledge bases are read one after the other, each in pages of ``plan.page_size`` chunks by
        keyset on (document, position, chunk id): with the knowledge base fixed by equality both
        backends walk ``ix_chunks_reading`` without sorting. The regex runs in a worker thread so the
        event loop stays free. Stops at ``plan.max_matches`` or when the time budget is spent.
        """
        scan = GrepScan(plan)
        filters: list[ColumnElement[bool]] = [chunk_table.c.tenant_id == scope.tenant_id]
        if scope.document_ids:
            filters.append(chunk_table.c.document_id.in_(scope.document_ids))
        if plan.required_literal:
            # A superset of the chunks that can match (SQLite's LIKE ignores ASCII case): the regex decides.
            filters.append(chunk_table.c.text.contains(plan.required_literal, autoescape=True))
        order = (chunk_table.c.document_id, chunk_table.c.position, chunk_table.c.chunk_id)
        async with self.engine.connect() as conn:
            for knowledge_base_id in sorted(set(scope.knowledge_base_ids)):
                after: tuple[Any, ...] | None = None
                while not scan.done and not scan.out_of_time():
                    query = select(*GREP_COLUMNS).where(
                        *filters, chunk_table.c.knowledge_base_id == knowledge_base_id
                    )
                    if after is not None:
                        query = query.where(tuple_(*order) > tuple_(*after))
                    query = query.order_by(*order).limit(plan.page_size + 1)
                    rows = (await conn.execute(query)).all()
                    page = rows[: plan.page_size]
                    if page:
                        await asyncio.to_thread(scan.scan, [candidate_from_row(row) for row in page])
                    if len(rows) <= plan.page_size:
                        break
                    after = (page[-1].document_id, page[-1].position, page[-1].chunk_id)
                if scan.done:
                    break
        return scan.result()

    # --- deletes ------------------------------------------------------------------------------------

    async def prune_document(
        self, tenant_id: str, knowledge_base_id: str, document_id: str, keep_ingest_run_id: str
    ) -> list[str]:
        """Delete the document's chunks of every ingestion run but ``keep_ingest_run_id``.

        Raises ``ValueError`` for an empty ``keep_ingest_run_id`` (it would name no run to keep).
        """
        if not keep_ingest_run_id:
            raise ValueError("keep_ingest_run_id must not be empty")
        return await self._delete_chunks(
            tenant_id,
            and_(
                chunk_table.c.knowledge_base_id == knowledge_base_id,
                chunk_table.c.document_id == document_id,
                chunk_table.c.ingest_run_id != keep_ingest_run_id,
            ),
        )

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> list[str]:
        return await self._delete_chunks(
            tenant_id,
            and_(
                chunk_table.c.knowledge_base_id == knowledge_base_id, chunk_table.c.document_id == document_id
            ),
            documents_where=and_(
                document_table.c.knowledge_base_id == knowledge_base_id,
                document_table.c.document_id == document_id,
            ),
        )

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> list[str]:
        return await self._delete_chunks(
            tenant_id,
            chunk_table.c.knowledge_base_id == knowledge_base_id,
            documents_where=document_table.c.knowledge_base_id == knowledge_base_id,
        )

    async def _delete_chunks(
        self,
        tenant_id: str,
        where: ColumnElement[bool],
        *,
        documents_where: ColumnElement[bool] | None = None,
    ) -> list[str]:
        """Delete the tenant's chunks matching ``where`` and the parents left without a chunk."""
        tenant_chunks = and_(chunk_table.c.tenant_id == tenant_id, where)
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(
                    select(chunk_table.c.chunk_id, chunk_table.c.parent_id)
                    .where(tenant_chunks)
                    .order_by(chunk_table.c.document_id, chunk_table.c.position, chunk_table.c.chunk_id)
                )
            ).all()
            removed = [row.chunk_id for row in rows]
            for batch in _batches(removed, ID_BATCH):
                await conn.execute(
                    delete(chunk_table).where(
                        chunk_table.c.tenant_id == tenant_id, chunk_table.c.chunk_id.in_(batch)
                    )
                )
            await self._delete_orphan_parents(
                conn, tenant_id, _unique([r.parent_id for r in rows if r.parent_id])
            )
            if documents_where is not None:
                await conn.execute(
                    delete(document_table).where(document_table.c.tenant_id == tenant_id, documents_where)
                )
        return removed

    @staticmethod
    async def _delete_orphan_parents(conn: AsyncConnection, tenant_id: str, parent_ids: list[str]) -> None:
        still_used = (
            select(chunk_table.c.chunk_id)
            .where(
                chunk_table.c.tenant_id == parent_table.c.tenant_id,
                chunk_table.c.parent_id == parent_table.c.parent_id,
            )
            .exists()
        )
        for batch in _batches(parent_ids, ID_BATCH):
            await conn.execute(
                delete(parent_table).where(
                    parent_table.c.tenant_id == tenant_id, parent_table.c.parent_id.in_(batch), ~still_used
                )
            )
