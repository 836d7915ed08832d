"""ListTools through the real gRPC server: what the model is offered each turn.

The offer follows the turn's switches (no knowledge base → no knowledge tools, web off → no web tools,
graph off → no graph tool; write_plan, generate_pptx and get_stored_data always), names what it left
out and why, and is byte-identical for identical inputs — whatever order the agent's tools are listed in
— because it sits in the cached prompt prefix.
"""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity

from .conftest import ACME, GLOBEX

KNOWLEDGE = ["doc_retrieval", "get_document_info", "grep_chunks", "list_chunks", "query_knowledge_graph"]
ALWAYS = {"write_plan", "generate_pptx", "get_stored_data"}


def names(response: pb.ListToolsResponse) -> list[str]:
    return [t.name for t in response.tools]


async def test_no_switch_on_leaves_the_tools_that_need_none(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            offered = await stub.ListTools(pb.ListToolsRequest(switches=pb.TurnSwitches()))
    assert set(names(offered)) == ALWAYS
    omitted = {o.name: o.reason for o in offered.omitted}
    assert omitted["doc_retrieval"] == "no knowledge base selected this turn"
    assert omitted["query_knowledge_graph"] == "no knowledge base selected this turn"
    assert omitted["web_search"] == omitted["web_fetch"] == "web search is off this turn"
    assert (
        "get_stored_data" not in omitted and "read_file" not in omitted
    )  # run-time tools are never selected


async def test_each_switch_brings_its_tools(lone_toolrunner, install_skill):
    install_skill(ACME, "report-writer", {"SKILL.md": "Write reports.", "scripts/build.py": "print(1)"})
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            kb_only = await stub.ListTools(
                pb.ListToolsRequest(switches=pb.TurnSwitches(knowledge_base_ids=["kb"]))
            )
            everything = await stub.ListTools(
                pb.ListToolsRequest(
                    switches=pb.TurnSwitches(
                        knowledge_base_ids=["kb"], web_search=True, knowledge_graph=True
                    ),
                    skill_names=["report-writer"],
                )
            )
            graph_without_kb = await stub.ListTools(
                pb.ListToolsRequest(switches=pb.TurnSwitches(knowledge_graph=True))
            )
    assert set(names(kb_only)) == ALWAYS | set(KNOWLEDGE) - {"query_knowledge_graph"}
    assert {o.name: o.reason for o in kb_only.omitted}[
        "query_knowledge_graph"
    ] == "the knowledge graph is off this turn"
    assert names(everything) == [
        "write_plan",
        "doc_retrieval",
        "get_document_info",
        "grep_chunks",
        "list_chunks",
        "query_knowledge_graph",
        "web_fetch",
        "web_search",
        "generate_pptx",
        "execute_skill_script",
        "get_stored_data",
        "read_file",
    ]
    assert list(everything.omitted) == []
    assert "query_knowledge_graph" not in names(graph_without_kb)


async def test_the_agents_selection_narrows_and_unknown_names_are_reported(lone_toolrunner):
    switches = pb.TurnSwitches(knowledge_base_ids=["kb"], web_search=False)
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            offered = await stub.ListTools(
                pb.ListToolsRequest(
                    switches=switches, tool_names=["doc_retrieval", "web_search", "make_coffee"]
                )
            )
    assert names(offered) == ["doc_retrieval", "get_stored_data"]
    assert [(o.name, o.reason) for o in offered.omitted] == [
        ("web_search", "web search is off this turn"),
        ("make_coffee", "unknown tool"),
    ]


async def test_identical_inputs_give_byte_identical_answers(lone_toolrunner):
    switches = pb.TurnSwitches(knowledge_base_ids=["kb-1", "kb-2"], web_search=True)
    selection = ["list_chunks", "doc_retrieval", "web_fetch", "write_plan", "generate_pptx"]
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            first = await stub.ListTools(pb.ListToolsRequest(switches=switches, tool_names=selection))
        with bound_identity(GLOBEX):
            again = await stub.ListTools(
                pb.ListToolsRequest(
                    switches=pb.TurnSwitches(knowledge_base_ids=["other-kb"], web_search=True),
                    tool_names=[*reversed(selection), "doc_retrieval"],
                )
            )
    assert first.SerializeToString() == again.SerializeToString()
    for tool in first.tools:
        schema = json.loads(tool.parameters_json_schema)
        # The text is the one canonical serialisation of the schema, and the schema is a valid one.
        assert tool.parameters_json_schema == json.dumps(
            schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        Draft202012Validator.check_schema(schema)
        assert tool.description and tool.display_name


async def test_the_catalogue_view_lists_every_selectable_tool_with_its_category(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            catalogue = await stub.ListTools(pb.ListToolsRequest(catalog_view=True))
    by_name = {t.name: t for t in catalogue.tools}
    assert set(by_name) == {"write_plan", *KNOWLEDGE, "web_search", "web_fetch", "generate_pptx"}
    assert all(t.selectable for t in catalogue.tools)
    assert by_name["doc_retrieval"].category == pb.TOOL_CATEGORY_KNOWLEDGE_BASE
    assert by_name["doc_retrieval"].produces_sources and not by_name["get_document_info"].produces_sources
    assert by_name["generate_pptx"].category == pb.TOOL_CATEGORY_GENERATION
