"""Downloading a file a tool produced, through the gateway: the real toolrunner process (started as
``python -m knowsphere_toolrunner``, as deployed) generates a presentation in the owner's turn, and
the owner downloads it from ``GET /api/v1/artifacts/{id}`` with their API token, then opens it with
python-pptx. Another tenant's token gets 404, as for a file that never was; no token gets 401.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_clients import ToolRunnerClient
from knowsphere_gateway.api.artifacts import content_disposition
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import check_health, open_channel

pptx = pytest.importorskip("pptx")
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("knowsphere_toolrunner") is None, reason="the toolrunner is not installed"
)

OWNER, OWNER_COLLEAGUE, STRANGER = (
    Identity("acme", "alice"),
    Identity("acme", "bob"),
    Identity("globex", "eve"),
)
START_SECONDS = 60.0
OUTLINE = {
    "title": "Leave policy 2025",
    "file_name": "Urlaub – 2025",
    "slides": [
        {"title": "Annual leave", "bullets": [{"text": "25 days per calendar year"}]},
        {"title": "年假结转", "bullets": [{"text": "未休年假可结转至次年三月底"}]},
    ],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def toolrunner_process(
    tmp_path: Path, service_identity_env: Callable[[str], dict[str, str]]
) -> Iterator[str]:
    """The toolrunner service as a process of its own; its peers are not needed for generate_pptx."""
    port = free_port()
    env = {
        **os.environ,
        **service_identity_env("toolrunner"),
        "KS_TOOLRUNNER_DATA_DIR": str(tmp_path / "toolrunner"),
        "KS_TOOLRUNNER_GRPC_PORT": str(port),
        "KS_TOOLRUNNER_RETRIEVAL_ADDR": f"127.0.0.1:{free_port()}",
        "KS_TOOLRUNNER_MODELHUB_ADDR": f"127.0.0.1:{free_port()}",
        "KS_TOOLRUNNER_ARTIFACT_CHUNK_BYTES": "4096",  # the file arrives in many messages
    }
    log = (tmp_path / "toolrunner.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "knowsphere_toolrunner"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
async def toolrunner(toolrunner_process: str) -> AsyncIterator[ToolRunnerClient]:
    channel = open_channel(toolrunner_process)
    deadline = time.monotonic() + START_SECONDS
    while await check_health(channel) != "SERVING":
        assert time.monotonic() < deadline, "the toolrunner did not start"
        await asyncio.sleep(0.2)
    yield ToolRunnerClient(channel)
    await channel.close()


async def generate_deck(toolrunner: ToolRunnerClient) -> tpb.ToolArtifact:
    arguments = struct_pb2.Struct()
    arguments.update(OUTLINE)
    request = tpb.ExecuteToolRequest(
        name="generate_pptx",
        arguments=arguments,
        tool_call_id="call-1",
        context=tpb.ToolContext(session_id="s1", turn_id="t1"),
    )
    with bound_identity(OWNER):
        answer = await toolrunner.execute_tool(request)
    assert not answer.HasField("error"), answer.content
    (artifact,) = answer.artifacts
    return artifact


async def test_the_owner_downloads_the_generated_deck_and_nobody_else_does(
    gateway: Any, client: Any, tokens: TokenService, toolrunner: ToolRunnerClient
) -> None:
    artifact = await generate_deck(toolrunner)
    app = await gateway(toolrunner=toolrunner, local_identity=None)
    owner = (await tokens.issue(OWNER, Role.READ_ONLY, name="owner", ttl=timedelta(days=1))).token
    colleague = (await tokens.issue(OWNER_COLLEAGUE, Role.ADMIN, name="bob", ttl=timedelta(days=1))).token
    stranger = (await tokens.issue(STRANGER, Role.ADMIN, name="eve", ttl=timedelta(days=1))).token
    path = f"/api/v1/artifacts/{artifact.artifact_id}"

    async with client(app) as http:
        mine = await http.get(path, headers={"authorization": f"Bearer {owner}"})
        foreign = await http.get(path, headers={"authorization": f"Bearer {stranger}"})
        other_user = await http.get(path, headers={"authorization": f"Bearer {colleague}"})
        anonymous = await http.get(path)
        never = f"/api/v1/artifacts/art_{'0' * 32}"
        missing = await http.get(never, headers={"authorization": f"Bearer {owner}"})

    assert mine.status_code == 200
    assert mine.headers["content-type"] == artifact.content_type
    assert mine.headers["content-type"].endswith("presentationml.presentation")
    disposition = mine.headers["content-disposition"]
    assert disposition.startswith("attachment;") and artifact.file_name.endswith(".pptx")
    assert content_disposition(artifact.file_name) == disposition
    assert len(mine.content) == artifact.size_bytes > 4096
    deck = pptx.Presentation(io.BytesIO(mine.content))
    titles = [slide.shapes.title.text for slide in deck.slides]
    assert titles == ["Leave policy 2025", "Annual leave", "年假结转"]

    # Another tenant and another user of the same tenant: a 404 that says nothing, as for no file.
    for refused in (foreign, other_user):
        assert refused.status_code == 404
        shown = refused.json()["error"]
        assert shown == {**missing.json()["error"], "message": shown["message"]}
        assert shown["message"] == missing.json()["error"]["message"].replace(
            "0" * 32, artifact.artifact_id[4:]
        )
        assert b"Leave policy" not in refused.content
    assert missing.status_code == 404
    assert anonymous.status_code == 401


def test_the_file_name_header_cannot_be_broken_out_of() -> None:
    header = content_disposition('report"; filename="evil.exe\r\nX-Injected: 1.pptx')
    assert "\r" not in header and "\n" not in header
    ascii_part = header.split(";")[1]
    assert ascii_part.count('"') == 2  # the quoted name ends where it should
    assert content_disposition("../../etc/passwd").startswith('attachment; filename="....etcpasswd"')
    assert "filename*=UTF-8''Urlaub%20%E2%80%93%202025.pptx" in content_disposition("Urlaub – 2025.pptx")


@pytest.fixture
def owners_skill(tmp_path: Path) -> Path:
    """A skill the operator installed for the owner's tenant, before the toolrunner starts."""
    from knowsphere_toolrunner.skills.store import SkillStore

    folder = SkillStore(tmp_path / "toolrunner").tenant_dir(OWNER.tenant_id) / "leave-calc"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: leave-calc\ndescription: Works out leave days.\n---\nRun it.\n"
    )
    (folder / "scripts" / "calc.py").write_text("print(25)\n")
    return folder


