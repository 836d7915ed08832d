"""Conformance suite for retrieval's ``VectorIndex``: every vector backend must pass it.

Runs against

- ``edge``: Qdrant's engine in-process (``qdrant-edge-py``), a fresh data directory per test — always;
- ``qdrant-local``: the server adapter on qdrant-client's local mode — always. It checks what the
  adapter sends (filters, point ids, payload, errors) where no server runs; it is not the server;
- ``qdrant-server``: the server adapter against the Qdrant server at ``QDRANT_URL`` (with
  ``QDRANT_API_KEY`` when set) — only when that variable is set. Every test uses its own collections
  (``ks-test-<random>``) and drops them afterwards, so a shared server is fine.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.adapters.vector_qdrant import LOCAL_MODE, QdrantServerVectorIndex
from knowsphere_retrieval.domain.ports import Scope, VectorIndex, VectorPoint

QDRANT_URL = os.environ.get("QDRANT_URL", "")
QDRANT_API_KEY = os.environ.get("QDRANT_API_KEY") or None
DIM = 4
SCORE_TOLERANCE = 1e-4


@dataclass
class Backend:
    """Opens indexes over one backend's storage; each test's indexes share that storage."""

    name: str
    _open: Callable[[], VectorIndex]
    keeps_data_across_reopen: bool
    opened: list[VectorIndex] = field(default_factory=list)

    def open(self) -> VectorIndex:
        index = self._open()
        self.opened.append(index)
        return index


@pytest.fixture(params=["edge", "qdrant-local", "qdrant-server"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name: str = request.param
    if name == "edge":
        chosen = Backend(name, lambda: EdgeVectorIndex(tmp_path / "vectors"), keeps_data_across_reopen=True)
    elif name == "qdrant-local":
        chosen = Backend(name, lambda: QdrantServerVectorIndex(LOCAL_MODE), keeps_data_across_reopen=False)
    else:
        if not QDRANT_URL:
            pytest.skip("no Qdrant server: set QDRANT_URL (and QDRANT_API_KEY if needed) to run this backend")
        chosen = Backend(
            name, lambda: QdrantServerVectorIndex(QDRANT_URL, QDRANT_API_KEY), keeps_data_across_reopen=True
        )
    yield chosen
    for index in chosen.opened:
        await index.close()


@pytest.fixture
def created_names() -> list[str]:
    return []


@pytest.fixture
def new_collection_name(created_names: list[str]) -> Callable[[], str]:
    def new() -> str:
        created_names.append(f"ks-test-{uuid.uuid4().hex[:12]}")
        return created_names[-1]

    return new


@pytest.fixture
async def index(backend: Backend, created_names: list[str]) -> AsyncIterator[VectorIndex]:
    yield backend.open()
    if backend.name == "qdrant-server":  # a shared server outlives the test: drop what it created
        cleaner = backend.open()
        for name in created_names:
            await cleaner.drop_collection(name)


@pytest.fixture
async def collection(index: VectorIndex, new_collection_name: Callable[[], str]) -> str:
    name = new_collection_name()
    await index.ensure_collection(name, DIM)
    return name


def point(
    chunk_id: str,
    vector: Sequence[float],
    *,
    tenant: str = "acme",
    kb: str = "kb-1",
    doc: str = "doc-1",
) -> VectorPoint:
    return VectorPoint(
        chunk_id=chunk_id, tenant_id=tenant, knowledge_base_id=kb, document_id=doc, vector=list(vector)
    )


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def ids(
    index: VectorIndex, collection: str, vector: Sequence[float], scope: Scope, limit: int = 10
) -> list[str]:
    return [hit.chunk_id for hit in await index.search(collection, vector, scope, limit)]


ACME_KB1 = Scope("acme", ("kb-1",))


async def test_nearest_neighbours_come_back_in_cosine_order_with_cosine_scores(
    index: VectorIndex, collection: str
) -> None:
    vectors = {
        "same-direction": [1.0, 0.0, 0.0, 0.0],
        "longer-almost-same": [3.0, 0.3, 0.0, 0.0],
        "diagonal": [1.0, 1.0, 0.0, 0.0],
        "orthogonal": [0.0, 1.0, 0.0, 0.0],
        "opposite-ish": [-1.0, 0.2, 0.0, 0.0],
    }
    await index.upsert(collection, [point(c, v) for c, v in vectors.items()])
    query = [2.0, 0.0, 0.0, 0.0]  # length does not matter for cosine

    hits = await index.search(collection, query, ACME_KB1, limit=10)

    expected = sorted(vectors, key=lambda c: cosine(query, vectors[c]), reverse=True)
    assert [h.chunk_id for h in hits] == expected
    for hit in hits:
        assert hit.score == pytest.approx(cosine(query, vectors[hit.chunk_id]), abs=SCORE_TOLERANCE)
    assert [h.chunk_id for h in await index.search(collection, query, ACME_KB1, limit=2)] == expected[:2]
    assert await index.search(collection, query, ACME_KB1, limit=0) == []


async def test_a_tenant_never_sees_or_touches_another_tenants_points(
    index: VectorIndex, collection: str
) -> None:
    await index.upsert(
        collection,
        [
            point("acme-1", [1, 0, 0, 0], tenant="acme", kb="kb-acme"),
            point("same-id", [0, 1, 0, 0], tenant="acme", kb="kb-acme"),
            point("globex-1", [1, 0.1, 0, 0], tenant="globex", kb="kb-globex", doc="g-doc"),
            point("same-id", [0, 0, 1, 0], tenant="globex", kb="kb-globex", doc="g-doc"),
        ],
    )
    # acme writing into a knowledge-base id that globex uses must not leak into globex's reads either
    await index.upsert(collection, [point("acme-intruder", [1, 0, 0, 0], tenant="acme", kb="kb-globex")])

    assert await ids(index, collection, [1, 0, 0, 0], Scope("acme", ("kb-globex",))) == ["acme-intruder"]
    assert set(await ids(index, collection, [1, 0, 0, 0], Scope("globex", ("kb-globex",)))) == {
        "globex-1",
        "same-id",
    }
    assert await index.count(collection, "acme", "kb-globex") == 1
    assert await index.count(collection, "globex", "kb-globex") == 2
    assert await index.count(collection, "globex", "kb-acme") == 0

    # the same chunk id in two tenants is two points: each tenant finds its own vector
    [acme_hit] = await index.search(collection, [0, 1, 0, 0], Scope("acme", ("kb-acme",)), limit=1)
    [globex_hit] = await index.search(collection, [0, 0, 1, 0], Scope("globex", ("kb-globex",)), limit=1)
    assert (acme_hit.chunk_id, globex_hit.chunk_id) == ("same-id", "same-id")
    assert acme_hit.score == pytest.approx(1.0, abs=SCORE_TOLERANCE)
    assert globex_hit.score == pytest.approx(1.0, abs=SCORE_TOLERANCE)

    # acme's deletes aimed at globex's ids and knowledge base leave globex's points alone
    await index.delete_chunks(collection, "acme", ["globex-1", "same-id"])
    await index.delete_document(collection, "acme", "kb-globex", "g-doc")
    await index.delete_knowledge_base(collection, "acme", "kb-globex")
    assert await index.count(collection, "globex", "kb-globex") == 2
    assert await index.count(collection, "acme", "kb-globex") == 0
    assert await ids(index, collection, [0, 1, 0, 0], Scope("acme", ("kb-acme",))) == ["acme-1"]


async def test_knowledge_base_and_document_filters(index: VectorIndex, collection: str) -> None:
    await index.upsert(
        collection,
        [
            point("k1-d1-a", [1, 0, 0, 0], kb="kb-1", doc="d1"),
            point("k1-d1-b", [0.9, 0.1, 0, 0], kb="kb-1", doc="d1"),
            point("k1-d2", [0.8, 0.2, 0, 0], kb="kb-1", doc="d2"),
            point("k2-d3", [1, 0.05, 0, 0], kb="kb-2", doc="d3"),
            point("k3-d4", [1, 0, 0, 0], kb="kb-3", doc="d4"),
        ],
    )
    query = [1, 0, 0, 0]
    assert set(await ids(index, collection, query, Scope("acme", ("kb-1",)))) == {
        "k1-d1-a",
        "k1-d1-b",
        "k1-d2",
    }
    assert set(await ids(index, collection, query, Scope("acme", ("kb-1", "kb-2")))) == {
        "k1-d1-a",
        "k1-d1-b",
        "k1-d2",
        "k2-d3",
    }
    assert set(await ids(index, collection, query, Scope("acme", ("kb-1",), ("d1",)))) == {
        "k1-d1-a",
        "k1-d1-b",
    }
    assert set(await ids(index, collection, query, Scope("acme", ("kb-1", "kb-2"), ("d2", "d3")))) == {
        "k1-d2",
        "k2-d3",
    }
    # a document of another knowledge base does not widen the scope
    assert await ids(index, collection, query, Scope("acme", ("kb-1",), ("d4",))) == []
    # no knowledge base means nothing, never everything
    assert await ids(index, collection, query, Scope("acme", ())) == []


async def test_upsert_is_idempotent_by_chunk_id_and_replaces_the_vector(
    index: VectorIndex, collection: str
) -> None:
    batch = [point(f"c{i}", [1, i, 0, 0], doc=f"d{i % 2}") for i in range(10)]
    await index.upsert(collection, batch)
    await index.upsert(collection, batch)
    assert await index.count(collection, "acme", "kb-1") == 10

    await index.upsert(collection, [point("c3", [0, 0, 0, 1], doc="d1")])
    assert await index.count(collection, "acme", "kb-1") == 10
    [top] = await index.search(collection, [0, 0, 0, 1], ACME_KB1, limit=1)
    assert top.chunk_id == "c3"
    assert top.score == pytest.approx(1.0, abs=SCORE_TOLERANCE)


async def test_a_vector_of_the_wrong_length_is_rejected_and_nothing_is_written(
    index: VectorIndex, collection: str
) -> None:
    with pytest.raises(ValueError, match=r"chunk 'bad'.*3 dimensions.*4-dimensional"):
        await index.upsert(collection, [point("good", [1, 0, 0, 0]), point("bad", [1, 0, 0])])
    assert await index.count(collection, "acme", "kb-1") == 0

    await index.upsert(collection, [point("good", [1, 0, 0, 0])])
    with pytest.raises(ValueError, match=r"query vector has 5 dimensions.*4-dimensional"):
        await index.search(collection, [1, 0, 0, 0, 0], ACME_KB1, limit=3)
    with pytest.raises(ValueError, match=r"holds 4-dimensional.*dimension 8"):
        await index.ensure_collection(collection, 8)
    await index.ensure_collection(collection, DIM)  # the same dimension again is fine
    assert await index.count(collection, "acme", "kb-1") == 1


async def test_bad_arguments_get_clear_errors(index: VectorIndex, collection: str) -> None:
    with pytest.raises(ValueError, match="collection name"):
        await index.ensure_collection("../outside", DIM)
    with pytest.raises(ValueError, match="dimension is 0"):
        await index.ensure_collection("ks-test-zero", 0)
    with pytest.raises(ValueError, match="empty tenant_id"):
        await index.upsert(collection, [point("c1", [1, 0, 0, 0], tenant="")])
    with pytest.raises(ValueError, match="limit is -1"):
        await index.search(collection, [1, 0, 0, 0], ACME_KB1, limit=-1)


async def test_deletes_by_chunk_document_and_knowledge_base(index: VectorIndex, collection: str) -> None:
    await index.upsert(
        collection,
        [
            point("c1", [1, 0, 0, 0], kb="kb-1", doc="d1"),
            point("c2", [1, 0.1, 0, 0], kb="kb-1", doc="d1"),
            point("c3", [1, 0.2, 0, 0], kb="kb-1", doc="d2"),
            point("c4", [1, 0.3, 0, 0], kb="kb-2", doc="d3"),
        ],
    )
    both = Scope("acme", ("kb-1", "kb-2"))

    await index.delete_chunks(collection, "acme", ["c1", "never-indexed"])
    assert set(await ids(index, collection, [1, 0, 0, 0], both)) == {"c2", "c3", "c4"}

    await index.delete_document(collection, "acme", "kb-1", "d1")
    assert set(await ids(index, collection, [1, 0, 0, 0], both)) == {"c3", "c4"}
    assert await index.count(collection, "acme", "kb-1") == 1

    await index.delete_knowledge_base(collection, "acme", "kb-1")
    assert await ids(index, collection, [1, 0, 0, 0], both) == ["c4"]
    assert (await index.count(collection, "acme", "kb-1"), await index.count(collection, "acme", "kb-2")) == (
        0,
        1,
    )


async def test_points_survive_close_and_reopen(backend: Backend, index: VectorIndex, collection: str) -> None:
    if not backend.keeps_data_across_reopen:
        pytest.skip(f"{backend.name} keeps nothing once closed")
    await index.upsert(collection, [point(f"c{i}", [1, i, 0, 0]) for i in range(5)])
    before = await index.search(collection, [1, 1, 0, 0], ACME_KB1, limit=5)
    await index.close()

    reopened = backend.open()
    assert collection in await reopened.collections()
    assert await reopened.count(collection, "acme", "kb-1") == 5
    assert await reopened.search(collection, [1, 1, 0, 0], ACME_KB1, limit=5) == before
    with pytest.raises(ValueError, match="4-dimensional"):
        await reopened.upsert(collection, [point("c9", [1, 0, 0])])  # the dimension was kept too
    await reopened.upsert(collection, [point("c9", [1, 9, 0, 0])])  # and writing goes on
    assert await reopened.count(collection, "acme", "kb-1") == 6


async def test_collections_are_listed_and_dropped(
    index: VectorIndex, new_collection_name: Callable[[], str]
) -> None:
    small, large = new_collection_name(), new_collection_name()
    await index.ensure_collection(small, DIM)
    await index.ensure_collection(large, 8)
    await index.upsert(small, [point("c1", [1, 0, 0, 0])])
    assert {small, large} <= set(await index.collections())

    await index.drop_collection(small)
    assert small not in await index.collections()
    assert large in await index.collections()
    assert await index.count(small, "acme", "kb-1") == 0
    assert await index.search(small, [1, 0, 0, 0], ACME_KB1, limit=3) == []

    await index.ensure_collection(small, 8)  # a dropped name can be created afresh, any dimension
    assert await index.count(small, "acme", "kb-1") == 0


async def test_a_collection_that_does_not_exist_reads_as_empty_and_refuses_writes(
    index: VectorIndex, new_collection_name: Callable[[], str]
) -> None:
    missing = new_collection_name()
    assert await index.search(missing, [1, 0, 0, 0], ACME_KB1, limit=3) == []
    assert await index.count(missing, "acme", "kb-1") == 0
    await index.delete_document(missing, "acme", "kb-1", "d1")
    await index.delete_knowledge_base(missing, "acme", "kb-1")
    await index.delete_chunks(missing, "acme", ["c1"])
    await index.drop_collection(missing)
    with pytest.raises(KeyError, match="ensure_collection"):
        await index.upsert(missing, [point("c1", [1, 0, 0, 0])])
    assert missing not in await index.collections()
