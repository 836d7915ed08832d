"""Conformance suite for retrieval's ``LexicalIndex`` (BM25): every backend must pass it.

Runs against the embedded tantivy index (a directory per test) always, and against OpenSearch
whenever ``OPENSEARCH_URL`` is set (e.g. ``http://127.0.0.1:9200``): each test then gets its own
index ``ks-test-<random>-lexical``, dropped afterwards. Without a server the OpenSearch adapter's
requests are checked against exchanges hand-written from OpenSearch 2.x's documented shapes (not
recorded from a server) in ``services/retrieval/tests/test_opensearch_wire.py``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from knowsphere_retrieval.adapters.lexical_opensearch import OpenSearchLexicalIndex
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.domain.analysis import Analyzer
from knowsphere_retrieval.domain.ports import Hit, LexicalDoc, LexicalIndex, Scope

OPENSEARCH_URL = os.environ.get("OPENSEARCH_URL", "")
TENANT = "tenant-a"
OTHER_TENANT = "tenant-b"
KB = "kb-1"


class Backend:
    """Opens handles on one backend's storage for one test; ``reopen`` closes and opens again."""

    def __init__(self, kind: str, tmp_path: Path, analyzer: Analyzer) -> None:
        self.kind = kind
        self._dir = tmp_path / "lexical"
        self._prefix = f"ks-test-{uuid.uuid4().hex[:12]}"
        self._analyzer = analyzer
        self._open: list[LexicalIndex] = []

    def open(self) -> LexicalIndex:
        index: LexicalIndex
        if self.kind == "tantivy":
            index = TantivyLexicalIndex(self._dir, analyzer=self._analyzer)
        else:
            index = OpenSearchLexicalIndex(OPENSEARCH_URL, self._prefix, analyzer=self._analyzer, replicas=0)
        self._open.append(index)
        return index

    async def reopen(self, index: LexicalIndex) -> LexicalIndex:
        await index.close()
        self._open.remove(index)
        return self.open()

    async def close_all(self) -> None:
        if self.kind == "opensearch":
            cleanup = OpenSearchLexicalIndex(OPENSEARCH_URL, self._prefix)
            await cleanup.drop_index()
            await cleanup.close()
        for index in self._open:
            await index.close()


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()  # one per module: jieba's dictionary loads once


