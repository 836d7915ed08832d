"""generate_pptx through the real gRPC server: the model's outline becomes a .pptx a user downloads.

The test downloads the file with DownloadArtifact, opens it with python-pptx and reads back the slides,
titles, bullets and notes. Another tenant or user asking for the artifact gets NOT_FOUND.
"""

from __future__ import annotations

import io
import json

import grpc
import pytest
from pptx import Presentation

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_runtime.identity import bound_identity

from .conftest import ACME, ACME_BOB, GLOBEX
from .test_execution import call

OUTLINE = {
    "title": "Leave policy 2025",
    "subtitle": "What changed",
    "file_name": "leave/../policy",
    "slides": [
        {
            "title": "Annual leave",
            "bullets": [
                {"text": "25 days per calendar year", "sub_bullets": ["Pro rata for part-time staff"]},
                {"text": "Carry-over until the end of March"},
            ],
            "notes": "Source: staff handbook [[c2]]",
        },
        {"title": "年假结转\x00", "bullets": [{"text": "未休年假可结转至\x0b次年三月底"}]},
    ],
}


async def download(stub, artifact_id: str) -> tuple[pb.ToolArtifact, bytes]:
    responses = [r async for r in stub.DownloadArtifact(pb.DownloadArtifactRequest(artifact_id=artifact_id))]
    assert responses[0].WhichOneof("payload") == "artifact"
    assert all(r.WhichOneof("payload") == "chunk" for r in responses[1:])
    return responses[0].artifact, b"".join(r.chunk for r in responses[1:])


async def test_an_outline_becomes_a_deck_the_user_downloads(lone_toolrunner):
    async with lone_toolrunner(artifact_chunk_bytes=4096) as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(
                call("generate_pptx", OUTLINE, pb.ToolContext(session_id="s1", turn_id="t1"))
            )
            assert not answer.HasField("error"), answer.content
            (artifact,) = answer.artifacts
            meta, data = await download(stub, artifact.artifact_id)
    assert meta == artifact
    assert artifact.file_name == "leave_policy.pptx"  # no path survives in the name
    assert artifact.content_type.endswith("presentationml.presentation")
    assert artifact.size_bytes == len(data) and artifact.artifact_id in answer.content
    # The model gets the link the gateway serves the file at, to pass on to the user.
    assert json.loads(answer.content)["download_path"] == f"/api/v1/artifacts/{artifact.artifact_id}"
    deck = Presentation(io.BytesIO(data))
    slides = list(deck.slides)
    assert [s.shapes.title.text for s in slides] == ["Leave policy 2025", "Annual leave", "年假结转"]
    assert slides[0].placeholders[1].text == "What changed"
    body = slides[1].placeholders[1].text_frame.paragraphs
    assert [(p.text, p.level) for p in body] == [
        ("25 days per calendar year", 0),
        ("Pro rata for part-time staff", 1),
        ("Carry-over until the end of March", 0),
    ]
    assert slides[1].notes_slide.notes_text_frame.text == "Source: staff handbook [[c2]]"
    assert slides[2].placeholders[1].text_frame.text == "未休年假可结转至次年三月底"


async def test_an_artifact_is_only_the_callers(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("generate_pptx", OUTLINE))
        for stranger in (GLOBEX, ACME_BOB):
            with bound_identity(stranger), pytest.raises(grpc.aio.AioRpcError) as raised:
                await download(stub, answer.artifacts[0].artifact_id)
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_an_outline_without_slides_is_refused_in_band(lone_toolrunner):
    async with lone_toolrunner() as stub:
        with bound_identity(ACME):
            answer = await stub.ExecuteTool(call("generate_pptx", {"title": "Empty", "slides": []}))
    assert answer.error.code == pb.TOOL_ERROR_CODE_INVALID_ARGUMENTS
    assert "slides: [] should be non-empty" in answer.content
