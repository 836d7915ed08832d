"""The knowledge graph over Bolt with the official ``neo4j`` async driver: ArcadeDB or Neo4j.

The embedded default is ArcadeDB's Bolt plugin (:mod:`.graph_server`); production points the same
code at a Neo4j server. Every statement is one of the fixed, parameterised Cypher templates in
``QUERIES``, written to what both engines accept (run here against ArcadeDB always, against Neo4j
when the conformance suite is given ``NEO4J_URL``); values — names, types, descriptions, ids — are
always parameters, never text in a statement, so a name such as ``') DETACH DELETE n //`` is stored
and found literally. Relation types are a property, not a dynamic relationship type.

The model, every node carrying ``tenant_id`` and ``knowledge_base_id``:

- ``(:KsEntity {key, name, type, description})`` — one per merge key
  (``knowsphere_contracts.vocabulary.entity_key``: NFKC, case-folded, whitespace collapsed, at most
  ``MAX_ENTITY_NAME_CHARS``) in a knowledge base; unique on (tenant, knowledge base, key).
- ``(:KsSupport {document_id, entity_key, chunk_ids})-[:KS_SUPPORTS]->(:KsEntity)`` — which chunks of
  which document mention the entity. An entity with no support left is deleted.
- ``(:KsEntity)-[:KS_REL {type_key, type, description, document_id, chunk_ids}]->(:KsEntity)`` — one
  edge per (source, type, target, document); reads merge a relation's edges across documents.

Writes merge (MERGE) and union chunk ids, so re-sending a batch changes nothing. The endpoints of a
relation are merged as entities supported by the relation's chunks, which keeps the invariant that
deleting a document's support can only orphan entities it supported.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, LiteralString, TypeVar

import structlog
from neo4j import AsyncGraphDatabase, AsyncManagedTransaction
from neo4j.exceptions import ConstraintError, Neo4jError, TransientError

from knowsphere_contracts.vocabulary import entity_key
from knowsphere_retrieval.domain.ports import GraphEntity, GraphRelation, Neighbourhood, Scope

log = structlog.get_logger(__name__)

MAX_RESULT_LIMIT: Final = 1000
MAX_HOPS: Final = 2
WRITE_BATCH_ROWS: Final = 500
DELETE_BATCH_ROWS: Final = 1000
WRITE_ATTEMPTS: Final = 5
_RETRY_BASE_SECONDS: Final = 0.05

_T = TypeVar("_T")

# The only Cypher this module runs. $tenant_id is in every statement that touches data.
QUERIES: Final[Mapping[str, LiteralString]] = MappingProxyType(
    {
        "upsert_entities": """
UNWIND $rows AS row
MERGE (e:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, key: row.key})
ON CREATE SET e.name = row.name, e.type = row.type, e.description = row.description
ON MATCH SET e.type = CASE WHEN row.type = '' THEN e.type ELSE row.type END,
             e.description = CASE WHEN row.description = '' THEN e.description ELSE row.description END
MERGE (s:KsSupport {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id,
                    document_id: $document_id, entity_key: row.key})
ON CREATE SET s.chunk_ids = row.chunk_ids
ON MATCH SET s.chunk_ids = s.chunk_ids + [c IN row.chunk_ids WHERE NOT c IN s.chunk_ids]
MERGE (s)-[:KS_SUPPORTS]->(e)
RETURN count(*) AS written
""",
        "upsert_relations": """
UNWIND $rows AS row
MATCH (a:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, key: row.source_key})
MATCH (b:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, key: row.target_key})
MERGE (a)-[r:KS_REL {type_key: row.type_key, document_id: $document_id}]->(b)
ON CREATE SET r.type = row.type, r.description = row.description, r.chunk_ids = row.chunk_ids
ON MATCH SET r.description = CASE WHEN row.description = '' THEN r.description ELSE row.description END,
             r.chunk_ids = r.chunk_ids + [c IN row.chunk_ids WHERE NOT c IN r.chunk_ids]
RETURN count(*) AS written
""",
        "find_entities": """
