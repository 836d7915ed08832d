"""The knowledge-base tools against a real retrieval service (embedded stores), through the real gRPC
server of each.

What the model and the conversation notice: passages come with cN labels and handles to cite, numbered
after the turn's sources so far, and the same chunk keeps its number within the turn; list_chunks reads
a hit in full by its label; grep finds exact codes; document info gives metadata, not text. Another
tenant naming Acme's knowledge base gets nothing of Acme's.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity
from knowsphere_runtime.rpc.testing import serving

from .conftest import ACME, GLOBEX, chunk, configure_kb, toolrunner_service
from .test_execution import call

HANDBOOK = [
    "Employees receive 25 days of paid annual leave per calendar year.",
    "Unused annual leave can be carried over until the end of March.",
    "Error code E0420 means the badge reader could not reach the access server.",
    "Expense reports are due within 30 days of the purchase.",
]


def turn(*sources: pb.Source, kb: str = "kb") -> pb.ToolContext:
    return pb.ToolContext(
        session_id="s1",
        turn_id="t1",
        switches=pb.TurnSwitches(knowledge_base_ids=[kb]),
        sources=list(sources),
    )


def result(answer: pb.ExecuteToolResponse) -> Any:
    assert not answer.HasField("error"), answer.content
    assert json_format.MessageToDict(answer.json) == json.loads(answer.content)  # the same, structured
    return json.loads(answer.content)


async def index_handbook(peers) -> None:
    chunks = [
        chunk(
            "kb",
            "handbook",
            i,
            text,
            heading_path=["Policies"],
            page=i + 1,
            parent_id="handbook-p",
            parent_text=" ".join(HANDBOOK),
        )
        for i, text in enumerate(HANDBOOK)
    ]
    await configure_kb(peers, ACME, "kb", chunks)
    with bound_identity(ACME):
        await peers.index.PutDocumentInfo(
            rpb.PutDocumentInfoRequest(
                documents=[
                    rpb.DocumentMetadata(
                        document_id="handbook",
                        knowledge_base_id="kb",
                        file_name="handbook.pdf",
                        title="Staff handbook",
                        page_count=4,
                        size_bytes=2048,
                        status=rpb.DOCUMENT_STATUS_READY,
                    )
                ]
            )
        )


async def test_doc_retrieval_numbers_sources_after_the_turns_and_keeps_a_chunks_number(peers, toolrunner):
    await index_handbook(peers)
    earlier = pb.Source(label="c1", index=1, kind=pb.SOURCE_KIND_WEB, url="https://example.com/x", title="X")
    async with toolrunner() as stub:
        with bound_identity(ACME):
            first = await stub.ExecuteTool(
                call("doc_retrieval", {"query": "annual leave carried over", "top_k": 2}, turn(earlier))
            )
            assert [s.label for s in first.sources] == ["c2", "c3"]
            again = await stub.ExecuteTool(
                call(
                    "doc_retrieval",
                    {"query": "annual leave carried over", "top_k": 3},
                    turn(earlier, *first.sources),
                )
            )
    hits = result(first)["results"]
    assert [h["source"] for h in hits] == ["c2", "c3"]
    top = first.sources[0]
    assert (top.kind, top.handle, top.document_id, top.file_name, top.knowledge_base_id) == (
        pb.SOURCE_KIND_CHUNK,
        hits[0]["chunk_id"],
        "handbook",
        "handbook.pdf",
        "kb",
    )
    assert top.snippet == hits[0]["text"][:200] and hits[0]["text"] in HANDBOOK
    assert hits[0]["section"] == "Policies" and "context" in hits[0]  # the parent passage to read around
    # The same chunks keep c2 and c3 in the second call; only the new hit is a new source, c4.
    rehits = result(again)["results"]
    assert [h["source"] for h in rehits] == ["c2", "c3", "c4"]
    assert [s.label for s in again.sources] == ["c4"]
    assert {h["chunk_id"]: h["source"] for h in rehits}[hits[0]["chunk_id"]] == "c2"


async def test_list_chunks_reads_a_hit_by_its_label_with_neighbours(peers, toolrunner):
    await index_handbook(peers)
    async with toolrunner() as stub:
        with bound_identity(ACME):
            found = await stub.ExecuteTool(call("grep_chunks", {"pattern": r"E0\d+"}, turn()))
            grep = result(found)
            assert grep["matches"][0]["match"] == "E0420" and grep["matches"][0]["source"] == "c1"
            read = await stub.ExecuteTool(
                call("list_chunks", {"sources": ["[[c1]]"], "neighbours_before": 1}, turn(*found.sources))
            )
            unknown = await stub.ExecuteTool(call("list_chunks", {"sources": ["c9"]}, turn(*found.sources)))
            nothing_named = await stub.ExecuteTool(call("list_chunks", {}, turn()))
    chunks = result(read)["chunks"]
    assert [(c["text"], c.get("neighbour", False)) for c in chunks] == [
        (HANDBOOK[1], True),
        (HANDBOOK[2], False),
    ]
    assert chunks[1]["source"] == "c1"  # the grep hit keeps its number; its neighbour is c2
    assert chunks[0]["source"] == "c2" and [s.label for s in read.sources] == ["c2"]
    assert (
        unknown.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND
        and "c9 is not a source of this turn" in unknown.content
    )
    assert nothing_named.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS


async def test_a_bad_pattern_is_the_models_to_fix_not_retried(peers, toolrunner):
    await index_handbook(peers)
    async with toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("grep_chunks", {"pattern": "(unclosed"}, turn()))
    assert answer.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
    assert answer.attempts == 1 and "pattern" in answer.content


async def test_document_info_gives_metadata_not_text(peers, toolrunner):
    await index_handbook(peers)
    async with toolrunner() as stub:
        with bound_identity(ACME):
            found = await stub.ExecuteTool(
                call("doc_retrieval", {"query": "badge reader error", "top_k": 1}, turn())
            )
            info = await stub.ExecuteTool(
                call("get_document_info", {"document_ids": ["c1", "missing-doc"]}, turn(*found.sources))
            )
    body = result(info)
    assert body["documents"] == [
        {
            "document_id": "handbook",
            "file_name": "handbook.pdf",
            "title": "Staff handbook",
            "size_bytes": 2048,
            "page_count": 4,
            "status": "ready",
            "chunk_count": 4,
        }
    ]
    assert body["not_found"] == ["missing-doc"]
    assert not any(text in info.content for text in HANDBOOK)


async def test_another_tenant_naming_acmes_knowledge_base_gets_nothing_of_acmes(peers, toolrunner):
    await index_handbook(peers)
    async with toolrunner() as stub:
        with bound_identity(ACME):
            acme = await stub.ExecuteTool(call("doc_retrieval", {"query": "annual leave"}, turn()))
            acme_chunk = result(acme)["results"][0]["chunk_id"]
        with bound_identity(GLOBEX):
            search = await stub.ExecuteTool(call("doc_retrieval", {"query": "annual leave"}, turn()))
            grep = await stub.ExecuteTool(call("grep_chunks", {"pattern": "leave"}, turn()))
            read = await stub.ExecuteTool(
                call("list_chunks", {"sources": [acme_chunk], "neighbours_after": 3}, turn())
            )
            info = await stub.ExecuteTool(call("get_document_info", {"document_ids": ["handbook"]}, turn()))
    assert result(search)["results"] == [] and list(search.sources) == []
    assert result(grep)["matches"] == []
    assert result(read)["chunks"] == [] and result(read)["not_found"] == [acme_chunk]
    assert result(info)["documents"] == []
    for answer in (search, grep, read, info):
        assert not any(text in answer.content for text in HANDBOOK)
        assert "handbook.pdf" not in answer.content


class GraphRetrieval:
    """Retrieval answering QueryKnowledgeGraph as its contract says (its graph store needs a server this
    test does not start); records what it was asked."""

    def __init__(self) -> None:
        self.requests: list[rpb.QueryKnowledgeGraphRequest] = []

    async def QueryKnowledgeGraph(self, request: rpb.QueryKnowledgeGraphRequest, context: Any) -> Any:
        self.requests.append(request)
        evidence = rpb.SupportingChunk(
            handle="h-7",
            chunk_id="manual-7",
            document_id="manual",
            file_name="manual.pdf",
            knowledge_base_id="kb",
            snippet="XJ-2000-B is made by Acme Pumps.",
        )
        return rpb.QueryKnowledgeGraphResponse(
            entities=[rpb.GraphEntity(id="e1", name="XJ-2000-B", type="product", knowledge_base_id="kb")],
            relations=[
                rpb.GraphRelation(
                    source_name="XJ-2000-B",
                    target_name="Acme Pumps",
                    type="made_by",
                    weight=0.9,
                    knowledge_base_id="kb",
                    supporting_chunks=[evidence],
                )
            ],
        )


async def test_a_graph_answer_cites_the_passages_its_relations_come_from(tmp_path, unreachable_peers):
    graph = GraphRetrieval()
    context = pb.ToolContext(
        turn_id="t1",
        switches=pb.TurnSwitches(knowledge_base_ids=["kb"], knowledge_graph=True),
        sources=[pb.Source(label="c1", index=1, kind=pb.SOURCE_KIND_CHUNK, chunk_id="other")],
    )
    arguments = {"query_type": "neighbourhood", "entity_name": "XJ-2000-B", "hops": 2}
    async with (
        serving("retrieval", graph) as retrieval,
        toolrunner_service(tmp_path, retrieval, unreachable_peers[1]) as stub,
    ):
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("query_knowledge_graph", arguments, context))
            connection = await stub.ExecuteTool(
                call(
                    "query_knowledge_graph", {"query_type": "connection", "entity_name": "XJ-2000-B"}, context
                )
            )
    body = result(answer)
    assert body["relations"][0]["evidence"] == [
        {"source": "c2", "file_name": "manual.pdf", "snippet": "XJ-2000-B is made by Acme Pumps."}
    ]
    assert [(s.label, s.handle, s.document_id) for s in answer.sources] == [("c2", "h-7", "manual")]
    (request,) = graph.requests  # the connection without a second entity never reached retrieval
    assert list(request.knowledge_base_ids) == ["kb"] and request.parameters.hops == 2
    assert request.template == rpb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD
    assert (
        connection.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
        and "other_entity_name" in connection.content
    )
