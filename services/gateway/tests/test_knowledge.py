"""Knowledge bases, documents, single uploads and progress through the gateway, against a fake ingestion
service on a real gRPC server reached through the ingestion client.

What a caller notices: every document status can be filtered on and reads as its name; a PATCH changes
only what it names; a refused request is an HTTP error naming the field as the caller sent it; the
caller's identity and language reach ingestion; progress streams as server-sent events and a watch
that hits its deadline is opened again, after a pause that grows while the watch brings nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.ingestion.v1.ingestion_enums import DocumentStatus
from knowsphere_clients.errors import DeadlineExceeded
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.progress import progress_events
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.rpc import errors as rpc_errors

BOUNDARY = "ks-upload-boundary"
PROXY_SECRET = "proxy-secret-of-the-knowledge-tests-0123"
PROXY = {"x-ks-proxy-secret": PROXY_SECRET}


class FakeIngestion:
    """Records what reaches ingestion and answers as it would."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.callers: list[tuple[str, str | None]] = []
        self.watch_failures: list[grpc.StatusCode] = []
        self.watches = 0

    def _seen(self, request: Any, context: Any) -> None:
        self.requests.append(request)
        language = dict(context.invocation_metadata()).get("accept-language")
        self.callers.append((require_identity().tenant_id, language))

    async def GetKnowledgeBase(self, request: pb.GetKnowledgeBaseRequest, context: Any) -> Any:
        async def work() -> pb.GetKnowledgeBaseResponse:
            if request.knowledge_base_id != "kb-1":
                raise rpc_errors.not_found("knowledge base", request.knowledge_base_id)
            return pb.GetKnowledgeBaseResponse(knowledge_base=pb.KnowledgeBase(id="kb-1"))

        return await rpc_errors.answer(context, work)

    async def CreateKnowledgeBase(self, request: pb.CreateKnowledgeBaseRequest, context: Any) -> Any:
        self._seen(request, context)

        async def work() -> pb.CreateKnowledgeBaseResponse:
            if request.chunking.chunk_size_tokens > 8000:
                raise rpc_errors.invalid("chunking.chunk_size_tokens", "10000000 tokens; the limit is 8000")
            kb = pb.KnowledgeBase(id="kb-1", name=request.name, chunking=request.chunking, chunk_count=2**40)
            kb.create_time.FromSeconds(1_700_000_000)
            return pb.CreateKnowledgeBaseResponse(knowledge_base=kb)

        return await rpc_errors.answer(context, work)

    async def UpdateKnowledgeBase(self, request: pb.UpdateKnowledgeBaseRequest, context: Any) -> Any:
        self._seen(request, context)
        return pb.UpdateKnowledgeBaseResponse(knowledge_base=pb.KnowledgeBase(id=request.knowledge_base_id))

    async def ListDocuments(self, request: pb.ListDocumentsRequest, context: Any) -> Any:
        self._seen(request, context)
        documents = [pb.Document(id=f"d{status}", status=status) for status in request.statuses]
        return pb.ListDocumentsResponse(documents=documents)

    async def GetDocument(self, request: pb.GetDocumentRequest, context: Any) -> Any:
        return pb.GetDocumentResponse(document=pb.Document(id=request.document_id))

    async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
        return pb.GetUploadPolicyResponse(max_file_size_bytes=10_000, recommended_chunk_size_bytes=4096)

    async def UploadDocument(self, messages: AsyncIterator[pb.UploadDocumentRequest], context: Any) -> Any:
        header = (await anext(aiter(messages))).header

        async def work() -> pb.UploadDocumentResponse:
            raise rpc_errors.invalid("header.file_name", f"unsupported file type '{header.file_name[-4:]}'")

        return await rpc_errors.answer(context, work)

    async def WatchDocumentProgress(
        self, request: pb.WatchDocumentProgressRequest, context: Any
    ) -> AsyncIterator[pb.WatchDocumentProgressResponse]:
        self.watches += 1
        if self.watch_failures:
            await context.abort(self.watch_failures.pop(0), "watch failed")
        for percent, status in ((40, pb.DOCUMENT_STATUS_EMBEDDING), (100, pb.DOCUMENT_STATUS_READY)):
            progress = pb.DocumentProgress(document_id="d1", status=status, percent=percent)
            if percent < 100:
                progress.eta.FromSeconds(3)
            yield pb.WatchDocumentProgressResponse(progress=progress)


