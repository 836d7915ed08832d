"""Retrieval evaluation (``EvaluateQueries``) through the real contract, in-process, over real embedded
stores, called with ``knowsphere_clients.RetrievalClient`` as the gateway calls it.

What a caller notices: each labelled question comes back scored in each mode asked for, with figures
that can be worked out by hand from the ranking; a label names a document by its id, its file name or
its file name without the extension; chunks of one document count once; bad input names its field and
the limit; another tenant's knowledge base is NOT_FOUND; each call is one span. modelhub is scripted
(toy query vectors, no rerank model configured).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_clients import RetrievalClient
from knowsphere_clients.errors import ServiceError
from knowsphere_retrieval.domain.evaluation import RankedDocument, file_stem, judged_ranking, score
from knowsphere_retrieval.testing import serving_documents
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_telemetry import attributes

ACME = Identity("acme", "alice")
GLOBEX = Identity("globex", "gus")
KB = "kb"
HYBRID, VECTOR, BM25 = pb.SEARCH_MODE_HYBRID, pb.SEARCH_MODE_VECTOR, pb.SEARCH_MODE_BM25

# Three documents, uploaded as files named after their corpus ids (d1.txt …) with ids of their own.
DOCUMENTS = {
    "doc-1": ("d1.txt", ["The pump is serviced every six months.", "Pump seals are replaced yearly."]),
    "doc-2": ("d2.txt", ["Unused annual leave can be carried over until the end of March."]),
    "doc-3": ("d3.txt", ["Pump alarm: stop the pump, then restart the pump after the pump cools."]),
}


@pytest.fixture
async def retrieval(tmp_path: Path) -> AsyncIterator[RetrievalClient]:
    """The service with Acme's knowledge base ``kb`` holding the three documents."""
    async with serving_documents(tmp_path, ACME, KB, DOCUMENTS) as client:
        yield client


def query(query_id: str, text: str, relevance: Mapping[str, int] | None = None) -> pb.EvaluationQuery:
    return pb.EvaluationQuery(id=query_id, text=text, relevance=relevance or {})


def metrics(evaluation: pb.ModeEvaluation) -> dict[str, float]:
    m = evaluation.metrics
    return {
        "ndcg_at_10": m.ndcg_at_10,
        "recall_at_5": m.recall_at_5,
        "recall_at_10": m.recall_at_10,
        "recall_at_20": m.recall_at_20,
        "mrr_at_10": m.mrr_at_10,
    }


async def test_each_query_is_scored_in_each_mode_against_labels_by_id_file_name_and_stem(
    retrieval: RetrievalClient,
) -> None:
    queries = [
        # d1 judged by its file name without the extension, d3 by its document id.
        query("q1", "pump", {"d1": 2, "doc-3": 1}),
        # d2 judged by its file name; a second relevant document is not in the knowledge base at all.
        query("q2", "annual leave", {"d2.txt": 1, "d9": 1, "d1": 0}),
    ]
    with bound_identity(ACME):
        answer = await retrieval.evaluate_queries(KB, [BM25, HYBRID, VECTOR], queries)

    assert [q.query_id for q in answer.queries] == ["q1", "q2"]
    assert [[m.mode for m in q.modes] for q in answer.queries] == [[BM25, HYBRID, VECTOR]] * 2
    q1, q2 = (q.modes[0] for q in answer.queries)

    # BM25 finds d3 (the pump four times) before d1, whose two chunks count as one document.
    assert list(q1.ranking) == ["d3", "d1"]
    # DCG = 1/log2(2) + 2/log2(3) = 2.261860; ideal = 2/log2(2) + 1/log2(3) = 2.630930.
    assert metrics(q1) == pytest.approx(
        {
            "ndcg_at_10": (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)),
            "recall_at_5": 1.0,
            "recall_at_10": 1.0,
            "recall_at_20": 1.0,
            "mrr_at_10": 1.0,
        }
    )
    assert metrics(q1)["ndcg_at_10"] == pytest.approx(0.859719, abs=1e-6)

    assert list(q2.ranking) == ["d2"]
    # DCG = 1; ideal = 1 + 1/log2(3) = 1.630930 (d9 is judged relevant, found or not).
    assert metrics(q2) == pytest.approx(
        {
            "ndcg_at_10": 1 / (1 + 1 / math.log2(3)),
            "recall_at_5": 0.5,
            "recall_at_10": 0.5,
            "recall_at_20": 0.5,
            "mrr_at_10": 1.0,
        }
    )

    # Every document appears once in every ranking, whatever the mode.
    for evaluated in answer.queries:
        for mode in evaluated.modes:
            assert len(mode.ranking) == len(set(mode.ranking)) <= 3
    # The vector leg finds every document with a toy vector; its figures agree with its own ranking.
    vector = answer.queries[0].modes[2]
    assert sorted(vector.ranking) == ["d1", "d2", "d3"]
    ranked = [RankedDocument(f"doc-{stem[1]}", f"{stem}.txt") for stem in vector.ranking]
    assert metrics(vector) == pytest.approx(vars(score(ranked, {"d1": 2, "doc-3": 1})))