@pytest.fixture(params=["tantivy", "opensearch"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, analyzer: Analyzer
) -> AsyncIterator[Backend]:
    if request.param == "opensearch" and not OPENSEARCH_URL:
        pytest.skip(
            "OPENSEARCH_URL is not set: the OpenSearch backend runs this suite only against a real "
            "server (without one, its requests are only checked against hand-written exchanges in "
            "services/retrieval/tests/test_opensearch_wire.py)"
        )
    backend = Backend(request.param, tmp_path, analyzer)
    yield backend
    await backend.close_all()


@pytest.fixture
async def index(backend: Backend) -> LexicalIndex:
    return backend.open()


def doc(
    chunk_id: str, text: str, *, kb: str = KB, document: str = "doc-1", tenant: str = TENANT, title: str = ""
) -> LexicalDoc:
    return LexicalDoc(
        chunk_id=chunk_id,
        tenant_id=tenant,
        knowledge_base_id=kb,
        document_id=document,
        text=text,
        title=title,
    )


async def ids(
    index: LexicalIndex,
    query: str,
    *,
    kbs: Sequence[str] = (KB,),
    docs: Sequence[str] = (),
    tenant: str = TENANT,
) -> list[str]:
    hits = await index.search(query, Scope(tenant, tuple(kbs), tuple(docs)), limit=20)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    return [h.chunk_id for h in hits]


# --- ranking and analysis ----------------------------------------------------------------------


async def test_the_chunk_with_the_rare_query_term_ranks_first(index: LexicalIndex) -> None:
    await index.upsert(
        [doc(f"common-{i}", f"The pump and the valve of line {i} were inspected.") for i in range(6)]
        + [doc("rare", "The pump showed cavitation damage on the impeller.")]
    )
    found = await ids(index, "pump cavitation")
    assert found[0] == "rare"
    assert len(found) == 7


async def test_limit_caps_the_hits_and_keeps_the_best(index: LexicalIndex) -> None:
    await index.upsert([doc(f"c{i}", "pump " * (i + 1) + "station") for i in range(5)])
    hits = await index.search("pump", Scope(TENANT, (KB,)), limit=2)
    assert len(hits) == 2
    assert all(isinstance(h, Hit) and h.score > 0 for h in hits)


async def test_english_is_stemmed(index: LexicalIndex) -> None:
    await index.upsert(
        [doc("runs", "The engine runs hot after an hour."), doc("other", "The engine idles quietly.")]
    )
    assert await ids(index, "running") == ["runs"]
    assert await ids(index, "RUN") == ["runs"]


async def test_chinese_is_segmented_and_a_whole_name_outranks_its_parts(index: LexicalIndex) -> None:
    await index.upsert(
        [
            doc("sjtu", "上海交通大学是一所位于上海的研究型大学。"),
            doc("scattered", "上海的交通在高峰时段很拥挤，很多大学生乘坐地铁。"),
            doc("pku", "北京大学位于北京海淀区。"),
        ]
    )
    assert "sjtu" in await ids(index, "交通大学")
    assert (await ids(index, "上海交通大学"))[0] == "sjtu"
    assert await ids(index, "海淀区") == ["pku"]


async def test_part_numbers_and_error_codes_match_exactly(index: LexicalIndex) -> None:
    await index.upsert(
        [
            doc("part-b", "Replace the impeller of pump XJ-2000-B every 500 hours."),
            doc("part-c", "Replace the impeller of pump XJ-2000-C every 800 hours."),
            doc("access", "Windows Update fails with error 0x80070005 (access denied)."),
            doc("param", "Error 0x80070057 means that a parameter is incorrect."),
            doc("reset", "The client logs ERR_CONN_RESET when the proxy drops the connection; code E0420."),
        ]
    )
    assert await ids(index, "XJ-2000-B") == ["part-b"]
    assert await ids(index, "xj-2000-c") == ["part-c"]
    assert await ids(index, "0x80070005") == ["access"]
    assert await ids(index, "ERR_CONN_RESET") == ["reset"]
    assert await ids(index, "E0420 错误") == ["reset"]
    # No chunk has this exact identifier: its parts still find both pumps.
    assert set(await ids(index, "XJ-2000")) == {"part-b", "part-c"}
    # In a sentence an identifier is one term among others.
    assert (await ids(index, "how often is the impeller of XJ-2000-B replaced"))[0] == "part-b"


# --- scope ---------------------------------------------------------------------------------------


async def test_a_tenant_never_sees_another_tenants_chunks_even_with_its_kb_id(index: LexicalIndex) -> None:
    await index.upsert(
        [
            doc("b-1", "Confidential pump maintenance plan.", tenant=OTHER_TENANT, kb="kb-b"),
            doc("shared-id", "Tenant B's valve notes.", tenant=OTHER_TENANT, kb="kb-b"),
            doc("a-1", "Tenant A's valve notes.", kb=KB),
        ]
    )
    assert await ids(index, "pump maintenance", kbs=("kb-b",)) == []
    assert await ids(index, "valve notes", kbs=("kb-b", KB)) == ["a-1"]
    assert await index.count(TENANT, "kb-b") == 0
    # Deletes by tenant A with tenant B's ids remove nothing of B's.
    await index.delete_chunks(TENANT, ["b-1", "shared-id"])
    await index.delete_document(TENANT, "kb-b", "doc-1")
    await index.delete_knowledge_base(TENANT, "kb-b")
    assert await index.count(OTHER_TENANT, "kb-b") == 2
    # A chunk id that tenant B also uses does not overwrite B's chunk.
    await index.upsert([doc("shared-id", "Tenant A's gasket list.")])
    assert await ids(index, "gasket", tenant=OTHER_TENANT, kbs=("kb-b",)) == []
    assert await ids(index, "valve", tenant=OTHER_TENANT, kbs=("kb-b",)) == ["shared-id"]
    assert await ids(index, "gasket") == ["shared-id"]


async def test_knowledge_base_and_document_filters(index: LexicalIndex) -> None:
    await index.upsert(
        [
            doc("k1-d1", "pump curve", kb="kb-1", document="d1"),
            doc("k1-d2", "pump seal", kb="kb-1", document="d2"),
            doc("k2-d3", "pump motor", kb="kb-2", document="d3"),
        ]
    )
    assert set(await ids(index, "pump", kbs=("kb-1",))) == {"k1-d1", "k1-d2"}
    assert set(await ids(index, "pump", kbs=("kb-1", "kb-2"))) == {"k1-d1", "k1-d2", "k2-d3"}
    assert await ids(index, "pump", kbs=("kb-1", "kb-2"), docs=("d2",)) == ["k1-d2"]
    assert await ids(index, "pump", kbs=("kb-1",), docs=("d3",)) == []
    assert await ids(index, "pump", kbs=()) == []


# --- writes --------------------------------------------------------------------------------------


async def test_upsert_is_idempotent_and_replaces_the_text(index: LexicalIndex) -> None:
    first = [doc("c1", "pump alpha"), doc("c2", "pump gamma")]
    await index.upsert(first)
    await index.upsert(first)
    assert await index.count(TENANT, KB) == 2
    await index.upsert([doc("c1", "valve beta")])
    assert await index.count(TENANT, KB) == 2
    assert await ids(index, "alpha") == []
    assert await ids(index, "beta") == ["c1"]
    # Within one batch the last copy of a chunk wins.
    await index.upsert([doc("c3", "first delta"), doc("c3", "second epsilon")])
    assert await index.count(TENANT, KB) == 3
    assert await ids(index, "delta") == []
    assert await ids(index, "epsilon") == ["c3"]


async def test_deletes_remove_chunks_documents_and_knowledge_bases(index: LexicalIndex) -> None:
    await index.upsert(
        [
            doc("c1", "pump one", document="d1"),
            doc("c2", "pump two", document="d1"),
            doc("c3", "pump three", document="d2"),
            doc("c4", "pump four", kb="kb-2", document="d3"),
        ]
    )
    await index.delete_chunks(TENANT, ["c1", "no-such-chunk"])
    assert set(await ids(index, "pump")) == {"c2", "c3"}
    await index.delete_document(TENANT, KB, "d2")
    assert await ids(index, "pump") == ["c2"]
    assert await index.count(TENANT, KB) == 1
    await index.delete_knowledge_base(TENANT, KB)
    assert await index.count(TENANT, KB) == 0
    assert await ids(index, "pump", kbs=(KB, "kb-2")) == ["c4"]


async def test_bad_input_is_rejected_naming_the_field(index: LexicalIndex) -> None:
    with pytest.raises(ValueError, match=r"docs\[1\]\.knowledge_base_id"):
        await index.upsert([doc("c1", "pump"), doc("c2", "pump", kb="")])
    with pytest.raises(ValueError, match="limit must be at least 1"):
        await index.search("pump", Scope(TENANT, (KB,)), limit=0)
    assert await index.count(TENANT, KB) == 0  # nothing of the rejected batch was written
    assert await index.search("the of and", Scope(TENANT, (KB,)), limit=5) == []


async def test_chunks_survive_close_and_reopen(backend: Backend, index: LexicalIndex) -> None:
    await index.upsert([doc("c1", "pump cavitation"), doc("c2", "valve seat")])
    reopened = await backend.reopen(index)
    assert await reopened.count(TENANT, KB) == 2
    assert await ids(reopened, "cavitation") == ["c1"]
    await reopened.upsert([doc("c3", "gasket")])  # and it can write again
    assert await ids(reopened, "gasket") == ["c3"]
