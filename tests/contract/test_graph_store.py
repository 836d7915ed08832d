"""Conformance suite for retrieval's ``GraphStore``: every backend must pass it.

Runs against ArcadeDB (``arcadedb-embedded``, its Bolt plugin, one server for the whole session)
always, and against Neo4j when ``NEO4J_URL`` is set (with ``NEO4J_USER``/``NEO4J_PASSWORD``). Each
test writes under tenants of its own and deletes their knowledge bases afterwards, so tests do not
see each other and a Neo4j database is left as it was found.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from neo4j import AsyncGraphDatabase

from knowsphere_contracts.vocabulary import MAX_ENTITY_NAME_CHARS
from knowsphere_retrieval.adapters.graph_bolt import BoltGraphStore
from knowsphere_retrieval.adapters.graph_server import EmbeddedBoltServer
from knowsphere_retrieval.domain.ports import GraphEntity, GraphRelation, GraphStore, Neighbourhood, Scope


@dataclass(frozen=True)
class BoltTarget:
    uri: str
    user: str
    password: str
    database: str | None
    data_dir: Path | None = None  # of the embedded server


@pytest.fixture(scope="session")
def arcadedb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoltTarget]:
    data_dir = tmp_path_factory.mktemp("arcadedb")
    server = EmbeddedBoltServer(data_dir, 0)
    asyncio.run(server.start())  # on this (the main) thread, which outlives the server
    pid = server.pid
    assert pid is not None
    try:
        credentials = server.credentials
        yield BoltTarget(server.uri, credentials.user, credentials.password, server.database, data_dir)
    finally:
        asyncio.run(server.stop())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # no JVM left behind


@pytest.fixture(params=["arcadedb", "neo4j"])
def target(request: pytest.FixtureRequest) -> BoltTarget:
    if request.param == "neo4j":
        url = os.environ.get("NEO4J_URL")
        if not url:
            pytest.skip("NEO4J_URL is not set; set it (and NEO4J_USER, NEO4J_PASSWORD) to run against Neo4j")
        return BoltTarget(
            url,
            os.environ.get("NEO4J_USER", "neo4j"),
            os.environ.get("NEO4J_PASSWORD", ""),
            os.environ.get("NEO4J_DATABASE") or None,
        )
    target: BoltTarget = request.getfixturevalue("arcadedb")
    return target


@dataclass
class Graph:
    """The store under test, fresh tenant ids, and the knowledge bases to clean up afterwards."""

    store: GraphStore
    target: BoltTarget
    written: set[tuple[str, str]] = field(default_factory=set)

    def tenant(self) -> str:
        return f"tenant-{uuid.uuid4().hex[:12]}"

    async def upsert(
        self,
        tenant: str,
        kb: str,
        document: str,
        entities: list[GraphEntity],
        relations: list[GraphRelation] | None = None,
    ) -> None:
        self.written.add((tenant, kb))
        await self.store.upsert(tenant, kb, document, entities, relations or [])

    async def count(self, tenant: str) -> dict[str, int]:
        """Entities, supports and relations of a tenant, counted behind the interface's back."""
        counts = await self.stored(tenant)
        return {name: counts[name] for name in ("entities", "supports", "relations")}

    async def stored(self, tenant: str) -> dict[str, int]:
        """What a tenant holds, chunk references included, counted behind the interface's back."""
        driver = AsyncGraphDatabase.driver(self.target.uri, auth=(self.target.user, self.target.password))
        try:
            async with driver.session(database=self.target.database) as session:
                counts = {}
                for name, query in {
                    "entities": "MATCH (e:KsEntity {tenant_id: $t}) RETURN count(e) AS n",
                    "supports": "MATCH (s:KsSupport {tenant_id: $t}) RETURN count(s) AS n",
                    "relations": "MATCH (a:KsEntity {tenant_id: $t})-[r:KS_REL]->() RETURN count(r) AS n",
                    "chunk_refs": "MATCH (s:KsSupport {tenant_id: $t}) RETURN sum(size(s.chunk_ids)) AS n",
                    "relation_chunk_refs": "MATCH (:KsEntity {tenant_id: $t})-[r:KS_REL]->() "
                    "RETURN sum(size(r.chunk_ids)) AS n",
                }.items():
                    record = await (await session.run(query, t=tenant)).single(strict=True)
                    counts[name] = int(record["n"] or 0)
                return counts
        finally:
            await driver.close()


