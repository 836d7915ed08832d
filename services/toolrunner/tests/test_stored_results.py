"""Large results through the real toolrunner, retrieval and modelhub (chat on the scripted provider).

What the model notices: a 1 MB result arrives as ``{__stored, __refId, __summary, __hint}`` with a
distilled summary; when distillation fails the summary is a cut view marked degraded, never half a JSON
document; get_stored_data pages the original back and is never externalised itself. What a caller
notices: GetStoredData returns the whole original to the user who stored it and NOT_FOUND to anyone
else, another user of the same tenant included.
"""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity

from .conftest import ACME, ACME_BOB, GLOBEX, Reply, chunk, configure_kb, openai_text_stream
from .test_execution import call

CHAT = "/v1/chat/completions"
DISTILLED = "handbook (doc handbook): 10 sections on leave; c1–c10; 25 days leave, carry-over until March."
SECTION_CHARS = 100_000
SECTIONS = 10


def turn(session: str = "s1") -> pb.ToolContext:
    return pb.ToolContext(
        session_id=session, turn_id="t1", switches=pb.TurnSwitches(knowledge_base_ids=["kb"]), language="en"
    )


WHOLE_HANDBOOK = {"document_id": "handbook", "start_position": 0, "end_position": SECTIONS - 1}


async def index_big_handbook(peers) -> list[str]:
    texts = [
        f"Section {i}: " + ("annual leave rules and exceptions. " * (SECTION_CHARS // 35))
        for i in range(SECTIONS)
    ]
    await configure_kb(peers, ACME, "kb", [chunk("kb", "handbook", i, text) for i, text in enumerate(texts)])
    return texts


async def read_handbook(stub, session: str = "s1") -> pb.ExecuteToolResponse:
    return await stub.ExecuteTool(call("list_chunks", WHOLE_HANDBOOK, turn(session)))


async def test_a_one_megabyte_result_is_stored_distilled_and_read_back_whole(peers, toolrunner):
    texts = await index_big_handbook(peers)
    peers.provider.script(CHAT, openai_text_stream([DISTILLED[:40], DISTILLED[40:]]))
    async with toolrunner() as stub:
        with bound_identity(ACME):
            answer = await read_handbook(stub)
            stored = await stub.GetStoredData(pb.GetStoredDataRequest(ref_id=answer.ref_id))
    assert not answer.HasField("error")
    assert answer.stored and answer.distilled and not answer.degraded
    assert answer.result_chars > SECTIONS * SECTION_CHARS * 0.99
    placeholder = json.loads(answer.content)
    assert placeholder == {
        "__stored": True,
        "__refId": answer.ref_id,
        "__summary": DISTILLED,
        "__hint": answer.hint,
    }
    assert answer.ref_id in answer.hint and "get_stored_data" in answer.hint
    assert len(answer.content) < 2_000 + len(answer.hint) + 100
    # Ten citable chunks were read: they are this turn's sources even though the text is stored.
    assert [s.label for s in answer.sources] == [f"c{i}" for i in range(1, SECTIONS + 1)]
    # The distilling model was asked to keep ids, names, numbers and conclusions, with a 2,000 cap.
    request = peers.provider.requests_to(CHAT)[0].json
    system = request["messages"][0]["content"]
    assert "identifier" in system and "number" in system and "2000 characters" in system
    # The original comes back whole, to its owner.
    data = stored.data
    assert (data.ref_id, data.tool_name, data.format, data.session_id, data.turn_id) == (
        answer.ref_id,
        "list_chunks",
        pb.CONTENT_FORMAT_JSON,
        "s1",
        "t1",
    )
    assert data.char_count == len(data.content) == answer.result_chars
    assert [c["text"] for c in json.loads(data.content)["chunks"]] == texts


async def test_when_distillation_fails_the_summary_is_a_cut_view_marked_degraded(peers, toolrunner):
    await index_big_handbook(peers)
    peers.provider.script(CHAT, Reply.fixture("openai/error_401.json", status=401))
    async with toolrunner() as stub:
        with bound_identity(ACME):
            answer = await read_handbook(stub)
    assert answer.stored and answer.degraded and not answer.distilled
    summary = json.loads(answer.content)["__summary"]
    assert summary.startswith("[Degraded: the result could not be distilled")
    assert len(summary) <= 2_000
    # The view describes the document instead of showing a piece of it as if whole.
    assert "JSON object with" in summary and "<array of 10 items>" in summary
    with pytest.raises(json.JSONDecodeError):
        json.loads(summary.split("\n", 1)[1])


async def test_a_result_over_8000_characters_is_stored_without_a_model_call(peers, toolrunner):
    texts = [f"Clause {i}: " + "x" * 2_900 for i in range(3)]  # about 9,000 characters in all
    await configure_kb(peers, ACME, "kb", [chunk("kb", "handbook", i, t) for i, t in enumerate(texts)])
    async with toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(
                call(
                    "list_chunks", {"document_id": "handbook", "start_position": 0, "end_position": 2}, turn()
                )
            )
            back = await stub.ExecuteTool(call("get_stored_data", {"ref_id": answer.ref_id}, turn()))
    assert 8_000 < answer.result_chars <= 10_000
    assert answer.stored and not answer.distilled and not answer.degraded
    assert peers.provider.requests_to(CHAT) == []
    assert json.loads(answer.content)["__summary"].startswith("JSON object with")
    # Read back in one page: the original result itself, as JSON, not stored again.
    assert not back.stored and len(back.content) == answer.result_chars
    assert [c["text"] for c in json.loads(back.content)["chunks"]] == texts
    assert json_format.MessageToDict(back.json) == json.loads(back.content)


async def test_get_stored_data_pages_the_original_and_is_never_stored_again(peers, toolrunner):
    await index_big_handbook(peers)
    peers.provider.script(CHAT, openai_text_stream([DISTILLED]))
    async with toolrunner(stored_page_chars=300_000) as stub:
        with bound_identity(ACME):
            answer = await read_handbook(stub)
            original = (await stub.GetStoredData(pb.GetStoredDataRequest(ref_id=answer.ref_id))).data.content
            pages, offset = [], 0
            while offset is not None:
                page = await stub.ExecuteTool(
                    call("get_stored_data", {"ref_id": answer.ref_id, "offset": offset}, turn())
                )
                assert not page.stored and not page.HasField("error")
                body = json.loads(page.content)
                pages.append(body["content"])
                offset = body["next_offset"]
    assert len(pages) == 4 and all(len(p) == 300_000 for p in pages[:3])
    assert "".join(pages) == original


async def test_a_stored_result_is_readable_only_by_the_user_and_session_that_stored_it(peers, toolrunner):
    await index_big_handbook(peers)
    peers.provider.script(CHAT, openai_text_stream([DISTILLED]))
    async with toolrunner() as stub:
        with bound_identity(ACME):
            ref_id = (await read_handbook(stub)).ref_id
            other_session = await stub.ExecuteTool(call("get_stored_data", {"ref_id": ref_id}, turn("s2")))
        for stranger in (GLOBEX, ACME_BOB):
            with bound_identity(stranger):
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await stub.GetStoredData(pb.GetStoredDataRequest(ref_id=ref_id))
                assert raised.value.code() == grpc.StatusCode.NOT_FOUND
                by_tool = await stub.ExecuteTool(call("get_stored_data", {"ref_id": ref_id}, turn()))
                assert by_tool.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND
                assert "annual leave" not in by_tool.content
    assert other_session.error.code == pb.TOOL_ERROR_CODE_NOT_FOUND
