"""Memory's persistence on SQLAlchemy 2 async: SQLite (aiosqlite) by default, PostgreSQL (asyncpg).

Tables, every one keyed by tenant and user first (each query filters by both, so another user's ids
find nothing):

- ``session_summaries``: the handoff document as the contract's JSON, with its revision.
- ``working_memories``: plan and recent Q&A points as the contract's JSON.
- ``memory_items``: long-term items; unique on (tenant, user, kind, normalised content), so saying the
  same thing twice cannot make two rows even when two calls race.
- ``document_hits``: one row per (user, document) with its hit count and last citation.
- ``recorded_turns``: the turns whose citations were counted — the idempotency key, written in the
  same transaction as the hits, so a redelivered event is applied once.
- ``forgotten_documents``: deleted documents, whose later citations are not counted again.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from sqlalchemy import (
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    column,
    delete,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import MemoryItemKind
from knowsphere_memory.domain.ports import ItemConflict, RevisionConflict
from knowsphere_memory.domain.records import (
    BackgroundSources,
    CitedDocumentRecord,
    FrequentDocumentRecord,
    MemoryItemRecord,
    NewItem,
    Owner,
    Page,
    RememberOutcome,
    StoredSummary,
    StoredWorkingMemory,
)
from knowsphere_sqlstore import AnyRow, SqlDatabase, UtcDateTime, record_from_row

PAGE_TOKEN_VERSION = 1
REMEMBER_ATTEMPTS = 3
"""Tries of a Remember that lost a race on the unique key (the loser then finds the winner's row)."""

metadata = MetaData()

session_summaries = Table(
    "session_summaries",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("session_id", String(), primary_key=True),
    Column("handoff_json", Text, nullable=False),
    Column("summary_upto_message_id", String(), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("trigger_prompt_tokens", Integer, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
)

working_memories = Table(
    "working_memories",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("session_id", String(), primary_key=True),
    Column("state_json", Text, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
)

memory_items = Table(
    "memory_items",
    metadata,
    Column("id", String(), primary_key=True),
    Column("tenant_id", String(), nullable=False),
    Column("user_id", String(), nullable=False),
    Column("kind", String(), nullable=False),
    Column("content", Text, nullable=False),
    Column("normalised_content", Text, nullable=False),
    Column("source_session_id", String(), nullable=False),
    Column("source_message_id", String(), nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "user_id", "kind", "normalised_content", name="uq_memory_items_content"),
    Index("ix_memory_items_owner_order", "tenant_id", "user_id", "create_time", "id"),
    Index("ix_memory_items_owner_kind_order", "tenant_id", "user_id", "kind", "create_time", "id"),
)

document_hits = Table(
    "document_hits",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("document_id", String(), primary_key=True),
    Column("knowledge_base_id", String(), nullable=False),
    Column("file_name", Text, nullable=False),
    Column("hit_count", Integer, nullable=False),
    Column("last_cited_time", UtcDateTime, nullable=False),
    Index("ix_document_hits_document", "tenant_id", "document_id"),
)
# The ranking order (most hits, most recently cited, then document id ascending) read backwards from
# one index: the background and the frequent-documents list never sort an owner's documents.
Index(
    "ix_document_hits_owner_ranking",
    document_hits.c.tenant_id,
    document_hits.c.user_id,
    document_hits.c.hit_count,
    document_hits.c.last_cited_time,
    document_hits.c.document_id.desc(),
)

recorded_turns = Table(
    "recorded_turns",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("turn_id", String(), primary_key=True),
    Column("record_time", UtcDateTime, nullable=False),
)

forgotten_documents = Table(
    "forgotten_documents",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("document_id", String(), primary_key=True),
    Column("forget_time", UtcDateTime, nullable=False),
)


_ITEMS_PART = """SELECT * FROM (
    SELECT kind AS part, id AS a, kind AS b, content AS c, normalised_content AS d,
           source_session_id AS e, source_message_id AS f, 0 AS n, create_time AS t1, update_time AS t2
    FROM memory_items WHERE tenant_id = :tenant_id AND user_id = :user_id AND kind = :{kind}
    ORDER BY create_time DESC, id DESC LIMIT :{kind}_limit) AS {kind}_part"""
_DOCUMENTS_PART = """SELECT * FROM (
    SELECT 'document' AS part, document_id AS a, knowledge_base_id AS b, file_name AS c, '' AS d,
           '' AS e, '' AS f, hit_count AS n, last_cited_time AS t1, last_cited_time AS t2
    FROM document_hits WHERE tenant_id = :tenant_id AND user_id = :user_id AND hit_count >= :min_hits{kbs}
    ORDER BY hit_count DESC, last_cited_time DESC, document_id LIMIT :document_limit) AS document_part"""


def _background_statement(in_kbs: bool) -> Any:
    sql = "\nUNION ALL\n".join(
        [
            _ITEMS_PART.format(kind="profile"),
            _ITEMS_PART.format(kind="interest"),
            _DOCUMENTS_PART.format(kbs=" AND knowledge_base_id IN :kbs" if in_kbs else ""),
        ]
    )
    statement = text(sql).columns(
        column("part", String()),
        column("a", String()),
        column("b", String()),
        column("c", Text()),
        column("d", Text()),
        column("e", String()),
        column("f", String()),
        column("n", Integer()),
        column("t1", UtcDateTime()),
        column("t2", UtcDateTime()),
    )
    if in_kbs:
        statement = statement.bindparams(bindparam("kbs", expanding=True))
    return statement


_BACKGROUND = _background_statement(in_kbs=False)
_BACKGROUND_IN_KBS = _background_statement(in_kbs=True)


def _owned(table: Table, owner: Owner) -> Any:
    return and_(table.c.tenant_id == owner.tenant_id, table.c.user_id == owner.user_id)


def _item(row: AnyRow) -> MemoryItemRecord:
    return record_from_row(MemoryItemRecord, row, kind=MemoryItemKind(row.kind))


def _summary(row: AnyRow) -> StoredSummary:
    handoff = json_format.Parse(row.handoff_json, mpb.HandoffDocument())
    return record_from_row(StoredSummary, row, handoff=handoff)


def _handoff_json(handoff: mpb.HandoffDocument) -> str:
    # Sorted, compact and with every field named: equal documents give equal text.
    data = json_format.MessageToDict(handoff, preserving_proto_field_name=True)
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _working(row: AnyRow) -> StoredWorkingMemory:
    state = json_format.Parse(row.state_json, mpb.WorkingMemory())
    return StoredWorkingMemory(
        session_id=row.session_id,
        plan=tuple(state.plan),
        recent_qa=tuple(state.recent_qa),
        update_time=row.update_time,
    )


def _encode_token(values: dict[str, Any]) -> str:
    raw = json.dumps({"v": PAGE_TOKEN_VERSION, **values}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str, filter_key: str) -> dict[str, Any]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(data, dict) or data.get("v") != PAGE_TOKEN_VERSION:
            raise ValueError("other version")
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ValueError("page_token: not a token returned by a previous list call") from exc
    if data.get("f") != filter_key:
        raise ValueError("page_token: it was returned for other filters than this call's")
    return data


class SqlMemoryStore(SqlDatabase):
    """:class:`~knowsphere_memory.domain.ports.MemoryStore` on a SQLAlchemy async URL."""

    def __init__(self, url: str) -> None:
        super().__init__(url, metadata, owner="SqlMemoryStore")

    # --- session summary ------------------------------------------------------------------------------

    async def get_summary(self, owner: Owner, session_id: str) -> StoredSummary | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(session_summaries).where(
                        _owned(session_summaries, owner), session_summaries.c.session_id == session_id
                    )
                )
            ).first()
        return _summary(row) if row else None

    async def put_summary(
        self,
        owner: Owner,
        session_id: str,
        handoff: mpb.HandoffDocument,
        summary_upto_message_id: str,
        trigger_prompt_tokens: int,
        expected_revision: int | None,
        now: datetime,
    ) -> StoredSummary:
        text = _handoff_json(handoff)
        key = and_(_owned(session_summaries, owner), session_summaries.c.session_id == session_id)
        try:
            async with self.engine.begin() as conn:
                row = (await conn.execute(select(session_summaries).where(key))).first()
                stored = row.revision if row else 0
                if row is not None and (
                    row.handoff_json,
                    row.summary_upto_message_id,
                    row.trigger_prompt_tokens,
                ) == (
                    text,
                    summary_upto_message_id,
                    trigger_prompt_tokens,
                ):
                    # The same content again: a retry. It succeeds also when it expected the revision its
                    # own first attempt superseded.
                    if expected_revision is None or expected_revision in (stored, stored - 1):
                        return _summary(row)
                    raise RevisionConflict(expected_revision, stored)
                if expected_revision is not None and expected_revision != stored:
                    raise RevisionConflict(expected_revision, stored)
                values = {
                    "handoff_json": text,
                    "summary_upto_message_id": summary_upto_message_id,
                    "trigger_prompt_tokens": trigger_prompt_tokens,
                    "revision": stored + 1,
                    "update_time": now,
                }
                if row is None:
                    await conn.execute(
                        session_summaries.insert().values(
                            tenant_id=owner.tenant_id, user_id=owner.user_id, session_id=session_id, **values
                        )
                    )
                else:
                    done = await conn.execute(
                        update(session_summaries)
                        .where(key, session_summaries.c.revision == stored)
                        .values(**values)
                    )
                    if done.rowcount != 1:  # another writer got in between
                        raise RevisionConflict(stored, stored + 1)
        except IntegrityError:  # a concurrent first write of the same session
            raise RevisionConflict(0, 1) from None
        return StoredSummary(
            session_id, handoff, summary_upto_message_id, stored + 1, trigger_prompt_tokens, now
        )

    # --- working memory -------------------------------------------------------------------------------

    async def get_working_memory(self, owner: Owner, session_id: str) -> StoredWorkingMemory | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(working_memories).where(
                        _owned(working_memories, owner), working_memories.c.session_id == session_id
                    )
                )
            ).first()
        return _working(row) if row else None

    async def put_working_memory(
        self,
        owner: Owner,
        session_id: str,
        plan: Sequence[mpb.PlanStep],
        recent_qa: Sequence[mpb.QaPoint],
        now: datetime,
    ) -> StoredWorkingMemory:
        state = json_format.MessageToJson(
            mpb.WorkingMemory(plan=list(plan), recent_qa=list(recent_qa)), indent=None
        )
        values = {"state_json": state, "update_time": now}
        statement = self.insert(working_memories).values(
            tenant_id=owner.tenant_id, user_id=owner.user_id, session_id=session_id, **values
        )
        statement = statement.on_conflict_do_update(
            index_elements=["tenant_id", "user_id", "session_id"], set_=values
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)
        return StoredWorkingMemory(session_id, tuple(plan), tuple(recent_qa), now)

    async def delete_session(self, owner: Owner, session_id: str) -> None:
        async with self.engine.begin() as conn:
            for table in (session_summaries, working_memories):
                await conn.execute(
                    delete(table).where(_owned(table, owner), table.c.session_id == session_id)
                )

    # --- long-term items ----------------------------------------------------------------------------------

    async def _remember_once(
        self,
        conn: AsyncConnection,
        owner: Owner,
        item: NewItem,
        source_session_id: str,
        source_message_id: str,
        now: datetime,
        new_id: Callable[[], str],
    ) -> RememberOutcome:
        same = and_(
            _owned(memory_items, owner),
            memory_items.c.kind == item.kind.value,
            memory_items.c.normalised_content == item.normalised_content,
        )
        row = (await conn.execute(select(memory_items).where(same))).first()
        if row is None:
            record = MemoryItemRecord(
                id=new_id(),
                kind=item.kind,
                content=item.content,
                normalised_content=item.normalised_content,
                source_session_id=source_session_id,
                source_message_id=source_message_id,
                create_time=now,
                update_time=now,
            )
            await conn.execute(
                memory_items.insert().values(
                    tenant_id=owner.tenant_id,
                    user_id=owner.user_id,
                    id=record.id,
                    kind=record.kind.value,
                    content=record.content,
                    normalised_content=record.normalised_content,
                    source_session_id=record.source_session_id,
                    source_message_id=record.source_message_id,
                    create_time=now,
                    update_time=now,
                )
            )
            return RememberOutcome(record, created=True)
        # Said again: the latest wording and source win; id and creation time stay.
        values = {
            "content": item.content,
            "source_session_id": source_session_id,
            "source_message_id": source_message_id,
            "update_time": now,
        }
        await conn.execute(update(memory_items).where(memory_items.c.id == row.id).values(**values))
        return RememberOutcome(replace(_item(row), **values), created=False)

    async def remember(
        self,
        owner: Owner,
        items: Sequence[NewItem],
        source_session_id: str,
        source_message_id: str,
        now: datetime,
        new_id: Callable[[], str],
    ) -> list[RememberOutcome]:
        for attempt in range(REMEMBER_ATTEMPTS):
            try:
                async with self.engine.begin() as conn:
                    outcomes: list[RememberOutcome] = []
                    created: dict[tuple[str, str], RememberOutcome] = {}
                    for item in items:
                        key = (item.kind.value, item.normalised_content)
                        if key in created:  # the same item twice in one call is one item
                            outcomes.append(RememberOutcome(created[key].item, created=False))
                            continue
                        outcome = await self._remember_once(
                            conn, owner, item, source_session_id, source_message_id, now, new_id
                        )
                        created[key] = outcome
                        outcomes.append(outcome)
                    return outcomes
            except IntegrityError:
                if attempt == REMEMBER_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def list_items(
        self,
        owner: Owner,
        kinds: Sequence[MemoryItemKind],
        page_size: int,
        page_token: str,
    ) -> Page[MemoryItemRecord]:
        filter_key = ",".join(sorted(k.value for k in kinds))
        query = select(memory_items).where(_owned(memory_items, owner))
        if kinds:
            query = query.where(memory_items.c.kind.in_([k.value for k in kinds]))
        if page_token:
            data = _decode_token(page_token, filter_key)
            after_time, after_id = datetime.fromisoformat(data["t"]), str(data["i"])
            query = query.where(
                or_(
                    memory_items.c.create_time < after_time,
                    and_(memory_items.c.create_time == after_time, memory_items.c.id < after_id),
                )
            )
        query = query.order_by(memory_items.c.create_time.desc(), memory_items.c.id.desc()).limit(
            page_size + 1
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        records = [_item(row) for row in rows[:page_size]]
        token = ""
        if len(rows) > page_size:
            last = records[-1]
            token = _encode_token(
                {"f": filter_key, "t": last.create_time.astimezone(UTC).isoformat(), "i": last.id}
            )
        return Page(records, token)

    async def update_item(
        self, owner: Owner, item_id: str, kind: MemoryItemKind, content: str, normalised: str, now: datetime
    ) -> MemoryItemRecord | None:
        """The item with its new kind and content; None when it is not the owner's. Raises
        :class:`ItemConflict` when another item of the owner already says the same."""
        try:
            async with self.engine.begin() as conn:
                done = await conn.execute(
                    update(memory_items)
                    .where(_owned(memory_items, owner), memory_items.c.id == item_id)
                    .values(kind=kind.value, content=content, normalised_content=normalised, update_time=now)
                )
                if not done.rowcount:
                    return None
                row = (await conn.execute(select(memory_items).where(memory_items.c.id == item_id))).one()
        except IntegrityError as error:
            raise ItemConflict(item_id) from error
        return _item(row)

    async def delete_item(self, owner: Owner, item_id: str) -> bool:
        async with self.engine.begin() as conn:
            done = await conn.execute(
                delete(memory_items).where(_owned(memory_items, owner), memory_items.c.id == item_id)
            )
        return bool(done.rowcount)

    async def background_sources(
        self,
        owner: Owner,
        *,
        profile_limit: int,
        interest_limit: int,
        min_hits: int,
        knowledge_base_ids: Sequence[str],
        document_limit: int,
    ) -> BackgroundSources:
        # One statement for the three parts, written once: the background is read every turn, and
        # building a SQLAlchemy statement per call cost more than running it.
        statement = _BACKGROUND_IN_KBS if knowledge_base_ids else _BACKGROUND
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "profile": MemoryItemKind.PROFILE.value,
            "interest": MemoryItemKind.INTEREST.value,
            "profile_limit": max(profile_limit, 0),
            "interest_limit": max(interest_limit, 0),
            "min_hits": min_hits,
            "document_limit": max(document_limit, 0),
        }
        if knowledge_base_ids:
            params["kbs"] = sorted(set(knowledge_base_ids))
        rows = await self.read(lambda conn: conn.execute(statement, params).all())
        items: dict[str, list[MemoryItemRecord]] = {"profile": [], "interest": []}
        documents: list[FrequentDocumentRecord] = []
        for row in rows:
            if row.part == "document":
                documents.append(FrequentDocumentRecord(row.a, row.b, row.c, row.n, row.t1))
            else:
                items[row.part].append(
                    MemoryItemRecord(row.a, MemoryItemKind(row.b), row.c, row.d, row.e, row.f, row.t1, row.t2)
                )
        for found in items.values():
            found.sort(key=lambda r: (r.create_time, r.id), reverse=True)
        documents.sort(key=lambda r: (-r.hit_count, -r.last_cited_time.timestamp(), r.document_id))
        return BackgroundSources(items["profile"], items["interest"], documents)

    # --- document affinity -------------------------------------------------------------------------------

    async def record_citations(
        self,
        owner: Owner,
        turn_id: str,
        documents: Sequence[CitedDocumentRecord],
        cited_at: datetime,
    ) -> bool:
        unique = list({d.document_id: d for d in documents}.values())
        turn = (
            self.insert(recorded_turns)
            .values(tenant_id=owner.tenant_id, user_id=owner.user_id, turn_id=turn_id, record_time=cited_at)
            .on_conflict_do_nothing()
        )
        async with self.engine.begin() as conn:
            if (await conn.execute(turn)).rowcount != 1:
                return False  # this turn was counted before: a redelivery
            if unique:
                forgotten = set(
                    (
                        await conn.execute(
                            select(forgotten_documents.c.document_id).where(
                                forgotten_documents.c.tenant_id == owner.tenant_id,
                                forgotten_documents.c.document_id.in_([d.document_id for d in unique]),
                            )
                        )
                    ).scalars()
                )
                unique = [d for d in unique if d.document_id not in forgotten]
            # A late event of an older turn never moves the last citation back.
            later = func.greatest if self.engine.dialect.name == "postgresql" else func.max
            for document in sorted(unique, key=lambda d: d.document_id):  # one lock order for all writers
                insert = self.insert(document_hits).values(
                    tenant_id=owner.tenant_id,
                    user_id=owner.user_id,
                    document_id=document.document_id,
                    knowledge_base_id=document.knowledge_base_id,
                    file_name=document.file_name,
                    hit_count=1,
                    last_cited_time=cited_at,
                )
                await conn.execute(
                    insert.on_conflict_do_update(
                        index_elements=["tenant_id", "user_id", "document_id"],
                        set_={
                            "hit_count": document_hits.c.hit_count + 1,
                            "knowledge_base_id": insert.excluded.knowledge_base_id,
                            "file_name": insert.excluded.file_name,
                            "last_cited_time": later(
                                document_hits.c.last_cited_time, insert.excluded.last_cited_time
                            ),
                        },
                    )
                )
        return True

    async def frequent_documents(
        self,
        owner: Owner,
        min_hits: int,
        knowledge_base_ids: Sequence[str],
        page_size: int,
        page_token: str,
    ) -> Page[FrequentDocumentRecord]:
        kbs = sorted(set(knowledge_base_ids))
        filter_key = f"{min_hits}|{','.join(kbs)}"
        c = document_hits.c
        query = select(document_hits).where(_owned(document_hits, owner), c.hit_count >= min_hits)
        if kbs:
            query = query.where(c.knowledge_base_id.in_(kbs))
        if page_token:
            data = _decode_token(page_token, filter_key)
            hits, at, doc = int(data["h"]), datetime.fromisoformat(data["t"]), str(data["d"])
            query = query.where(
                or_(
                    c.hit_count < hits,
                    and_(c.hit_count == hits, c.last_cited_time < at),
                    and_(c.hit_count == hits, c.last_cited_time == at, c.document_id > doc),
                )
            )
        query = query.order_by(c.hit_count.desc(), c.last_cited_time.desc(), c.document_id).limit(
            page_size + 1
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        records = [record_from_row(FrequentDocumentRecord, row) for row in rows[:page_size]]
        token = ""
        if len(rows) > page_size:
            last = records[-1]
            token = _encode_token(
                {
                    "f": filter_key,
                    "h": last.hit_count,
                    "t": last.last_cited_time.astimezone(UTC).isoformat(),
                    "d": last.document_id,
                }
            )
        return Page(records, token)

    async def forget_document(self, tenant_id: str, document_id: str) -> int:
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await conn.execute(
                self.insert(forgotten_documents)
                .values(tenant_id=tenant_id, document_id=document_id, forget_time=now)
                .on_conflict_do_nothing()
            )
            done = await conn.execute(
                delete(document_hits).where(
                    document_hits.c.tenant_id == tenant_id, document_hits.c.document_id == document_id
                )
            )
        return int(done.rowcount)