@pytest.fixture
async def graph(target: BoltTarget) -> AsyncIterator[Graph]:
    store = BoltGraphStore(target.uri, target.user, target.password, database=target.database)
    graph = Graph(store, target)
    try:
        yield graph
    finally:
        for tenant, kb in graph.written:
            await store.delete_knowledge_base(tenant, kb)
        await store.close()


def scope(tenant: str, *kbs: str, documents: tuple[str, ...] = ()) -> Scope:
    return Scope(tenant_id=tenant, knowledge_base_ids=kbs, document_ids=documents)


def names(items: list[GraphEntity]) -> list[str]:
    return [e.name for e in items]


def triples(hood: Neighbourhood) -> set[tuple[str, str, str]]:
    return {(r.source, r.type, r.target) for r in hood.relations}


def relation(hood: Neighbourhood, source: str, target: str) -> GraphRelation:
    (found,) = [r for r in hood.relations if r.source == source and r.target == target]
    return found


# A small company graph: Ada works at Acme, Acme is located in Berlin, Berlin is in Germany.
ENTITIES = [
    GraphEntity("Ada Lovelace", "person", "mathematician", ("c1",)),
    GraphEntity("Acme Corp", "organization", "makes anvils", ("c1", "c2")),
    GraphEntity("Berlin", "city", "", ("c2",)),
    GraphEntity("Germany", "country", "", ("c3",)),
]
RELATIONS = [
    GraphRelation("Ada Lovelace", "Acme Corp", "works_at", "Ada joined Acme", ("c1",)),
    GraphRelation("Acme Corp", "Berlin", "located_in", "", ("c2",)),
    GraphRelation("Berlin", "Germany", "located_in", "capital", ("c3",)),
]


async def test_upserting_the_same_batch_twice_changes_nothing(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)
    first = await graph.stored(tenant)
    hood_first = await graph.store.neighbourhood(scope(tenant, "kb"), "Acme Corp", 2, 50)

    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)

    # Entity chunks 1+2+1+1, plus each relation's chunk on both of its ends: c1 and c2 are there
    # already, c3 joins Berlin.
    assert first == {"entities": 4, "supports": 4, "relations": 3, "chunk_refs": 6, "relation_chunk_refs": 3}
    assert await graph.stored(tenant) == first
    hood_again = await graph.store.neighbourhood(scope(tenant, "kb"), "Acme Corp", 2, 50)
    assert hood_again == hood_first
    assert relation(hood_again, "Ada Lovelace", "Acme Corp").source_chunk_ids == ("c1",)