MATCH (e:KsEntity {tenant_id: $tenant_id})
WHERE e.knowledge_base_id IN $knowledge_base_ids AND e.key CONTAINS $key
MATCH (s:KsSupport)-[:KS_SUPPORTS]->(e)
WHERE size($document_ids) = 0 OR s.document_id IN $document_ids
WITH e, collect(s.document_id) AS document_ids, collect(s.chunk_ids) AS chunk_lists
RETURN e.knowledge_base_id AS knowledge_base_id, e.key AS key, e.name AS name, e.type AS type,
       e.description AS description, document_ids, chunk_lists,
       CASE WHEN e.key = $key THEN 0 WHEN e.key STARTS WITH $key THEN 1 ELSE 2 END AS rank
ORDER BY rank, size(key), key, knowledge_base_id
LIMIT $limit
""",
        "entities_by_key": """
UNWIND $refs AS ref
MATCH (e:KsEntity {tenant_id: $tenant_id, knowledge_base_id: ref.knowledge_base_id, key: ref.key})
MATCH (s:KsSupport)-[:KS_SUPPORTS]->(e)
WHERE size($document_ids) = 0 OR s.document_id IN $document_ids
WITH e, collect(s.document_id) AS document_ids, collect(s.chunk_ids) AS chunk_lists
RETURN e.knowledge_base_id AS knowledge_base_id, e.key AS key, e.name AS name, e.type AS type,
       e.description AS description, document_ids, chunk_lists
""",
        "relations_around": """
UNWIND $refs AS ref
MATCH (s:KsEntity {tenant_id: $tenant_id, knowledge_base_id: ref.knowledge_base_id, key: ref.key})
MATCH (s)-[r:KS_REL]-(n:KsEntity)
WHERE n.tenant_id = $tenant_id AND n.knowledge_base_id = ref.knowledge_base_id
  AND NOT n.key IN $exclude_keys
  AND (size($document_ids) = 0 OR r.document_id IN $document_ids)
WITH ref.knowledge_base_id AS knowledge_base_id, startNode(r) AS a, endNode(r) AS b,
     r.type_key AS type_key, collect(DISTINCT r) AS edges
RETURN knowledge_base_id, a.key AS source_key, a.name AS source, b.key AS target_key, b.name AS target,
       type_key, [x IN edges | x.type] AS types, [x IN edges | x.description] AS descriptions,
       [x IN edges | x.document_id] AS document_ids, [x IN edges | x.chunk_ids] AS chunk_lists,
       size(edges) AS support
ORDER BY support DESC, knowledge_base_id, source_key, type_key, target_key
LIMIT $limit
""",
        "document_entity_keys": """
MATCH (s:KsSupport {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, document_id: $document_id})
RETURN DISTINCT s.entity_key AS key
""",
        "delete_document_relations": """
UNWIND $keys AS k
MATCH (:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, key: k})
      -[r:KS_REL {document_id: $document_id}]->()
DELETE r
""",
        "delete_document_support": """
MATCH (s:KsSupport {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, document_id: $document_id})
DETACH DELETE s
""",
        "chunk_entity_keys": """
MATCH (s:KsSupport {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id})
WHERE any(c IN s.chunk_ids WHERE c IN $chunk_ids)
RETURN DISTINCT s.entity_key AS key
""",
        "delete_chunks_from_relations": """
UNWIND $keys AS k
MATCH (:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, key: k})-[r:KS_REL]->()
WHERE any(c IN r.chunk_ids WHERE c IN $chunk_ids)
WITH DISTINCT r
SET r.chunk_ids = [c IN r.chunk_ids WHERE NOT c IN $chunk_ids]
WITH r WHERE size(r.chunk_ids) = 0
DELETE r
""",
        "delete_chunks_from_support": """
UNWIND $keys AS k
MATCH (s:KsSupport {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, entity_key: k})
WHERE any(c IN s.chunk_ids WHERE c IN $chunk_ids)
SET s.chunk_ids = [c IN s.chunk_ids WHERE NOT c IN $chunk_ids]
WITH s WHERE size(s.chunk_ids) = 0
DETACH DELETE s
""",
        "delete_unsupported_entities": """