def sse_events(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((fields.get("event", ""), json.loads(fields.get("data", "null"))))
    return events


async def test_every_document_status_is_accepted_by_the_filter_and_read_by_name(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    async with client(await gateway(ingestion)) as http:
        response = await http.get(
            "/api/v1/knowledge-bases/kb-1/documents", params=[("status", s.value) for s in DocumentStatus]
        )
        refused = await http.get("/api/v1/knowledge-bases/kb-1/documents", params={"status": "heading"})
    assert response.status_code == 200, response.text
    assert list(ingestion.requests[0].statuses) == [s.number for s in DocumentStatus]
    assert [d["status"] for d in response.json()["documents"]] == [s.value for s in DocumentStatus]
    assert refused.status_code == 422


async def test_a_patch_changes_only_the_fields_it_names(gateway: Any, client: Any) -> None:
    ingestion = FakeIngestion()
    async with client(await gateway(ingestion)) as http:
        response = await http.patch(
            "/api/v1/knowledge-bases/kb-1", json={"name": "Travel", "language_hint": None}
        )
        chunking = await http.patch(
            "/api/v1/knowledge-bases/kb-1", json={"chunking": {"strategy": "parent_child"}}
        )
        wrong = await http.patch("/api/v1/knowledge-bases/kb-1", json={"chunking": {"strategy": "zigzag"}})
    assert response.status_code == 200 and chunking.status_code == 200
    named, with_chunking = ingestion.requests
    assert named.knowledge_base_id == "kb-1" and named.HasField("name") and named.name == "Travel"
    assert not any(
        named.HasField(f) for f in ("description", "embedding_model_id", "graph_enabled", "chunking")
    )
    assert not named.HasField("language_hint")  # null is "not given"
    assert with_chunking.HasField("chunking") and not with_chunking.HasField("name")
    assert with_chunking.chunking.strategy == pb.CHUNKING_STRATEGY_PARENT_CHILD
    assert wrong.status_code == 422 and "parent_child" in wrong.text


async def test_a_misspelt_key_or_an_empty_chunking_is_a_422_naming_it_and_nothing_changes(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    path = "/api/v1/knowledge-bases/kb-1"
    async with client(await gateway(ingestion)) as http:
        misspelt = await http.patch(path, json={"nmae": "Travel"})
        nested = await http.patch(path, json={"chunking": {"chunk_size": 300}})
        empty = await http.patch(path, json={"chunking": {}})
        only_nulls = await http.patch(path, json={"chunking": {"strategy": None}})
        created = await http.post("/api/v1/knowledge-bases", json={"name": "x", "colour": "red"})
    responses = (misspelt, nested, empty, only_nulls, created)
    assert [r.status_code for r in responses] == [422] * len(responses)
    assert [r.json()["detail"][0]["loc"] for r in responses] == [
        ["body", "nmae"],
        ["body", "chunking", "chunk_size"],
        ["body", "chunking"],
        ["body", "chunking"],
        ["body", "colour"],
    ]
    assert "give at least one of: strategy, chunk_size_tokens" in empty.json()["detail"][0]["msg"]
    assert ingestion.requests == []  # nothing reached ingestion, so nothing changed


async def test_a_new_knowledge_base_answers_as_json_and_a_refused_one_names_the_field(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    async with client(await gateway(ingestion)) as http:
        created = await http.post(
            "/api/v1/knowledge-bases",
            json={"name": "Travel", "chunking": {"strategy": "heading", "chunk_size_tokens": 400}},
            headers={"accept-language": "zh-CN"},
        )
        too_big = await http.post(
            "/api/v1/knowledge-bases", json={"name": "x", "chunking": {"chunk_size_tokens": 10_000_000}}
        )
    assert created.status_code == 201, created.text
    kb = created.json()
    assert kb["name"] == "Travel" and kb["chunk_count"] == 2**40
    assert kb["chunking"]["strategy"] == "heading" and kb["chunking"]["chunk_size_tokens"] == 400
    assert kb["migration"] is None and kb["create_time"] == "2023-11-14T22:13:20Z"
    assert ingestion.callers[0] == ("t1", "zh-CN")
    assert too_big.status_code == 400
    assert too_big.json() == {
        "error": {
            "code": "invalid_argument",
            "message": "chunking.chunk_size_tokens: 10000000 tokens; the limit is 8000",
            "field": "chunking.chunk_size_tokens",
        }
    }


async def test_a_refused_upload_names_the_field_as_the_caller_sent_it(gateway: Any, client: Any) -> None:
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="setup.exe"\r\n\r\nMZ\r\n'
        f"--{BOUNDARY}--\r\n"
    ).encode()
    async with client(await gateway(FakeIngestion())) as http:
        response = await http.post(
            "/api/v1/knowledge-bases/kb-1/documents",
            content=body,
            headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"},
        )
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "invalid_argument",
            "message": "file_name: unsupported file type '.exe'",
            "field": "file_name",
        }
    }


async def test_each_tenant_sees_its_own_upload_policy(gateway: Any, client: Any) -> None:
    class SpeechForSome(FakeIngestion):
        """Audio misses speech recognition for tenants without a speech model, as ingestion answers."""

        policies = 0

        async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
            self.policies += 1
            missing = [] if require_identity().tenant_id == "with-asr" else ["asr"]
            audio = pb.SupportedFileType(extension="mp3", missing_components=missing)
            return pb.GetUploadPolicyResponse(max_file_size_bytes=10_000, file_types=[audio])

    ingestion = SpeechForSome()

    def tenant(name: str) -> dict[str, str]:
        return {**PROXY, "x-ks-tenant-id": name, "x-ks-user-id": "alice", "x-ks-role": "member"}

    async with client(await gateway(ingestion, proxy_secret=PROXY_SECRET)) as http:
        answers = [
            await http.get("/api/v1/upload-policy", headers=tenant(name))
            for name in ("no-asr", "with-asr", "no-asr", "with-asr")
        ]
    assert [a.json()["file_types"][0]["missing_components"] for a in answers] == [["asr"], [], ["asr"], []]
    assert ingestion.policies == 2  # still cached, once per tenant


async def test_an_unknown_knowledge_base_is_a_404(gateway: Any, client: Any) -> None:
    async with client(await gateway(FakeIngestion())) as http:
        response = await http.get("/api/v1/knowledge-bases/kb-2/progress")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "knowledge base kb-2 not found"}}


