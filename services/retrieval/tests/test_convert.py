"""The record ↔ proto conversions of retrieval's gRPC face: nothing a caller sends is lost on the way back.

The conversions copy same-named fields, so these tests hold the shapes to each other: a field a
chunk message gains reaches the stored record and every message a chunk is read back in.
"""

from __future__ import annotations

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_retrieval.api.convert import (
    chunk_message,
    search_mode,
    search_result,
    search_settings,
    stored_chunk,
)
from knowsphere_retrieval.domain.fusion import FusedHit
from knowsphere_retrieval.domain.search import ResultItem
from knowsphere_retrieval.settings import Settings

SENT = pb.Chunk(
    id="c1",
    document_id="d1",
    knowledge_base_id="kb",
    file_name="manual.pdf",
    text="The XJ-2000-B pump is serviced every six months.",
    parent_id="p1",
    parent_text="Servicing. The XJ-2000-B pump is serviced every six months.",
    position=4,
    heading_path=["Servicing", "Pumps"],
    page=2,
    metadata={"lang": "en"},
    ingest_run_id="run-7",
    token_count=12,
)
# What a chunk message carries that is not the chunk's own content.
NOT_READ_BACK = {"id", "parent_text", "embeddings", "ingest_run_id", "token_count"}


def test_a_chunk_is_stored_whole_and_read_back_in_every_message():
    record = stored_chunk("acme", SENT)
    assert record.tenant_id == "acme" and record.chunk_id == "c1"
    assert (record.ingest_run_id, record.token_count) == ("run-7", 12)
    as_result = search_result(ResultItem(record, 0.8, FusedHit("c1", 0.8, 0.016, bm25=3.2, bm25_rank=1)))
    as_listed = chunk_message(record, parent_text=SENT.parent_text)
    for message in (as_result, as_listed):
        for field in SENT.DESCRIPTOR.fields:
            if field.name in NOT_READ_BACK:
                continue
            assert getattr(message, field.name) == getattr(SENT, field.name), field.name
        assert message.handle == message.chunk_id == "c1"
    assert as_listed.parent_text == SENT.parent_text
    assert as_result.scores.bm25_rank == 1 and not as_result.scores.HasField("vector")


def test_search_options_override_only_what_they_set():
    defaults = Settings(
        data_dir=".", modelhub_addr="x:1", top_k=8, vector_weight=0.9, expansion_method="synonyms"
    )
    plain = search_settings(pb.SearchRequest(query="q"), defaults)
    assert (plain.top_k, plain.vector_weight, plain.expansion_method, plain.include_parent) == (
        8,
        0.9,
        "synonyms",
        True,
    )
    assert (plain.fusion, plain.bm25_weight, plain.rerank_candidates) == ("convex", 1.1, 30)
    request = pb.SearchRequest(
        query="q",
        top_k=3,
        options=pb.SearchOptions(
            vector_weight=0.0,
            include_parent=False,
            expansion_method=pb.QUERY_EXPANSION_METHOD_LLM_MULTI_QUERY,
            rerank_model_id="bge-reranker",
            mode=pb.SEARCH_MODE_VECTOR,
        ),
    )
    given = search_settings(request, defaults)
    assert (given.top_k, given.vector_weight, given.include_parent) == (3, 0.0, False)
    assert (given.expansion_method, given.rerank_model_id, given.bm25_weight) == ("llm", "bge-reranker", 1.1)
    assert search_mode(request) == "vector" and search_mode(pb.SearchRequest()) == "hybrid"