UNWIND $keys AS k
MATCH (e:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id, key: k})
OPTIONAL MATCH (s:KsSupport)-[:KS_SUPPORTS]->(e)
WITH e, count(s) AS support
WHERE support = 0
DETACH DELETE e
""",
        "delete_knowledge_base_entities": """
MATCH (e:KsEntity {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id})
WITH e LIMIT $limit
DETACH DELETE e
RETURN count(*) AS deleted
""",
        "delete_knowledge_base_support": """
MATCH (s:KsSupport {tenant_id: $tenant_id, knowledge_base_id: $knowledge_base_id})
WITH s LIMIT $limit
DETACH DELETE s
RETURN count(*) AS deleted
""",
    }
)

# Schema, created once per store. A uniqueness constraint both indexes the merge key and keeps two
# concurrent MERGEs from creating twins; an engine that refuses one gets the plain index instead.
_SCHEMA: Final[tuple[tuple[LiteralString, LiteralString | None], ...]] = (
    (
        "CREATE CONSTRAINT ks_entity_key IF NOT EXISTS FOR (e:KsEntity) "
        "REQUIRE (e.tenant_id, e.knowledge_base_id, e.key) IS UNIQUE",
        "CREATE INDEX ks_entity_key IF NOT EXISTS FOR (e:KsEntity) "
        "ON (e.tenant_id, e.knowledge_base_id, e.key)",
    ),
    (
        "CREATE CONSTRAINT ks_support_key IF NOT EXISTS FOR (s:KsSupport) "
        "REQUIRE (s.tenant_id, s.knowledge_base_id, s.document_id, s.entity_key) IS UNIQUE",
        "CREATE INDEX ks_support_key IF NOT EXISTS FOR (s:KsSupport) "
        "ON (s.tenant_id, s.knowledge_base_id, s.document_id, s.entity_key)",
    ),
    (
        "CREATE INDEX ks_support_entity IF NOT EXISTS FOR (s:KsSupport) "
        "ON (s.tenant_id, s.knowledge_base_id, s.entity_key)",
        None,
    ),
    (
        "CREATE INDEX ks_entity_scope IF NOT EXISTS FOR (e:KsEntity) ON (e.tenant_id, e.knowledge_base_id)",
        None,
    ),
)


class BoltGraphStore:
    """``GraphStore`` on a Bolt server (ArcadeDB embedded or Neo4j) through ``neo4j.AsyncGraphDatabase``.

    The constructor does no I/O; the schema is created by the first call (or ``ensure_schema``).
    """

    def __init__(self, uri: str, user: str, password: str, database: str | None = None) -> None:
        self._driver = AsyncGraphDatabase.driver(uri, auth=(user, password))
        self._database = database
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()

    # --- writes ---------------------------------------------------------------------------------

    async def upsert(
        self,
        tenant_id: str,
        knowledge_base_id: str,
        document_id: str,
        entities: Sequence[GraphEntity],
        relations: Sequence[GraphRelation],
    ) -> None:
        params = _owner(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document_id=document_id)
        entity_rows, relation_rows = _write_rows(entities, relations)
        if not entity_rows:
            return

        async def work(tx: AsyncManagedTransaction) -> None:
            for rows in _batches(entity_rows):
                await _consume(tx, "upsert_entities", {**params, "rows": rows})
            for rows in _batches(relation_rows):
                await _consume(tx, "upsert_relations", {**params, "rows": rows})

        await self._write(work)

    async def delete_chunks(self, tenant_id: str, knowledge_base_id: str, chunk_ids: Sequence[str]) -> None:
        params: dict[str, Any] = {
            **_owner(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id),
            "chunk_ids": _ids("chunk_ids", chunk_ids),
        }
        if not params["chunk_ids"]:
            return

        async def work(tx: AsyncManagedTransaction) -> None:
            keys = [row["key"] for row in await _rows(tx, "chunk_entity_keys", params)]
            for batch in _batches(keys):
                await _consume(tx, "delete_chunks_from_relations", {**params, "keys": batch})
                await _consume(tx, "delete_chunks_from_support", {**params, "keys": batch})
                await _consume(tx, "delete_unsupported_entities", {**params, "keys": batch})

        await self._write(work)

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> None:
        params = _owner(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document_id=document_id)

        async def work(tx: AsyncManagedTransaction) -> None:
            keys = [row["key"] for row in await _rows(tx, "document_entity_keys", params)]
            for batch in _batches(keys):
                await _consume(tx, "delete_document_relations", {**params, "keys": batch})
            await _consume(tx, "delete_document_support", params)
            for batch in _batches(keys):
                await _consume(tx, "delete_unsupported_entities", {**params, "keys": batch})

        await self._write(work)

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> None:
        """Delete in batches of ``DELETE_BATCH_ROWS``, one transaction each, so a large graph does not
        need one huge transaction; an interrupted delete is finished by calling it again."""
        params = {
            **_owner(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id),
            "limit": DELETE_BATCH_ROWS,
        }
        for query in ("delete_knowledge_base_entities", "delete_knowledge_base_support"):
            while True:

                async def work(tx: AsyncManagedTransaction, query: str = query) -> int:
                    return int((await _rows(tx, query, params))[0]["deleted"])

                if await self._write(work) == 0:
                    break

    # --- reads ----------------------------------------------------------------------------------

    async def find_entities(self, scope: Scope, name: str, limit: int) -> list[GraphEntity]:
        """Entities whose normalised name equals, starts with, or contains ``name`` — in that order."""
        params = {**_scope(scope), "key": _key("name", name), "limit": _limit(limit)}
        rows = await self._read(lambda tx: _rows(tx, "find_entities", params))
        return [_entity(row) for row in rows]

    async def neighbourhood(self, scope: Scope, entity_name: str, hops: int, limit: int) -> Neighbourhood:
        """The entity named ``entity_name`` (exact normalised name, in every knowledge base of the scope
        that has it), the relations within ``hops`` of it and their endpoints.

        At most ``limit`` relations: those of the entity first, then those one hop further, each hop
        ordered by how many documents support a relation. Every relation and entity carries the ids of
        the chunks (of the scope's documents, when it names some) that support it.
        """
        if hops not in range(1, MAX_HOPS + 1):
            raise ValueError(f"hops must be 1 or {MAX_HOPS}, got {hops}")
        base = _scope(scope)
        key = _key("entity_name", entity_name)
        limit = _limit(limit)

        async def work(tx: AsyncManagedTransaction) -> Neighbourhood:
            refs = [{"knowledge_base_id": kb, "key": key} for kb in base["knowledge_base_ids"]]
            start = await _rows(tx, "entities_by_key", {**base, "refs": refs})
            if not start:
                return Neighbourhood(entities=[], relations=[])
            relations: dict[tuple[str, str, str, str], _RelationRows] = {}
            frontier = [{"knowledge_base_id": row["knowledge_base_id"], "key": key} for row in start]
            for hop in range(hops):
                if not frontier or len(relations) >= limit:
                    break
                # Relations of the start entity were all read on the first hop: leave them out after.
                exclude = [key] if hop > 0 else []
                params = {**base, "refs": frontier, "exclude_keys": exclude, "limit": limit}
                seen = set(_endpoints(relations))
                for row in await _rows(tx, "relations_around", params):
                    ident = (row["knowledge_base_id"], row["source_key"], row["type_key"], row["target_key"])
                    if ident in relations:
                        continue
                    if len(relations) >= limit:
                        break
                    relations[ident] = _RelationRows.of(row)
                frontier = [
                    {"knowledge_base_id": kb, "key": k}
                    for kb, k in dict.fromkeys(_endpoints(relations))
                    if (kb, k) not in seen and k != key
                ]
            ends = set(_endpoints(relations)) - {(row["knowledge_base_id"], key) for row in start}
            more = [{"knowledge_base_id": kb, "key": k} for kb, k in sorted(ends)]
            others = await _rows(tx, "entities_by_key", {**base, "refs": more}) if more else []
            return Neighbourhood(
                entities=[_entity(row) for row in [*start, *others]],
                relations=[rows.relation() for rows in relations.values()],
            )

        return await self._read(work)

    # --- life cycle -----------------------------------------------------------------------------

    async def ensure_schema(self) -> None:
        """Create the constraints and indexes; idempotent. Statements an engine refuses are skipped."""
        async with self._schema_lock:
            if self._schema_ready:
                return
            async with self._driver.session(database=self._database) as session:
                for statement, fallback in _SCHEMA:
                    for candidate in (statement, fallback):
                        if candidate is None:
                            break
                        try:
                            await (await session.run(candidate)).consume()
                            break
                        except Neo4jError as exc:
                            log.info("graph schema statement refused", statement=candidate, error=exc.message)
            self._schema_ready = True

    async def close(self) -> None:
        await self._driver.close()

    # --- internals ------------------------------------------------------------------------------

    async def _read(self, work: Callable[[AsyncManagedTransaction], Awaitable[_T]]) -> _T:
        await self.ensure_schema()
        async with self._driver.session(database=self._database) as session:
            return await session.execute_read(work)

    async def _write(self, work: Callable[[AsyncManagedTransaction], Awaitable[_T]]) -> _T:
        """Run ``work`` in one write transaction; the driver retries transient errors, and we retry a
        uniqueness conflict, which is how a MERGE racing another MERGE of the same key can end."""
        await self.ensure_schema()
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                async with self._driver.session(database=self._database) as session:
                    return await session.execute_write(work)
            except (ConstraintError, TransientError):
                if attempt == WRITE_ATTEMPTS:
                    raise
                await asyncio.sleep(_RETRY_BASE_SECONDS * attempt * (1 + random.random()))
        raise AssertionError("unreachable")


# --- rows in, rows out ------------------------------------------------------------------------------


@dataclass
class _EntityRow:
    key: str
    name: str
    type: str = ""
    description: str = ""
    chunk_ids: list[str] = field(default_factory=list)

    def add(self, chunk_ids: Iterable[str]) -> None:
        self.chunk_ids.extend(c for c in chunk_ids if c not in self.chunk_ids)


def _write_rows(
    entities: Sequence[GraphEntity], relations: Sequence[GraphRelation]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Validate and merge the input by key; a relation's endpoints become entities it supports."""
    merged: dict[str, _EntityRow] = {}

    def entity(key: str, name: str, chunk_ids: Sequence[str], field_name: str) -> _EntityRow:
        row = merged.setdefault(key, _EntityRow(key=key, name=name.strip()))
        row.add(_ids(field_name, chunk_ids))
        return row

    for i, given in enumerate(entities):
        key = _key(f"entities[{i}].name", given.name)
        row = entity(key, given.name, given.source_chunk_ids, f"entities[{i}].source_chunk_ids")
        row.type = given.type.strip() or row.type
        row.description = given.description.strip() or row.description
    links: dict[tuple[str, str, str], dict[str, Any]] = {}
    for i, rel in enumerate(relations):
        source_key = _key(f"relations[{i}].source", rel.source)
        target_key = _key(f"relations[{i}].target", rel.target)
        type_key = _key(f"relations[{i}].type", rel.type)
        chunk_ids = _ids(f"relations[{i}].source_chunk_ids", rel.source_chunk_ids)
        entity(source_key, rel.source, chunk_ids, f"relations[{i}].source_chunk_ids")
        entity(target_key, rel.target, chunk_ids, f"relations[{i}].source_chunk_ids")
        link = links.setdefault(
            (source_key, type_key, target_key),
            {
                "source_key": source_key,
                "target_key": target_key,
                "type_key": type_key,
                "type": rel.type.strip(),
                "description": "",
                "chunk_ids": [],
            },
        )
        link["description"] = rel.description.strip() or link["description"]
        link["chunk_ids"].extend(c for c in chunk_ids if c not in link["chunk_ids"])
    entity_rows = [
        {"key": r.key, "name": r.name, "type": r.type, "description": r.description, "chunk_ids": r.chunk_ids}
        for r in merged.values()
    ]
    return entity_rows, list(links.values())


@dataclass
class _RelationRows:
    """One relation as read: the edges of every document that supports it."""

    knowledge_base_id: str
    source: str
    target: str
    source_key: str
    target_key: str
    type: str
    description: str
    chunk_ids: tuple[str, ...]

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> _RelationRows:
        edges = sorted(
            zip(row["document_ids"], row["types"], row["descriptions"], row["chunk_lists"], strict=True),
            key=lambda edge: str(edge[0]),
        )
        return cls(
            knowledge_base_id=row["knowledge_base_id"],
            source=row["source"],
            target=row["target"],
            source_key=row["source_key"],
            target_key=row["target_key"],
            type=next((t for _, t, _, _ in edges if t), ""),
            description=next((d for _, _, d, _ in edges if d), ""),
            chunk_ids=_union(chunks for _, _, _, chunks in edges),
        )

    def relation(self) -> GraphRelation:
        return GraphRelation(
            source=self.source,
            target=self.target,
            type=self.type,
            description=self.description,
            source_chunk_ids=self.chunk_ids,
            knowledge_base_id=self.knowledge_base_id,
        )


def _endpoints(relations: Mapping[tuple[str, str, str, str], _RelationRows]) -> Iterator[tuple[str, str]]:
    """(knowledge base, key) of both ends of every relation, in reading order."""
    for rel in relations.values():
        yield rel.knowledge_base_id, rel.source_key
        yield rel.knowledge_base_id, rel.target_key


def _entity(row: Mapping[str, Any]) -> GraphEntity:
    supports = sorted(zip(row["document_ids"], row["chunk_lists"], strict=True), key=lambda s: str(s[0]))
    return GraphEntity(
        name=row["name"],
        type=row["type"] or "",
        description=row["description"] or "",
        source_chunk_ids=_union(chunks for _, chunks in supports),
        knowledge_base_id=row["knowledge_base_id"],
    )


def _union(lists: Iterable[Sequence[str] | None]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c for chunks in lists for c in chunks or ()))


