"""The chunk store on SQLAlchemy 2 async: SQLite (aiosqlite, WAL) by default, PostgreSQL (asyncpg).

Tables, all keyed by tenant first so that every statement filters by it:

- ``chunks`` (tenant, chunk id) → knowledge base, document, file name, text, parent id, position,
  heading path (JSON), page, metadata (JSON), ingest run id, token count, index time;
- ``parents`` (tenant, parent id) → text, stored once however many chunks share it, removed with the
  last chunk that refers to it;
- ``documents`` (tenant, document id) → the metadata ingestion pushes (PutDocumentInfo). Counts are
  computed from ``chunks`` on read, so they cannot drift.

Writes are upserts by key; a re-sent chunk that did not change is not rewritten (its index time stays).
``grep`` streams the scope's chunks in reading order in pages, pre-filtered in SQL by a literal every
match must contain when the pattern has one, and runs RE2 in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    distinct,
    func,
    or_,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from knowsphere_retrieval.domain.grep import GrepCandidate, GrepScan
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
from knowsphere_sqlstore import SqlDatabase, UtcDateTime

# How long a SQLite writer waits for another writer's lock before failing.
# Ids per IN (…) list: far below SQLite's and asyncpg's bound-parameter limits.
ID_BATCH = 500


metadata = MetaData()

chunk_table = Table(
    "chunks",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("chunk_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), nullable=False),
    Column("document_id", String(), nullable=False),
    Column("file_name", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("parent_id", String(), nullable=False),
    Column("position", Integer, nullable=False),
    Column("heading_path", Text, nullable=False),  # JSON list
    Column("page", Integer, nullable=False),
    Column("metadata_json", Text, nullable=False),  # JSON object, sorted keys
    Column("ingest_run_id", String(), nullable=False),
    Column("token_count", Integer, nullable=False),
    Column("index_time", UtcDateTime, nullable=False),
    # Grep and knowledge-base deletes walk this in reading order; neighbours and document reads use
    # the second.
    Index("ix_chunks_reading", "tenant_id", "knowledge_base_id", "document_id", "position", "chunk_id"),
    Index("ix_chunks_document", "tenant_id", "document_id", "position"),
    Index("ix_chunks_parent", "tenant_id", "parent_id"),
)

parent_table = Table(
    "parents",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("parent_id", String(), primary_key=True),
    Column("text", Text, nullable=False),
)

kb_config_table = Table(
    "knowledge_base_configs",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), primary_key=True),
    Column("embedding_model_id", String(), nullable=False),
    Column("embedding_dimension", Integer, nullable=False),
    Column("language_hint", String(), nullable=False),
    Column("graph_enabled", Integer, nullable=False),
    Column("stored_models_json", Text, nullable=False),  # JSON object: model id -> dimension
    Column("update_time", UtcDateTime, nullable=False),
)

document_table = Table(
    "documents",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("document_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), nullable=False),
    Column("file_name", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("content_type", String(), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("page_count", Integer, nullable=False),
    Column("language", String(), nullable=False),
    Column("status", Integer, nullable=False),
    Column("create_time", UtcDateTime, nullable=True),
    Column("metadata_json", Text, nullable=False),
    Index("ix_documents_knowledge_base", "tenant_id", "knowledge_base_id"),
)

# Chunk columns an upsert may change; when none differs the row is left alone.
_CHUNK_CONTENT = (
    "knowledge_base_id",
    "document_id",
    "file_name",
    "text",
    "parent_id",
    "position",
    "heading_path",
    "page",
    "metadata_json",
    "ingest_run_id",
    "token_count",
)

_GREP_COLUMNS = (
    chunk_table.c.chunk_id,
    chunk_table.c.knowledge_base_id,
    chunk_table.c.document_id,
    chunk_table.c.file_name,
    chunk_table.c.position,
    chunk_table.c.page,
    chunk_table.c.heading_path,
    chunk_table.c.text,
)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _check_text(field_name: str, owner: str, value: str) -> None:
    # PostgreSQL text cannot hold NUL; refusing it everywhere keeps both backends alike.
    if "\x00" in value:
        raise ValueError(f"{field_name} of {owner} contains a NUL character, which cannot be stored")


def _check_chunk(chunk: StoredChunk) -> None:
    owner = f"chunk {chunk.chunk_id!r}"
    for name in ("chunk_id", "tenant_id", "knowledge_base_id", "document_id"):
        if not getattr(chunk, name):
            raise ValueError(f"{name} of {owner} must not be empty")
    if chunk.position < 0:
        raise ValueError(f"position of {owner} must not be negative (got {chunk.position})")
    for name in ("text", "file_name", "parent_id", "ingest_run_id"):
        _check_text(name, owner, getattr(chunk, name))
    for heading in chunk.heading_path:
        _check_text("heading_path", owner, heading)
    for key, value in chunk.metadata.items():
        _check_text("metadata", owner, key + value)


def _chunk_row(chunk: StoredChunk, now: datetime) -> dict[str, Any]:
    return {
        "tenant_id": chunk.tenant_id,
        "chunk_id": chunk.chunk_id,
        "knowledge_base_id": chunk.knowledge_base_id,
        "document_id": chunk.document_id,
        "file_name": chunk.file_name,
        "text": chunk.text,
        "parent_id": chunk.parent_id,
        "position": chunk.position,
        "heading_path": _json(list(chunk.heading_path)),
        "page": chunk.page,
        "metadata_json": _json(chunk.metadata),
        "ingest_run_id": chunk.ingest_run_id,
        "token_count": chunk.token_count,
        "index_time": now,
    }


def _chunk(row: Any) -> StoredChunk:
    return StoredChunk(
        chunk_id=row.chunk_id,
        tenant_id=row.tenant_id,
        knowledge_base_id=row.knowledge_base_id,
        document_id=row.document_id,
        file_name=row.file_name,
        text=row.text,
        parent_id=row.parent_id,
        position=row.position,
        heading_path=tuple(json.loads(row.heading_path)),
        page=row.page,
        metadata=dict(json.loads(row.metadata_json)),
        ingest_run_id=row.ingest_run_id,
        token_count=row.token_count,
    )


def _document_row(info: DocumentMetadata) -> dict[str, Any]:
    return {
        "tenant_id": info.tenant_id,
        "document_id": info.document_id,
        "knowledge_base_id": info.knowledge_base_id,
        "file_name": info.file_name,
        "title": info.title,
        "content_type": info.content_type,
        "size_bytes": info.size_bytes,
        "page_count": info.page_count,
        "language": info.language,
        "status": info.status,
        "create_time": info.create_time,
        "metadata_json": _json(info.metadata),
    }


def _document(row: Any) -> DocumentMetadata:
    return DocumentMetadata(
        tenant_id=row.tenant_id,
        knowledge_base_id=row.knowledge_base_id,
        document_id=row.document_id,
        file_name=row.file_name,
        title=row.title,
        content_type=row.content_type,
        size_bytes=row.size_bytes,
        page_count=row.page_count,
        language=row.language,
        status=row.status,
        create_time=row.create_time,
        metadata=dict(json.loads(row.metadata_json)),
    )


def _candidate(row: Any) -> GrepCandidate:
    return GrepCandidate(
        chunk_id=row.chunk_id,
        knowledge_base_id=row.knowledge_base_id,
        document_id=row.document_id,
        file_name=row.file_name,
        position=row.position,
        page=row.page,
        heading_path=_heading_path(row.heading_path),
        text=row.text,
    )


@functools.lru_cache(maxsize=1024)
def _heading_path(encoded: str) -> tuple[str, ...]:
    # Chunks of a section share one heading path: a grep over thousands decodes each once.
    return tuple(json.loads(encoded))


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class _DocumentChunks:
    """What the chunks table says about one document."""

    knowledge_base_id: str
    file_name: str
    chunk_count: int
    parent_count: int
    last_index_time: datetime | None


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
            _check_chunk(chunk)
        tenants = {chunk.tenant_id for chunk in chunks}
        if len(tenants) != 1:
            raise ValueError(f"a put_chunks batch belongs to one tenant (got {len(tenants)})")
        (tenant_id,) = tenants
        for parent_id, text in parents.items():
            if not parent_id:
                raise ValueError("parent ids must not be empty")
            _check_text("text", f"parent {parent_id!r}", text)

        now = self._clock()
        # The last occurrence of a chunk id in a batch wins.
        rows = list({chunk.chunk_id: _chunk_row(chunk, now) for chunk in chunks}.values())
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
                index_elements=[chunk_table.c.tenant_id, chunk_table.c.chunk_id],
                set_={name: excluded[name] for name in (*_CHUNK_CONTENT, "index_time")},
                where=or_(*(chunk_table.c[name] != excluded[name] for name in _CHUNK_CONTENT)),
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
        rows = []
        for info in infos:
            for name in ("tenant_id", "knowledge_base_id", "document_id"):
                if not getattr(info, name):
                    raise ValueError(f"{name} of the document info must not be empty")
            owner = f"document {info.document_id!r}"
            for name in ("file_name", "title", "content_type", "language"):
                _check_text(name, owner, getattr(info, name))
            for key, value in info.metadata.items():
                _check_text("metadata", owner, key + value)
            rows.append(_document_row(info))
        if not rows:
            return
        statement = self.insert(document_table)
        statement = statement.on_conflict_do_update(
            index_elements=[document_table.c.tenant_id, document_table.c.document_id],
            set_={
                name: statement.excluded[name] for name in rows[0] if name not in ("tenant_id", "document_id")
            },
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement, rows)

    async def put_kb_config(self, config: KnowledgeBaseConfig) -> None:
        """Store a knowledge base's index settings, replacing the previous ones."""
        row = {
            "tenant_id": config.tenant_id,
            "knowledge_base_id": config.knowledge_base_id,
            "embedding_model_id": config.embedding_model_id,
            "embedding_dimension": config.embedding_dimension,
            "language_hint": config.language_hint,
            "graph_enabled": int(config.graph_enabled),
            "stored_models_json": _json(dict(config.stored_models)),
            "update_time": self._clock(),
        }
        statement = self.insert(kb_config_table).values(row)
        statement = statement.on_conflict_do_update(
            index_elements=[kb_config_table.c.tenant_id, kb_config_table.c.knowledge_base_id],
            set_={
                name: statement.excluded[name]
                for name in row
                if name not in ("tenant_id", "knowledge_base_id")
            },
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def get_kb_configs(
        self, tenant_id: str, knowledge_base_ids: Sequence[str]
    ) -> list[KnowledgeBaseConfig]:
        """The configs of the given knowledge bases of ``tenant_id`` that exist, in request order."""
        wanted = _unique(knowledge_base_ids)
        found: dict[str, KnowledgeBaseConfig] = {}
        async with self.engine.connect() as conn:
            for batch in _batches(wanted, ID_BATCH):
                query = select(kb_config_table).where(
                    kb_config_table.c.tenant_id == tenant_id, kb_config_table.c.knowledge_base_id.in_(batch)
                )
                for row in (await conn.execute(query)).all():
                    found[row.knowledge_base_id] = KnowledgeBaseConfig(
                        tenant_id=row.tenant_id,
                        knowledge_base_id=row.knowledge_base_id,
                        embedding_model_id=row.embedding_model_id,
                        embedding_dimension=row.embedding_dimension,
                        language_hint=row.language_hint,
                        graph_enabled=bool(row.graph_enabled),
                        stored_models=tuple(sorted(json.loads(row.stored_models_json).items())),
                        update_time=row.update_time,
                    )
        return [found[kb] for kb in wanted if kb in found]

    async def delete_kb_config(self, tenant_id: str, knowledge_base_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(kb_config_table).where(
                    kb_config_table.c.tenant_id == tenant_id,
                    kb_config_table.c.knowledge_base_id == knowledge_base_id,
                )
            )

    # --- reads --------------------------------------------------------------------------------------

    async def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        wanted = _unique(chunk_ids)
        found: dict[str, StoredChunk] = {}
        async with self.engine.connect() as conn:
            for batch in _batches(wanted, ID_BATCH):
                query = select(chunk_table).where(
                    chunk_table.c.tenant_id == tenant_id, chunk_table.c.chunk_id.in_(batch)
                )
                for row in (await conn.execute(query)).all():
                    found[row.chunk_id] = _chunk(row)
        return [found[chunk_id] for chunk_id in wanted if chunk_id in found]

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
            return [_chunk(row) for row in (await conn.execute(query)).all()]

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
        stored: dict[str, _DocumentChunks] = {}
        async with self.engine.connect() as conn:
            for batch in _batches(wanted, ID_BATCH):
                query = select(document_table).where(
                    document_table.c.tenant_id == tenant_id, document_table.c.document_id.in_(batch)
                )
                pushed.update({row.document_id: _document(row) for row in (await conn.execute(query)).all()})
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
                    stored[row.document_id] = _DocumentChunks(
                        knowledge_base_id=row.knowledge_base_id,
                        file_name=row.file_name,
                        chunk_count=row.chunk_count,
                        parent_count=row.parent_count,
                        last_index_time=_utc(row.last_index_time),
                    )
        infos: list[DocumentInfo] = []
        for document_id in wanted:
            meta, have = pushed.get(document_id), stored.get(document_id)
            if meta is not None:
                infos.append(
                    DocumentInfo(
                        document_id=document_id,
                        knowledge_base_id=meta.knowledge_base_id,
                        file_name=meta.file_name or (have.file_name if have else ""),
                        metadata=meta,
                        chunk_count=have.chunk_count if have else 0,
                        parent_count=have.parent_count if have else 0,
                        last_index_time=have.last_index_time if have else None,
                    )
                )
            elif have is not None:
                infos.append(
                    DocumentInfo(
                        document_id=document_id,
                        knowledge_base_id=have.knowledge_base_id,
                        file_name=have.file_name,
                        metadata=None,
                        chunk_count=have.chunk_count,
                        parent_count=have.parent_count,
                        last_index_time=have.last_index_time,
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
                    counts[row.knowledge_base_id] = KnowledgeBaseCounts(
                        document_count=row.document_count,
                        chunk_count=row.chunk_count,
                        parent_count=row.parent_count,
                    )
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
                    query = select(*_GREP_COLUMNS).where(
                        *filters, chunk_table.c.knowledge_base_id == knowledge_base_id
                    )
                    if after is not None:
                        query = query.where(tuple_(*order) > tuple_(*after))
                    query = query.order_by(*order).limit(plan.page_size + 1)
                    rows = (await conn.execute(query)).all()
                    page = rows[: plan.page_size]
                    if page:
                        await asyncio.to_thread(scan.scan, [_candidate(row) for row in page])
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


def _utc(value: Any) -> datetime | None:
    """An aggregate's datetime as aware UTC (SQLite hands back naive ISO text for max())."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
