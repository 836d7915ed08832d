"""Sessions, agents and orchestrators on SQLAlchemy 2 async: SQLite in the data dir by default,
PostgreSQL in production (``KS_CONVERSATION_DATABASE_URL``). Every statement filters by owner: sessions
by tenant and user, agents and orchestrators by tenant. Agents and orchestrators are kept as their
contract messages (JSON), with their names as columns for uniqueness and ordering; an orchestrator's
member agents are rows of their own, so deleting an agent can see who still runs it.

An external orchestrator's API key is never part of its record: its ciphertext (sealed by the key ring,
see :mod:`~knowsphere_conversation.domain.external`) is a row of ``orchestrator_secrets``, written in the
same transaction as the record. ``external_conversations`` keeps each session's conversation id at its
peer (Dify's ``conversation_id``, an A2A context id), and ``conversation_settings`` the key ring's
installation salt and start-up check value (its own name: a database shared with modelhub must not
share them)."""

from __future__ import annotations

import json
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
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere_conversation.domain.external import SecretChanges, StoredSecret
from knowsphere_conversation.domain.sessions import SessionPage, SessionRecord
from knowsphere_runtime.identity import Identity
from knowsphere_sqlstore import SettingsRows, SqlDatabase, UtcDateTime, settings_table

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("id", String(), primary_key=True),
    Column("title", Text, nullable=False),
    Column("agent_id", String(), nullable=False),
    Column("orchestrator_id", String(), nullable=False),
    Column("application_id", String(), nullable=False),
    Column("turn_count", Integer, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("create_time", UtcDateTime, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    Index("ix_sessions_recent", "tenant_id", "user_id", "update_time"),
)

agents = Table(
    "agents",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("id", String(), primary_key=True),
    Column("name", String(), nullable=False),
    Column("record", Text, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "name", name="uq_agents_name"),
)

orchestrators = Table(
    "orchestrators",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("id", String(), primary_key=True),
    Column("name", String(), nullable=False),
    Column("mode", Integer, nullable=False),
    Column("record", Text, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "name", name="uq_orchestrators_name"),
)

orchestrator_members = Table(
    "orchestrator_members",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("orchestrator_id", String(), primary_key=True),
    Column("agent_id", String(), primary_key=True),
    Index("ix_orchestrator_members_agent", "tenant_id", "agent_id"),
)


orchestrator_secrets = Table(
    "orchestrator_secrets",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("orchestrator_id", String(), primary_key=True),
    Column("name", String(), primary_key=True),
    Column("ciphertext", Text, nullable=False),
)

external_conversations = Table(
    "external_conversations",
    metadata,
    Column("tenant_id", String(), primary_key=True),
    Column("user_id", String(), primary_key=True),
    Column("session_id", String(), primary_key=True),
    Column("orchestrator_id", String(), primary_key=True),
    Column("peer", Text, nullable=False),
    Column("conversation_id", Text, nullable=False),
    Column("update_time", UtcDateTime, nullable=False),
)

conversation_settings = settings_table("conversation_settings", metadata)


def _record(row: Any) -> SessionRecord:
    values = dict(row._mapping)
    values["metadata"] = json.loads(values["metadata"])
    return SessionRecord(**values)


def _owned(owner: Identity, session_id: str) -> Any:
    return and_(
        sessions.c.tenant_id == owner.tenant_id,
        sessions.c.user_id == owner.user_id,
        sessions.c.id == session_id,
    )


class SqlSessionStore:
    def __init__(self, url: str) -> None:
        self._db = SqlDatabase(url, metadata, owner="SqlSessionStore")
        self._settings = SettingsRows(self._db, conversation_settings)

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def create(self, record: SessionRecord) -> None:
        values = {**record.__dict__, "metadata": json.dumps(record.metadata, sort_keys=True)}
        async with self._db.engine.begin() as conn:
            await conn.execute(insert(sessions).values(**values))

    async def get(self, owner: Identity, session_id: str) -> SessionRecord | None:
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(select(sessions).where(_owned(owner, session_id)))).first()
        return _record(row) if row is not None else None

    async def list_sessions(
        self,
        owner: Identity,
        *,
        agent_id: str,
        orchestrator_id: str,
        application_id: str,
        offset: int,
        limit: int,
    ) -> SessionPage:
        where = [sessions.c.tenant_id == owner.tenant_id, sessions.c.user_id == owner.user_id]
        for column, value in (
            (sessions.c.agent_id, agent_id),
            (sessions.c.orchestrator_id, orchestrator_id),
            (sessions.c.application_id, application_id),
        ):
            if value:
                where.append(column == value)
        query = (
            select(sessions)
            .where(and_(*where))
            .order_by(sessions.c.update_time.desc(), sessions.c.id)
            .offset(offset)
            .limit(limit + 1)
        )
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        found = [_record(r) for r in rows[:limit]]
        return SessionPage(found, offset + limit if len(rows) > limit else None)

    async def update_title(
        self, owner: Identity, session_id: str, title: str, when: datetime
    ) -> SessionRecord | None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                update(sessions).where(_owned(owner, session_id)).values(title=title, update_time=when)
            )
        return await self.get(owner, session_id)

    async def count_turn(self, owner: Identity, session_id: str, title: str, when: datetime) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                update(sessions)
                .where(_owned(owner, session_id))
                .values(
                    turn_count=sessions.c.turn_count + 1,
                    update_time=when,
                    title=func.coalesce(func.nullif(sessions.c.title, ""), title),
                )
            )

    async def delete(self, owner: Identity, session_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                delete(external_conversations).where(
                    and_(
                        external_conversations.c.tenant_id == owner.tenant_id,
                        external_conversations.c.user_id == owner.user_id,
                        external_conversations.c.session_id == session_id,
                    )
                )
            )
            result = await conn.execute(delete(sessions).where(_owned(owner, session_id)))
        return bool(result.rowcount)

    # --- agents -----------------------------------------------------------------------------------

    async def create_agent(self, tenant_id: str, agent: pb.Agent) -> bool:
        """False when the tenant already has an agent of that name."""
        values = {
            "tenant_id": tenant_id,
            "id": agent.id,
            "name": agent.name,
            "record": json_format.MessageToJson(agent),
            "update_time": agent.update_time.ToDatetime(tzinfo=UTC),
        }
        try:
            async with self._db.engine.begin() as conn:
                await conn.execute(insert(agents).values(**values))
        except IntegrityError:
            return False
        return True

    async def get_agent(self, tenant_id: str, agent_id: str) -> pb.Agent | None:
        async with self._db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(agents.c.record).where(
                        and_(agents.c.tenant_id == tenant_id, agents.c.id == agent_id)
                    )
                )
            ).first()
        return json_format.Parse(row.record, pb.Agent()) if row is not None else None

    async def list_agents(self, tenant_id: str, offset: int, limit: int) -> tuple[list[pb.Agent], int | None]:
        query = (
            select(agents.c.record)
            .where(agents.c.tenant_id == tenant_id)
            .order_by(agents.c.name, agents.c.id)
            .offset(offset)
            .limit(limit + 1)
        )
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        found = [json_format.Parse(r.record, pb.Agent()) for r in rows[:limit]]
        return found, offset + limit if len(rows) > limit else None

    async def replace_agent(self, tenant_id: str, agent: pb.Agent) -> bool:
        """False when another agent of the tenant already has the new name."""
        try:
            async with self._db.engine.begin() as conn:
                await conn.execute(
                    update(agents)
                    .where(and_(agents.c.tenant_id == tenant_id, agents.c.id == agent.id))
                    .values(
                        name=agent.name,
                        record=json_format.MessageToJson(agent),
                        update_time=agent.update_time.ToDatetime(tzinfo=UTC),
                    )
                )
        except IntegrityError:
            return False
        return True

    async def delete_agent(self, tenant_id: str, agent_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            result = await conn.execute(
                delete(agents).where(and_(agents.c.tenant_id == tenant_id, agents.c.id == agent_id))
            )
        return bool(result.rowcount)

    # --- orchestrators ----------------------------------------------------------------------------

    async def _write_members(self, conn: Any, tenant_id: str, orchestrator: pb.Orchestrator) -> None:
        await conn.execute(
            delete(orchestrator_members).where(
                and_(
                    orchestrator_members.c.tenant_id == tenant_id,
                    orchestrator_members.c.orchestrator_id == orchestrator.id,
                )
            )
        )
        members = list(dict.fromkeys(orchestrator.member_agent_ids))
        if members:
            await conn.execute(
                insert(orchestrator_members),
                [
                    {"tenant_id": tenant_id, "orchestrator_id": orchestrator.id, "agent_id": agent_id}
                    for agent_id in members
                ],
            )

    async def _write_secrets(
        self, conn: Any, tenant_id: str, orchestrator_id: str, secrets: SecretChanges | None
    ) -> None:
        for name, ciphertext in (secrets or {}).items():
            await conn.execute(
                delete(orchestrator_secrets).where(
                    and_(
                        orchestrator_secrets.c.tenant_id == tenant_id,
                        orchestrator_secrets.c.orchestrator_id == orchestrator_id,
                        orchestrator_secrets.c.name == name,
                    )
                )
            )
            if ciphertext is not None:
                await conn.execute(
                    insert(orchestrator_secrets).values(
                        tenant_id=tenant_id, orchestrator_id=orchestrator_id, name=name, ciphertext=ciphertext
                    )
                )

    async def create_orchestrator(
        self, tenant_id: str, orchestrator: pb.Orchestrator, *, secrets: SecretChanges | None = None
    ) -> bool:
        """False when the tenant already has an orchestrator of that name. ``secrets`` are written in
        the same transaction."""
        try:
            async with self._db.engine.begin() as conn:
                await conn.execute(
                    insert(orchestrators).values(
                        tenant_id=tenant_id,
                        id=orchestrator.id,
                        name=orchestrator.name,
                        mode=int(orchestrator.mode),
                        record=json_format.MessageToJson(orchestrator),
                        update_time=orchestrator.update_time.ToDatetime(tzinfo=UTC),
                    )
                )
                await self._write_members(conn, tenant_id, orchestrator)
                await self._write_secrets(conn, tenant_id, orchestrator.id, secrets)
        except IntegrityError:
            return False
        return True

    async def get_orchestrator(self, tenant_id: str, orchestrator_id: str) -> pb.Orchestrator | None:
        async with self._db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(orchestrators.c.record).where(
                        and_(orchestrators.c.tenant_id == tenant_id, orchestrators.c.id == orchestrator_id)
                    )
                )
            ).first()
        return json_format.Parse(row.record, pb.Orchestrator()) if row is not None else None

    async def list_orchestrators(
        self, tenant_id: str, mode: int, offset: int, limit: int
    ) -> tuple[list[pb.Orchestrator], int | None]:
        where = orchestrators.c.tenant_id == tenant_id
        if mode:
            where = and_(where, orchestrators.c.mode == mode)
        query = (
            select(orchestrators.c.record)
            .where(where)
            .order_by(orchestrators.c.name, orchestrators.c.id)
            .offset(offset)
            .limit(limit + 1)
        )
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        found = [json_format.Parse(r.record, pb.Orchestrator()) for r in rows[:limit]]
        return found, offset + limit if len(rows) > limit else None

    async def replace_orchestrator(
        self, tenant_id: str, orchestrator: pb.Orchestrator, *, secrets: SecretChanges | None = None
    ) -> bool:
        """False when another orchestrator of the tenant already has the new name. ``secrets`` are
        written in the same transaction; those not named stay as they are."""
        try:
            async with self._db.engine.begin() as conn:
                await conn.execute(
                    update(orchestrators)
                    .where(
                        and_(orchestrators.c.tenant_id == tenant_id, orchestrators.c.id == orchestrator.id)
                    )
                    .values(
                        name=orchestrator.name,
                        mode=int(orchestrator.mode),
                        record=json_format.MessageToJson(orchestrator),
                        update_time=orchestrator.update_time.ToDatetime(tzinfo=UTC),
                    )
                )
                await self._write_members(conn, tenant_id, orchestrator)
                await self._write_secrets(conn, tenant_id, orchestrator.id, secrets)
        except IntegrityError:
            return False
        return True

    async def delete_orchestrator(self, tenant_id: str, orchestrator_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            for table in (orchestrator_secrets, external_conversations):
                await conn.execute(
                    delete(table).where(
                        and_(table.c.tenant_id == tenant_id, table.c.orchestrator_id == orchestrator_id)
                    )
                )
            await conn.execute(
                delete(orchestrator_members).where(
                    and_(
                        orchestrator_members.c.tenant_id == tenant_id,
                        orchestrator_members.c.orchestrator_id == orchestrator_id,
                    )
                )
            )
            result = await conn.execute(
                delete(orchestrators).where(
                    and_(orchestrators.c.tenant_id == tenant_id, orchestrators.c.id == orchestrator_id)
                )
            )
        return bool(result.rowcount)

    async def orchestrators_running(self, tenant_id: str, agent_id: str) -> list[str]:
        """Names of the tenant's orchestrators that list ``agent_id`` as a member."""
        query = (
            select(orchestrators.c.name)
            .join(
                orchestrator_members,
                and_(
                    orchestrator_members.c.tenant_id == orchestrators.c.tenant_id,
                    orchestrator_members.c.orchestrator_id == orchestrators.c.id,
                ),
            )
            .where(
                and_(
                    orchestrator_members.c.tenant_id == tenant_id, orchestrator_members.c.agent_id == agent_id
                )
            )
            .order_by(orchestrators.c.name)
        )
        async with self._db.engine.connect() as conn:
            return [row.name for row in (await conn.execute(query)).all()]

    # --- external orchestrators' secrets and peer conversations -----------------------------------

    async def get_orchestrator_secret(self, tenant_id: str, orchestrator_id: str, name: str) -> str | None:
        query = select(orchestrator_secrets.c.ciphertext).where(
            and_(
                orchestrator_secrets.c.tenant_id == tenant_id,
                orchestrator_secrets.c.orchestrator_id == orchestrator_id,
                orchestrator_secrets.c.name == name,
            )
        )
        async with self._db.engine.connect() as conn:
            value = (await conn.execute(query)).scalar()
        return str(value) if value is not None else None

    async def list_orchestrator_secrets(self) -> list[StoredSecret]:
        """Every tenant's: for the key ring's rotation at start-up."""
        query = select(orchestrator_secrets).order_by(
            orchestrator_secrets.c.tenant_id,
            orchestrator_secrets.c.orchestrator_id,
            orchestrator_secrets.c.name,
        )
        async with self._db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [StoredSecret(r.tenant_id, r.orchestrator_id, r.name, r.ciphertext) for r in rows]

    async def replace_orchestrator_secret(self, secret: StoredSecret, new_ciphertext: str) -> bool:
        """Only when the row still holds ``secret.ciphertext`` (an update in between wins)."""
        statement = (
            update(orchestrator_secrets)
            .where(
                and_(
                    orchestrator_secrets.c.tenant_id == secret.tenant_id,
                    orchestrator_secrets.c.orchestrator_id == secret.orchestrator_id,
                    orchestrator_secrets.c.name == secret.name,
                    orchestrator_secrets.c.ciphertext == secret.ciphertext,
                )
            )
            .values(ciphertext=new_ciphertext)
        )
        async with self._db.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def get_peer_conversation(
        self, owner: Identity, session_id: str, orchestrator_id: str, peer: str
    ) -> str:
        """The session's conversation id at ``peer``; empty when there is none (or it was another
        peer's: the orchestrator was pointed elsewhere since)."""
        query = select(external_conversations.c.peer, external_conversations.c.conversation_id).where(
            and_(
                external_conversations.c.tenant_id == owner.tenant_id,
                external_conversations.c.user_id == owner.user_id,
                external_conversations.c.session_id == session_id,
                external_conversations.c.orchestrator_id == orchestrator_id,
            )
        )
        async with self._db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return str(row.conversation_id) if row is not None and row.peer == peer else ""

    async def put_peer_conversation(
        self, owner: Identity, session_id: str, orchestrator_id: str, peer: str, conversation_id: str
    ) -> None:
        values = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "session_id": session_id,
            "orchestrator_id": orchestrator_id,
            "peer": peer,
            "conversation_id": conversation_id,
            "update_time": datetime.now(UTC),
        }
        statement = self._db.insert(external_conversations).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=[
                external_conversations.c.tenant_id,
                external_conversations.c.user_id,
                external_conversations.c.session_id,
                external_conversations.c.orchestrator_id,
            ],
            set_={
                "peer": statement.excluded.peer,
                "conversation_id": statement.excluded.conversation_id,
                "update_time": statement.excluded.update_time,
            },
        )
        async with self._db.engine.begin() as conn:
            await conn.execute(statement)

    # --- the key ring's settings (knowsphere_runtime.secrets.SettingsStore) -----------------------

    async def get_setting(self, key: str) -> str | None:
        return await self._settings.get_setting(key)

    async def put_setting(self, key: str, value: str) -> None:
        await self._settings.put_setting(key, value)

    async def add_setting(self, key: str, value: str) -> str:
        return await self._settings.add_setting(key, value)


__all__ = ["SqlSessionStore"]