# --- validation ---------------------------------------------------------------------------------


def _required(field_name: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field_name} must be a non-empty string")
    return value


def _owner(**ids: str) -> dict[str, Any]:
    return {name: _required(name, value) for name, value in ids.items()}


def _scope(scope: Scope) -> dict[str, Any]:
    if not scope.knowledge_base_ids:
        raise ValueError("scope.knowledge_base_ids must name at least one knowledge base")
    return {
        "tenant_id": _required("scope.tenant_id", scope.tenant_id),
        "knowledge_base_ids": [
            _required("scope.knowledge_base_ids[]", kb) for kb in scope.knowledge_base_ids
        ],
        "document_ids": [_required("scope.document_ids[]", d) for d in scope.document_ids],
    }


def _key(field_name: str, name: str) -> str:
    return entity_key(field_name, _required(field_name, name))


def _ids(field_name: str, ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(_required(f"{field_name}[]", i) for i in ids))


def _limit(limit: int) -> int:
    if not 1 <= limit <= MAX_RESULT_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_RESULT_LIMIT}, got {limit}")
    return limit


def _batches(rows: Sequence[_T], size: int = WRITE_BATCH_ROWS) -> Iterator[list[_T]]:
    for start in range(0, len(rows), size):
        yield list(rows[start : start + size])


async def _rows(tx: AsyncManagedTransaction, query: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    result = await tx.run(QUERIES[query], dict(params))
    return await result.data()


async def _consume(tx: AsyncManagedTransaction, query: str, params: Mapping[str, Any]) -> None:
    await (await tx.run(QUERIES[query], dict(params))).consume()
