"""The OpenSearch lexical adapter against hand-written OpenSearch 2.x wire exchanges.

No OpenSearch server runs on this machine: each test starts a scripted server
(``opensearch_replay.py``) that checks every request the adapter sends — method, path, query
string, body — against a fixture in ``fixtures/opensearch/`` and answers with the fixture's
response. The fixtures are written by hand from OpenSearch 2.x's documented shapes, not recorded
from a server: the adapter has not met a real OpenSearch here. The conformance suite in
``tests/contract/test_lexical_index.py`` runs the same adapter against a real server whenever
``OPENSEARCH_URL`` is set.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from knowsphere_retrieval.adapters.lexical_opensearch import OpenSearchLexicalIndex, index_body
from knowsphere_retrieval.domain.analysis import Analyzer
from knowsphere_retrieval.domain.ports import Hit, LexicalDoc, Scope

# The repository runs pytest with --import-mode=importlib (no test folder on sys.path); the scripted
# server is a helper module beside this file.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from opensearch_replay import OpenSearchReplay, differences  # noqa: E402

TENANT = "t-acme"
PUMP = LexicalDoc(
    chunk_id="c1",
    tenant_id=TENANT,
    knowledge_base_id="kb-manuals",
    document_id="doc-pump",
    text="Replace the XJ-2000-B impeller when the pump runs hot.",
    title="Pump manual",
)
LAB = LexicalDoc(
    chunk_id="c2",
    tenant_id=TENANT,
    knowledge_base_id="kb-manuals",
    document_id="doc-lab",
    text="上海交通大学的水泵实验室",
)


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()


@asynccontextmanager
async def replayed(
    scenario: str, analyzer: Analyzer
) -> AsyncIterator[tuple[OpenSearchLexicalIndex, OpenSearchReplay]]:
    async with OpenSearchReplay(scenario) as replay:
        index = OpenSearchLexicalIndex(replay.url, "ks-wire", analyzer=analyzer, timeout_seconds=5)
        try:
            yield index, replay
        finally:
            await index.close()
        replay.assert_all_replayed()


async def test_upsert_sends_one_bulk_of_pre_analysed_terms_and_search_filters_by_tenant(
    analyzer: Analyzer,
) -> None:
    async with replayed("upsert_and_search", analyzer) as (index, _):
        await index.upsert([PUMP, LAB])
        hits = await index.search("running pump", Scope(TENANT, ("kb-manuals", "kb-lab")), limit=10)
    assert hits == [Hit(chunk_id="c1", score=pytest.approx(1.3862942))]


async def test_existing_index_is_reused_and_a_missing_identifier_falls_back_to_the_terms(
    analyzer: Analyzer,
) -> None:
    async with replayed("existing_index_and_identifier_fallback", analyzer) as (index, _):
        hits = await index.search("XJ-2000-D", Scope(TENANT, ("kb-manuals",), ("doc-pump",)), limit=5)
    assert [hit.chunk_id for hit in hits] == ["c1", "c7"]
    assert hits[0].score > hits[1].score


async def test_deletes_are_tenant_scoped_delete_by_query_and_count_is_filtered(analyzer: Analyzer) -> None:
    async with replayed("deletes_and_count", analyzer) as (index, _):
        await index.delete_chunks(TENANT, ["c1", "c2"])
        await index.delete_document(TENANT, "kb-manuals", "doc-pump")
        await index.delete_knowledge_base(TENANT, "kb-old")
        assert await index.count(TENANT, "kb-manuals") == 17


async def test_a_rejected_bulk_item_raises_naming_the_chunk_and_reason(analyzer: Analyzer) -> None:
    async with replayed("bulk_rejected", analyzer) as (index, _):
        with pytest.raises(RuntimeError, match=r"1 of 2 chunks.*6:t-acme:c2.*mapper_parsing_exception"):
            await index.upsert([PUMP, LAB])


async def test_the_scripted_server_rejects_a_request_that_differs_from_the_fixture(
    analyzer: Analyzer,
) -> None:
    # Guards the guard: a wrong request must fail the test, not be answered.
    async with OpenSearchReplay("deletes_and_count") as replay:
        index = OpenSearchLexicalIndex(replay.url, "ks-wire", analyzer=analyzer, timeout_seconds=5)
        try:
            with pytest.raises(Exception, match="replay_mismatch"):
                await index.delete_chunks("t-other", ["c1", "c2"])
        finally:
            await index.close()
    assert replay.mismatches and "t-other" in replay.mismatches[0]


async def test_inputs_are_checked_before_anything_is_sent(analyzer: Analyzer) -> None:
    async with OpenSearchReplay("deletes_and_count") as replay:
        index = OpenSearchLexicalIndex(replay.url, "ks-wire", analyzer=analyzer)
        try:
            with pytest.raises(ValueError, match="limit must be at least 1"):
                await index.search("pump", Scope(TENANT, ("kb",)), limit=0)
            with pytest.raises(ValueError, match=r"docs\[0\].tenant_id"):
                await index.upsert([LexicalDoc("c1", "", "kb", "doc", "text")])
            assert await index.search("pump", Scope(TENANT, ()), limit=5) == []
            assert await index.search("the of and", Scope(TENANT, ("kb",)), limit=5) == []
        finally:
            await index.close()
    assert replay.received == []
    with pytest.raises(ValueError, match="index_prefix 'KS' must be lower-case"):
        OpenSearchLexicalIndex("http://127.0.0.1:9", "KS")


def test_mapping_analyses_terms_by_whitespace_only_with_bm25() -> None:
    body = index_body()
    assert body["settings"]["analysis"]["analyzer"]["knowsphere_terms"] == {
        "type": "custom",
        "tokenizer": "knowsphere_terms",
        "filter": [],
    }
    for field in ("text", "title"):
        assert body["mappings"]["properties"][field]["similarity"] == "knowsphere_bm25"
    assert differences({"a": "<any>", "b": [1]}, {"a": {"x": 1}, "b": [2]}) == [
        "body.b[0]: expected 1, got 2"
    ]