async def test_the_tool_catalogue_and_the_tenants_skills_are_read_through_the_gateway(
    owners_skill: Path, gateway: Any, client: Any, tokens: TokenService, toolrunner: ToolRunnerClient
) -> None:
    app = await gateway(toolrunner=toolrunner, local_identity=None)
    owner = (await tokens.issue(OWNER, Role.READ_ONLY, name="owner", ttl=timedelta(days=1))).token
    stranger = (await tokens.issue(STRANGER, Role.ADMIN, name="eve", ttl=timedelta(days=1))).token
    mine, theirs = {"authorization": f"Bearer {owner}"}, {"authorization": f"Bearer {stranger}"}

    async with client(app) as http:
        catalogue = (await http.get("/api/v1/tools", headers=mine)).json()["tools"]
        turn = (await http.get("/api/v1/tools", headers=mine, params={"turn_view": "true"})).json()["tools"]
        with_kb = await http.get(
            "/api/v1/tools", headers=mine, params={"turn_view": "true", "knowledge_bases": "true"}
        )
        skills = (await http.get("/api/v1/skills", headers=mine)).json()["skills"]
        skill = await http.get("/api/v1/skills/leave-calc", headers=mine)
        script = await http.get(
            "/api/v1/skills/leave-calc/file", headers=mine, params={"path": "scripts/calc.py"}
        )
        escape = await http.get("/api/v1/skills/leave-calc/file", headers=mine, params={"path": "../x"})
        foreign = await http.get("/api/v1/skills/leave-calc", headers=theirs)
        foreign_list = (await http.get("/api/v1/skills", headers=theirs)).json().get("skills", [])
        anonymous = await http.get("/api/v1/tools")

    names = [t["name"] for t in catalogue]
    assert {"doc_retrieval", "generate_pptx", "web_search"} <= set(names)
    assert all(t["parameters_json_schema"].startswith("{") for t in catalogue)
    # A turn without a knowledge base or web has no knowledge-base or web tools; selecting one adds them.
    assert "doc_retrieval" not in [t["name"] for t in turn] and "web_search" not in [t["name"] for t in turn]
    assert "doc_retrieval" in [t["name"] for t in with_kb.json()["tools"]]
    assert [s["name"] for s in skills] == ["leave-calc"] and skills[0]["has_scripts"] is True
    assert skill.status_code == 200 and skill.json()["instructions"].strip().endswith("Run it.")
    assert script.status_code == 200 and script.content == b"print(25)\n"
    assert script.headers["x-ks-truncated"] == "false"
    assert escape.status_code == 400 and escape.json()["error"]["field"] == "path"
    assert foreign.status_code == 404 and foreign_list == []
    assert anonymous.status_code == 401