async def test_progress_streams_as_events_and_a_watch_past_its_deadline_is_opened_again(
    gateway: Any, client: Any
) -> None:
    ingestion = FakeIngestion()
    ingestion.watch_failures = [grpc.StatusCode.DEADLINE_EXCEEDED]
    async with client(await gateway(ingestion)) as http:
        response = await http.get("/api/v1/documents/d1/progress")
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert [(name, data["status"], data["percent"]) for name, data in events] == [
        ("progress", "embedding", 40),
        ("progress", "ready", 100),
    ]
    assert events[0][1]["eta_seconds"] == 3.0 and events[1][1]["eta_seconds"] is None
    assert ingestion.watches == 2


async def test_a_watch_past_its_deadline_is_opened_again_after_a_pause_that_grows_while_nothing_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    sleep = asyncio.sleep

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        await sleep(0)

    monkeypatch.setattr(asyncio, "sleep", pause)
    # Per watch opened: how much progress it brings before its deadline passes; None = it ends.
    watches = iter([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, None])

    def watch() -> AsyncIterator[pb.DocumentProgress]:
        brings = next(watches)

        async def stream() -> AsyncIterator[pb.DocumentProgress]:
            for _ in range(brings or 0):
                yield pb.DocumentProgress(document_id="d1", percent=40)
            if brings is not None:
                raise DeadlineExceeded("deadline passed")

        return stream()

    events = [event async for event in progress_events(Caller(Identity("t1", "u1")), watch)]
    assert [event.data["percent"] for event in events] == [40]
    assert pauses == [0.2, 0.4, 0.8, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


async def test_a_failed_watch_ends_the_stream_with_an_error_event(gateway: Any, client: Any) -> None:
    ingestion = FakeIngestion()
    ingestion.watch_failures = [grpc.StatusCode.PERMISSION_DENIED]
    async with client(await gateway(ingestion)) as http:
        response = await http.get("/api/v1/knowledge-bases/kb-1/progress")
    assert sse_events(response.text) == [
        ("error", {"error": {"code": "permission_denied", "message": "watch failed"}})
    ]
    assert ingestion.watches == 1
