"""ExecuteTool through the real gRPC server: what the model reads when a call goes wrong, retries and
time limits, and the plan tool.

Every problem comes back in-band — an ``error`` with a ``content`` the model can act on — never as a
gRPC error. A tool whose peer is down is tried three times, each attempt its own span; a tool whose
peer hangs is cut at its time limit each time.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from google.protobuf import json_format, struct_pb2

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity
from knowsphere_runtime.rpc.testing import serving
from knowsphere_telemetry import attributes

from .conftest import ACME, toolrunner_service

KB_TURN = pb.ToolContext(session_id="s1", turn_id="t1", switches=pb.TurnSwitches(knowledge_base_ids=["kb"]))


def call(name: str, arguments: dict[str, Any], context: pb.ToolContext = KB_TURN) -> pb.ExecuteToolRequest:
    struct = struct_pb2.Struct()
    struct.update(arguments)
    return pb.ExecuteToolRequest(name=name, arguments=struct, tool_call_id="call-1", context=context)


async def test_an_unknown_tool_is_explained_to_the_model(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("delete_everything", {}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_UNKNOWN_TOOL
    assert "delete_everything" in answer.content and answer.content == answer.error.message
    assert answer.attempts == 0


async def test_arguments_that_do_not_match_the_schema_name_each_problem(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("doc_retrieval", {"top_k": "many", "colour": "red"}))
            fractional = await stub.ExecuteTool(call("doc_retrieval", {"query": "leave", "top_k": 2.5}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
    assert "'query' is a required property" in answer.content
    assert "top_k: 'many' is not of type 'integer'" in answer.content
    assert "'colour' was unexpected" in answer.content
    assert answer.attempts == 0  # nothing ran
    assert fractional.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS and "top_k" in fractional.content


async def test_a_tool_whose_switch_is_off_is_unavailable_this_turn(lone_toolrunner):
    no_kb = pb.ToolContext(session_id="s1", turn_id="t1")
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            knowledge = await stub.ExecuteTool(call("doc_retrieval", {"query": "leave"}, no_kb))
            web = await stub.ExecuteTool(call("web_search", {"query": "weather"}, no_kb))
            graph = await stub.ExecuteTool(
                call("query_knowledge_graph", {"query_type": "entity_lookup", "entity_name": "Acme"})
            )
    assert (
        knowledge.error.code == web.error.code == graph.error.code == pb.TOOL_ERROR_CODE_UNAVAILABLE_THIS_TURN
    )
    assert "no knowledge base selected" in knowledge.content
    assert "web search is off" in web.content
    assert "knowledge graph is off" in graph.content


async def test_a_tool_that_keeps_failing_is_tried_three_times_each_its_own_span(lone_toolrunner, spans):
    async with lone_toolrunner(retry_backoff_seconds=0.01) as stub:  # retrieval is down
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("doc_retrieval", {"query": "annual leave"}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_FAILED
    assert answer.attempts == 3
    assert "doc_retrieval failed after 3 attempts (retrieval answered UNAVAILABLE)" in answer.content
    assert "127.0.0.1" not in answer.content  # addresses stay in the span and the log
    attempts = [s for s in spans.get_finished_spans() if s.name == "toolrunner.tool_attempt"]
    assert [s.attributes[attributes.TOOL_ATTEMPT] for s in attempts] == [1, 2, 3]
    assert all(s.attributes[attributes.ERROR_CODE] == "failed" for s in attempts)
    parent = next(s for s in spans.get_finished_spans() if s.name == "toolrunner.execute_tool")
    assert all(s.parent is not None and s.parent.span_id == parent.context.span_id for s in attempts)
    assert parent.attributes[attributes.TOOL_ATTEMPTS] == 3


class HangingRetrieval:
    """Retrieval that answers Search after far too long."""

    def __init__(self) -> None:
        self.calls = 0

    async def Search(self, request: rpb.SearchRequest, context: Any) -> rpb.SearchResponse:
        self.calls += 1
        await asyncio.sleep(30)
        return rpb.SearchResponse()


async def test_a_tool_that_hangs_is_cut_at_its_time_limit_each_attempt(tmp_path: Path, unreachable_peers):
    hanging = HangingRetrieval()
    async with (
        serving("retrieval", hanging) as retrieval,
        toolrunner_service(
            tmp_path,
            retrieval,
            unreachable_peers[1],
            knowledge_tool_timeout_seconds=0.3,
            retry_backoff_seconds=0,
        ) as stub,
    ):
        with bound_identity(ACME):
            started = time.monotonic()
            answer = await stub.ExecuteTool(call("doc_retrieval", {"query": "annual leave"}))
            took = time.monotonic() - started
    assert answer.error.code == pb.TOOL_ERROR_CODE_TIMED_OUT
    assert "timed out after 3 attempts" in answer.content and "0.3 s" in answer.content
    assert hanging.calls == 3
    assert 0.9 <= took < 5


async def test_write_plan_numbers_the_steps_and_names_the_next(lone_toolrunner):
    steps = [
        {"step": "Find the leave policy", "status": "done"},
        {"step": "Read the carry-over clause", "status": "in_progress"},
        {"step": "Answer with citations", "status": "pending"},
    ]
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(
                call("write_plan", {"goal": "Explain leave carry-over", "steps": steps})
            )
            two_active = await stub.ExecuteTool(
                call("write_plan", {"steps": [{**s, "status": "in_progress"} for s in steps]})
            )
    assert not answer.HasField("error") and answer.attempts == 1
    plan = json_format.MessageToDict(answer.json)
    assert plan["done"] == 1 and plan["total"] == 3
    assert plan["next"] == {"n": 2, "step": "Read the carry-over clause", "status": "in_progress"}
    assert answer.content.startswith('{"goal":"Explain leave carry-over"')
    assert two_active.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
    assert "steps 1, 2, 3 are all in_progress" in two_active.content