async def test_a_query_without_relevant_documents_scores_zero(retrieval: RetrievalClient) -> None:
    with bound_identity(ACME):
        answer = await retrieval.evaluate_queries(KB, [BM25], [query("q", "pump", {"d1": 0})])
    [evaluated] = answer.queries
    assert list(evaluated.modes[0].ranking) == ["d3", "d1"]
    assert set(metrics(evaluated.modes[0]).values()) == {0.0}


def test_a_label_names_a_document_by_id_file_name_or_stem() -> None:
    document = RankedDocument("doc-7", "report.final.pdf")
    assert file_stem("report.final.pdf") == "report.final" and file_stem("README") == "README"
    assert document.label_in({"report.final"}) == "report.final"
    assert document.label_in({"report.final.pdf"}) == "report.final.pdf"
    assert document.label_in({"doc-7", "report.final"}) == "doc-7"
    assert document.label_in({"report"}) is None
    assert RankedDocument("doc-8", "").stem == "doc-8"
    # Unjudged documents keep their ids: they take a rank and count as not relevant.
    assert judged_ranking([RankedDocument("x", "a.txt"), document], {"report.final": 1}) == [
        "x",
        "report.final",
    ]


# --- bad input -------------------------------------------------------------------------------------

GOOD = query("q", "pump", {"d1": 1})


@pytest.mark.parametrize(
    ("modes", "queries", "field", "says"),
    [
        ([], [GOOD], "modes", "at least one mode"),
        ([BM25, 7], [GOOD], "modes[1]", "unknown mode 7; one of hybrid, vector, bm25"),
        ([pb.SEARCH_MODE_UNSPECIFIED], [GOOD], "modes[0]", "unknown mode 0"),
        ([BM25, BM25], [GOOD], "modes[1]", "bm25 is given twice"),
        ([BM25], [], "queries", "at least one query"),
        ([BM25], [query(f"q{i}", "pump") for i in range(51)], "queries", "51 queries; the limit is 50"),
        ([BM25], [query("", "pump")], "queries[0].id", "an id is required"),
        ([BM25], [GOOD, query("q", "leave")], "queries[1].id", "'q' is given twice"),
        ([BM25], [GOOD, query("q2", "  ")], "queries[1].text", "empty text"),
        ([BM25], [query("q", "p" * 4001)], "queries[0].text", "4001 characters; the limit is 4000"),
        (
            [BM25],
            [query("q", "pump", {f"d{i}": 1 for i in range(101)})],
            "queries[0].relevance",
            "101 labels; the limit is 100",
        ),
        ([BM25], [query("q", "pump", {"d1": -1})], "queries[0].relevance", "grade -1 of 'd1' is negative"),
    ],
)
async def test_bad_input_is_refused_naming_the_field_and_the_limit(
    retrieval: RetrievalClient,
    modes: list[int],
    queries: list[pb.EvaluationQuery],
    field: str,
    says: str,
) -> None:
    with bound_identity(ACME), pytest.raises(ServiceError) as refused:
        await retrieval.evaluate_queries(KB, modes, queries)  # type: ignore[arg-type]
    assert refused.value.status == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.field == field
    assert says in refused.value.user_message


async def test_the_limits_let_the_largest_request_through(retrieval: RetrievalClient) -> None:
    queries = [
        query(f"q{i}", "p" * 4000 if i == 0 else "pump", {f"d{j}": 100 for j in range(100)})
        for i in range(50)
    ]
    with bound_identity(ACME):
        answer = await retrieval.evaluate_queries(KB, [BM25], queries)
    assert len(answer.queries) == 50


async def test_another_tenants_knowledge_base_is_not_found(retrieval: RetrievalClient) -> None:
    with bound_identity(GLOBEX), pytest.raises(ServiceError) as foreign:
        await retrieval.evaluate_queries(KB, [BM25], [GOOD])
    assert foreign.value.status == grpc.StatusCode.NOT_FOUND
    with bound_identity(ACME), pytest.raises(ServiceError) as unknown:
        await retrieval.evaluate_queries("no-such-kb", [BM25], [GOOD])
    assert unknown.value.status == grpc.StatusCode.NOT_FOUND
    assert foreign.value.user_message.replace(KB, "X") == unknown.value.user_message.replace(
        "no-such-kb", "X"
    )


async def test_each_call_is_one_span_naming_the_knowledge_base(
    retrieval: RetrievalClient, spans: Any
) -> None:
    with bound_identity(ACME):
        await retrieval.evaluate_queries(KB, [BM25, VECTOR], [GOOD, query("q2", "annual leave")])
    [span] = [s for s in spans.get_finished_spans() if s.name == "retrieval.evaluate_queries"]
    assert span.attributes[attributes.KNOWLEDGE_BASE_ID] == KB
    assert span.attributes[attributes.RESULT_COUNT] == 4  # two queries in two modes
    searches = [s for s in spans.get_finished_spans() if s.name == "retrieval.bm25_query"]
    assert all(s.parent is not None and s.parent.span_id == span.context.span_id for s in searches)
    assert len(searches) == 2  # the BM25 mode's two searches (the vector mode runs no BM25 leg)