async def test_entities_merge_by_normalised_name_and_chunk_ids_are_unioned(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", [GraphEntity("Acme  Corp", "organization", "", ("c1",))])
    await graph.upsert(tenant, "kb", "doc-1", [GraphEntity("ACME CORP", "", "anvils", ("c2", "c1"))])

    (found,) = await graph.store.find_entities(scope(tenant, "kb"), "acme corp", 10)

    assert found.name == "Acme  Corp"  # the first spelling stays the display name
    assert (found.type, found.description) == ("organization", "anvils")  # empty values do not erase
    assert found.source_chunk_ids == ("c1", "c2")
    assert found.knowledge_base_id == "kb"
    assert (await graph.count(tenant))["entities"] == 1


async def test_find_entities_is_case_insensitive_exact_then_prefix_then_contains(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(
        tenant,
        "kb",
        "doc-1",
        [
            GraphEntity("Acme Corporation Holdings", source_chunk_ids=("c1",)),
            GraphEntity("Big Acme", source_chunk_ids=("c2",)),
            GraphEntity("ACME", source_chunk_ids=("c3",)),
            GraphEntity("Acme Corp", source_chunk_ids=("c4",)),
            GraphEntity("Zenith", source_chunk_ids=("c5",)),
        ],
    )
    store = graph.store

    assert names(await store.find_entities(scope(tenant, "kb"), "aCmE", 10)) == [
        "ACME",  # exact
        "Acme Corp",  # prefix, shorter first
        "Acme Corporation Holdings",
        "Big Acme",  # contains
    ]
    assert names(await store.find_entities(scope(tenant, "kb"), "ACME CORP", 10)) == [
        "Acme Corp",
        "Acme Corporation Holdings",
    ]
    assert names(await store.find_entities(scope(tenant, "kb"), "acme", 2)) == ["ACME", "Acme Corp"]
    assert await store.find_entities(scope(tenant, "kb"), "nobody", 10) == []
    (found,) = await store.find_entities(scope(tenant, "kb"), "  zenith ", 10)
    assert found.source_chunk_ids == ("c5",)


async def test_one_hop_neighbourhood_has_the_relations_of_the_entity_with_their_chunks(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)

    hood = await graph.store.neighbourhood(scope(tenant, "kb"), "acme corp", 1, 50)

    assert triples(hood) == {("Ada Lovelace", "works_at", "Acme Corp"), ("Acme Corp", "located_in", "Berlin")}
    works_at = relation(hood, "Ada Lovelace", "Acme Corp")
    assert (works_at.description, works_at.source_chunk_ids, works_at.knowledge_base_id) == (
        "Ada joined Acme",
        ("c1",),
        "kb",
    )
    assert relation(hood, "Acme Corp", "Berlin").source_chunk_ids == ("c2",)
    assert sorted(names(hood.entities)) == ["Acme Corp", "Ada Lovelace", "Berlin"]
    by_name = {e.name: e for e in hood.entities}
    assert by_name["Acme Corp"].source_chunk_ids == ("c1", "c2")
    assert by_name["Ada Lovelace"].type == "person"


async def test_two_hop_neighbourhood_reaches_one_relation_further(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)
    await graph.upsert(
        tenant,
        "kb",
        "doc-2",
        [],
        [GraphRelation("Germany", "Europe", "part_of", "", ("c9",))],  # three hops from Ada
    )

    hood = await graph.store.neighbourhood(scope(tenant, "kb"), "Ada Lovelace", 2, 50)

    assert triples(hood) == {
        ("Ada Lovelace", "works_at", "Acme Corp"),
        ("Acme Corp", "located_in", "Berlin"),
    }
    assert sorted(names(hood.entities)) == ["Acme Corp", "Ada Lovelace", "Berlin"]
    from_berlin = await graph.store.neighbourhood(scope(tenant, "kb"), "Berlin", 2, 50)
    assert triples(from_berlin) == {
        ("Ada Lovelace", "works_at", "Acme Corp"),
        ("Acme Corp", "located_in", "Berlin"),
        ("Berlin", "located_in", "Germany"),
        ("Germany", "part_of", "Europe"),
    }
    assert relation(from_berlin, "Germany", "Europe").source_chunk_ids == ("c9",)
    # Relations next to the entity come first when the limit cuts.
    one = await graph.store.neighbourhood(scope(tenant, "kb"), "Berlin", 2, 2)
    assert triples(one) == {("Acme Corp", "located_in", "Berlin"), ("Berlin", "located_in", "Germany")}
    assert await graph.store.neighbourhood(scope(tenant, "kb"), "Atlantis", 2, 50) == Neighbourhood([], [])


async def test_a_relation_from_two_documents_is_one_relation_with_both_chunks(graph: Graph) -> None:
    tenant = graph.tenant()
    works_at = GraphRelation("Ada Lovelace", "Acme Corp", "works_at", "", ("c1",))
    await graph.upsert(tenant, "kb", "doc-1", [], [works_at])
    await graph.upsert(
        tenant, "kb", "doc-2", [], [GraphRelation("ada lovelace", "ACME CORP", "Works_At", "", ("d7",))]
    )

    hood = await graph.store.neighbourhood(scope(tenant, "kb"), "Ada Lovelace", 1, 10)

    (only,) = hood.relations
    assert only.source_chunk_ids == ("c1", "d7")
    doc_2 = await graph.store.neighbourhood(scope(tenant, "kb", documents=("doc-2",)), "Ada Lovelace", 1, 10)
    assert [r.source_chunk_ids for r in doc_2.relations] == [("d7",)]
    assert [e.source_chunk_ids for e in doc_2.entities] == [("d7",), ("d7",)]


async def test_a_tenant_never_sees_another_tenants_graph_even_with_its_knowledge_base_id(
    graph: Graph,
) -> None:
    tenant_a, tenant_b = graph.tenant(), graph.tenant()
    await graph.upsert(tenant_b, "kb-shared", "doc-1", ENTITIES, RELATIONS)
    await graph.upsert(tenant_a, "kb-shared", "doc-9", [GraphEntity("Acme Corp", "", "", ("a1",))])
    store = graph.store

    (own,) = await store.find_entities(scope(tenant_a, "kb-shared"), "acme", 10)
    assert own.source_chunk_ids == ("a1",)
    assert await store.find_entities(scope(tenant_a, "kb-shared"), "ada", 10) == []
    hood = await store.neighbourhood(scope(tenant_a, "kb-shared"), "Acme Corp", 2, 50)
    assert hood.relations == []
    assert [e.source_chunk_ids for e in hood.entities] == [("a1",)]
    assert await store.neighbourhood(scope(tenant_a, "kb-shared"), "Berlin", 2, 50) == Neighbourhood([], [])

    await store.delete_document(tenant_a, "kb-shared", "doc-1")  # B's document id, A's tenant
    await store.delete_chunks(tenant_a, "kb-shared", ["c1", "c2", "c3"])
    await store.delete_knowledge_base(tenant_a, "kb-shared")

    assert await graph.count(tenant_b) == {"entities": 4, "supports": 4, "relations": 3}
    assert await graph.count(tenant_a) == {"entities": 0, "supports": 0, "relations": 0}


async def test_reads_stay_in_the_knowledge_bases_and_documents_of_the_scope(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb-1", "doc-1", ENTITIES, RELATIONS)
    await graph.upsert(tenant, "kb-2", "doc-2", [GraphEntity("Acme Corp", "", "", ("x1",))])
    await graph.upsert(tenant, "kb-2", "doc-3", [GraphEntity("Acme Widgets", "", "", ("x2",))])
    store = graph.store

    assert names(await store.find_entities(scope(tenant, "kb-2"), "acme", 10)) == [
        "Acme Corp",
        "Acme Widgets",
    ]
    both = await store.find_entities(scope(tenant, "kb-1", "kb-2"), "acme corp", 10)
    assert sorted((e.knowledge_base_id, e.source_chunk_ids) for e in both) == [
        ("kb-1", ("c1", "c2")),
        ("kb-2", ("x1",)),
    ]
    only_doc_3 = await store.find_entities(scope(tenant, "kb-2", documents=("doc-3",)), "acme", 10)
    assert names(only_doc_3) == ["Acme Widgets"]
    assert (await store.neighbourhood(scope(tenant, "kb-2"), "Acme Corp", 2, 50)).relations == []
    hood = await store.neighbourhood(scope(tenant, "kb-1", "kb-2"), "Acme Corp", 1, 50)
    assert {r.knowledge_base_id for r in hood.relations} == {"kb-1"}
    assert sorted((e.knowledge_base_id, e.name) for e in hood.entities) == [
        ("kb-1", "Acme Corp"),
        ("kb-1", "Ada Lovelace"),
        ("kb-1", "Berlin"),
        ("kb-2", "Acme Corp"),
    ]


async def test_deleting_a_document_removes_its_support_and_what_only_it_supported(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)
    await graph.upsert(
        tenant,
        "kb",
        "doc-2",
        [GraphEntity("Acme Corp", "", "", ("d1",))],
        [GraphRelation("Acme Corp", "Berlin", "located_in", "", ("d1",))],
    )

    await graph.store.delete_document(tenant, "kb", "doc-1")

    assert await graph.count(tenant) == {"entities": 2, "supports": 2, "relations": 1}
    assert await graph.store.find_entities(scope(tenant, "kb"), "ada", 10) == []
    assert await graph.store.find_entities(scope(tenant, "kb"), "germany", 10) == []
    hood = await graph.store.neighbourhood(scope(tenant, "kb"), "Acme Corp", 2, 50)
    assert [(r.source, r.target, r.source_chunk_ids) for r in hood.relations] == [
        ("Acme Corp", "Berlin", ("d1",))
    ]
    assert sorted((e.name, e.source_chunk_ids) for e in hood.entities) == [
        ("Acme Corp", ("d1",)),
        ("Berlin", ("d1",)),
    ]
    await graph.store.delete_document(tenant, "kb", "doc-1")  # again: nothing left to do
    await graph.store.delete_document(tenant, "kb", "doc-2")
    assert await graph.count(tenant) == {"entities": 0, "supports": 0, "relations": 0}


async def test_deleting_chunks_removes_facts_only_they_supported(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)

    await graph.store.delete_chunks(tenant, "kb", ["c1", "c3"])

    assert sorted(names(await graph.store.find_entities(scope(tenant, "kb"), "e", 10))) == [
        "Acme Corp",
        "Berlin",
    ]
    hood = await graph.store.neighbourhood(scope(tenant, "kb"), "Acme Corp", 2, 50)
    assert triples(hood) == {("Acme Corp", "located_in", "Berlin")}
    assert sorted((e.name, e.source_chunk_ids) for e in hood.entities) == [
        ("Acme Corp", ("c2",)),
        ("Berlin", ("c2",)),
    ]


async def test_deleting_a_knowledge_base_removes_its_graph_only(graph: Graph) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb-1", "doc-1", ENTITIES, RELATIONS)
    await graph.upsert(tenant, "kb-2", "doc-1", ENTITIES, RELATIONS)

    await graph.store.delete_knowledge_base(tenant, "kb-1")

    assert await graph.store.find_entities(scope(tenant, "kb-1"), "acme", 10) == []
    assert await graph.count(tenant) == {"entities": 4, "supports": 4, "relations": 3}
    assert {
        e.knowledge_base_id for e in await graph.store.find_entities(scope(tenant, "kb-1", "kb-2"), "a", 10)
    } == {"kb-2"}
    await graph.store.delete_knowledge_base(tenant, "kb-1")  # unknown now: succeeds


@pytest.mark.parametrize(
    "name",
    [
        "') DETACH DELETE n //",
        "x'}) MATCH (n) DETACH DELETE n RETURN 1 //",
        'O\'Brien "the \\\\ slash" \\u0027',
        "$tenant_id {key: 1} `backtick`",
    ],
)
async def test_names_that_look_like_cypher_are_stored_and_found_literally(graph: Graph, name: str) -> None:
    tenant = graph.tenant()
    await graph.upsert(tenant, "kb", "doc-1", ENTITIES, RELATIONS)
    await graph.upsert(
        tenant,
        "kb",
        "doc-2",
        [GraphEntity(name, name, name, (name,))],
        [GraphRelation(name, "Acme Corp", name, name, (name,))],
    )

    (found,) = await graph.store.find_entities(scope(tenant, "kb"), name.upper(), 10)
    hood = await graph.store.neighbourhood(scope(tenant, "kb"), name, 1, 10)

    assert (found.name, found.type, found.description, found.source_chunk_ids) == (name, name, name, (name,))
    assert [(r.source, r.type, r.description, r.source_chunk_ids) for r in hood.relations] == [
        (name, name, name, (name,))
    ]
    assert await graph.count(tenant) == {"entities": 5, "supports": 6, "relations": 4}
    await graph.store.delete_document(tenant, "kb", "doc-2")
    assert await graph.count(tenant) == {"entities": 4, "supports": 4, "relations": 3}


async def test_concurrent_upserts_of_the_same_entities_make_one_of_each(graph: Graph) -> None:
    tenant = graph.tenant()
    await asyncio.gather(
        *(graph.upsert(tenant, "kb", f"doc-{i}", ENTITIES, RELATIONS) for i in range(4)),
    )

    assert await graph.count(tenant) == {"entities": 4, "supports": 16, "relations": 12}
    hood = await graph.store.neighbourhood(scope(tenant, "kb"), "Acme Corp", 1, 10)
    assert len(hood.relations) == 2


async def test_bad_input_is_refused_with_the_field_and_limit_named(graph: Graph) -> None:
    tenant = graph.tenant()
    store = graph.store
    with pytest.raises(ValueError, match="hops must be 1 or 2, got 3"):
        await store.neighbourhood(scope(tenant, "kb"), "Acme", 3, 10)
    with pytest.raises(ValueError, match="limit must be between 1 and"):
        await store.find_entities(scope(tenant, "kb"), "Acme", 0)
    with pytest.raises(ValueError, match="name must contain more than white space"):
        await store.find_entities(scope(tenant, "kb"), "   ", 10)
    with pytest.raises(ValueError, match=r"scope\.knowledge_base_ids must name at least one"):
        await store.find_entities(scope(tenant), "Acme", 10)
    with pytest.raises(
        ValueError, match=rf"entities\[1\]\.name is {MAX_ENTITY_NAME_CHARS + 1} characters long"
    ):
        await graph.upsert(
            tenant, "kb", "doc-1", [ENTITIES[0], GraphEntity("x" * (MAX_ENTITY_NAME_CHARS + 1))]
        )
    with pytest.raises(ValueError, match=r"relations\[0\]\.type must be a non-empty string"):
        await graph.upsert(tenant, "kb", "doc-1", [], [GraphRelation("a", "b", "")])
    with pytest.raises(ValueError, match="tenant_id must be a non-empty string"):
        await store.upsert("", "kb", "doc-1", ENTITIES, [])
    assert await graph.count(tenant) == {"entities": 0, "supports": 0, "relations": 0}


def test_the_embedded_server_listens_on_loopback_and_keeps_its_password_private(arcadedb: BoltTarget) -> None:
    assert arcadedb.data_dir is not None
    password_file = arcadedb.data_dir / "root-password"
    assert arcadedb.uri.startswith("bolt://127.0.0.1:")
    assert password_file.read_text() == arcadedb.password
    assert password_file.stat().st_mode & 0o777 == 0o600
    assert arcadedb.data_dir.stat().st_mode & 0o777 == 0o700
