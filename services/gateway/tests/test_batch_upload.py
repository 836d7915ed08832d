"""The gateway's batch upload (``POST /api/v1/knowledge-bases/{kb_id}/documents/batch``) against a fake
ingestion service (on a real gRPC server, reached through the ingestion client): what reaches
``UploadDocuments`` and how its results and the gateway's own refusals come back, one per file, in
order. Driven through the ASGI interface, as a server would."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_runtime.rpc import errors as rpc_errors

BOUNDARY = "ks-batch-boundary-0c2f"
MAX_FILE_BYTES = 1000
MAX_FILES = 4
PATH = "/api/v1/knowledge-bases/kb-1/documents/batch"


def refused(header: pb.UploadHeader) -> pb.UploadError:
    """ingestion's refusal of an ``.exe`` file, as its ``_refused`` builds it from the request error."""
    error = rpc_errors.invalid("header.file_name", "unsupported file type '.exe'; accepted: md, txt")
    return pb.UploadError(code=error.code.name, message=error.message, field=error.field)


class FakeIngestion:
    """The IngestionService calls the batch upload makes; refuses ``.exe`` names as ingestion does."""

    def __init__(self) -> None:
        self.uploaded: list[tuple[pb.UploadHeader, bytes]] = []
        self.upload_calls = 0

    async def GetKnowledgeBase(self, request: pb.GetKnowledgeBaseRequest, context: Any) -> Any:
        return pb.GetKnowledgeBaseResponse(knowledge_base=pb.KnowledgeBase(id=request.knowledge_base_id))

    async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
        return pb.GetUploadPolicyResponse(
            max_file_size_bytes=MAX_FILE_BYTES,
            recommended_chunk_size_bytes=4096,
            max_files_per_upload=MAX_FILES,
            batch_max_documents=64,
        )

    async def UploadDocuments(self, messages: AsyncIterator[pb.UploadDocumentsRequest], context: Any) -> Any:
        self.upload_calls += 1
        async for message in messages:
            if message.HasField("header"):
                self.uploaded.append((message.header, b""))
            else:
                header, data = self.uploaded[-1]
                self.uploaded[-1] = (header, data + message.chunk)
        results = []
        for index, (header, data) in enumerate(self.uploaded):
            if header.file_name.endswith(".exe"):
                results.append(pb.UploadResult(file_name=header.file_name, error=refused(header)))
            else:
                document = pb.Document(
                    id=f"doc-{index}",
                    knowledge_base_id=header.knowledge_base_id,
                    file_name=header.file_name,
                    size_bytes=len(data),
                    status=pb.DOCUMENT_STATUS_QUEUED,
                    metadata=header.metadata,
                )
                results.append(pb.UploadResult(file_name=header.file_name, document=document))
        return pb.UploadDocumentsResponse(results=results)


def body(files: list[tuple[str, bytes]], metadata: dict[str, str] | None = None) -> bytes:
    """A multipart body: the metadata part (if any), then one part ``file`` per file."""
    text = b""
    if metadata is not None:
        head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n'
        text += head.encode() + json.dumps(metadata).encode() + b"\r\n"
    for name, data in files:
        head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
        text += head.encode() + data + b"\r\n"
    return text + f"--{BOUNDARY}--\r\n".encode()


async def post(app: FastAPI, path: str, content: bytes) -> tuple[int, Any]:
    """POSTs ``content`` as multipart/form-data in 100-byte pieces; the status and the JSON answer."""
    pieces = [content[i : i + 100] for i in range(0, len(content), 100)]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def receive() -> dict[str, Any]:
        if pieces:
            return {"type": "http.request", "body": pieces.pop(0), "more_body": bool(pieces)}
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(answer)


async def test_one_result_per_file_in_order_with_refused_files_beside_the_accepted_ones(gateway: Any) -> None:
    ingestion = FakeIngestion()
    good, big, exe, other = b"# Good\n", b"x" * (MAX_FILE_BYTES + 1), b"MZ\x90\x00", b"other text\n"
    files = [("good.md", good), ("big.md", big), ("setup.exe", exe), ("notes.txt", other)]
    status, answer = await post(await gateway(ingestion), PATH, body(files, {"source": "wiki"}))

    assert status == 200, answer
    results = answer["results"]
    assert [r["file_name"] for r in results] == ["good.md", "big.md", "setup.exe", "notes.txt"]
    assert [r["document"]["file_name"] if r["document"] else None for r in results] == [
        "good.md",
        None,
        None,
        "notes.txt",
    ]
    assert results[0]["error"] is None and results[0]["duplicate"] is False
    assert results[0]["document"]["status"] == "queued"
    assert results[0]["document"]["metadata"] == {"source": "wiki"}
    assert results[1]["error"] == {
        "code": "payload_too_large",
        "message": f"file: over the limit of {MAX_FILE_BYTES} bytes",
        "field": "file",
    }
    assert results[2]["error"]["code"] == "invalid_argument"
    assert "unsupported file type '.exe'; accepted: md, txt" in results[2]["error"]["message"]
    assert results[2]["duplicate"] is False

    # One stream: each file sent has its header (size, hash, the shared metadata), then its bytes;
    # the file over the limit never reached ingestion.
    assert ingestion.upload_calls == 1
    sent = [
        (h.knowledge_base_id, h.file_name, h.declared_size_bytes, h.content_sha256, dict(h.metadata), data)
        for h, data in ingestion.uploaded
    ]
    assert sent == [
        ("kb-1", name, len(data), hashlib.sha256(data).hexdigest(), {"source": "wiki"}, data)
        for name, data in (files[0], files[2], files[3])
    ]


async def test_a_file_ingestion_refuses_names_the_field_as_the_caller_sent_it(gateway: Any) -> None:
    files = [("good.md", b"# Good\n"), ("setup.exe", b"MZ\x90\x00")]
    status, answer = await post(await gateway(FakeIngestion()), PATH, body(files))
    assert status == 200, answer
    assert answer["results"][1]["error"] == {
        "code": "invalid_argument",
        "message": "file_name: unsupported file type '.exe'; accepted: md, txt",
        "field": "file_name",
    }


async def test_more_files_than_the_policy_allows_is_a_400_naming_the_limit_and_nothing_is_sent(
    gateway: Any,
) -> None:
    ingestion = FakeIngestion()
    files = [(f"f{i}.md", b"# File\n") for i in range(MAX_FILES + 1)]
    status, answer = await post(await gateway(ingestion), PATH, body(files))
    assert status == 400
    assert answer["error"]["field"] == "file"
    assert f"more than {MAX_FILES} files" in answer["error"]["message"]
    assert "max_files_per_upload" in answer["error"]["message"]
    assert ingestion.upload_calls == 0


async def test_only_refused_files_answer_without_calling_ingestion(gateway: Any) -> None:
    ingestion = FakeIngestion()
    status, answer = await post(
        await gateway(ingestion), PATH, body([("big.md", b"x" * (MAX_FILE_BYTES + 1))])
    )
    assert status == 200
    assert [r["error"]["code"] for r in answer["results"]] == ["payload_too_large"]
    assert ingestion.upload_calls == 0


async def test_an_unknown_knowledge_base_is_a_404_before_the_body_is_read(gateway: Any) -> None:
    class NoKnowledgeBase(FakeIngestion):
        async def GetKnowledgeBase(self, request: pb.GetKnowledgeBaseRequest, context: Any) -> Any:
            async def work() -> pb.GetKnowledgeBaseResponse:
                raise rpc_errors.not_found("knowledge base", request.knowledge_base_id)

            return await rpc_errors.answer(context, work)

    ingestion = NoKnowledgeBase()
    status, answer = await post(await gateway(ingestion), PATH, body([("a.md", b"# A\n")]))
    assert status == 404
    assert answer["error"]["message"] == "knowledge base kb-1 not found"
    assert ingestion.upload_calls == 0


async def test_the_openapi_document_describes_several_file_parts(gateway: Any) -> None:
    document = (await gateway(FakeIngestion())).openapi()
    operation = document["paths"]["/api/v1/knowledge-bases/{kb_id}/documents/batch"]["post"]
    schema = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["properties"]["file"]["type"] == "array"
    assert schema["properties"]["file"]["items"] == {"type": "string", "format": "binary"}
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/UploadDocumentsResponse"
    }
    result = document["components"]["schemas"]["UploadResult"]["properties"]
    assert {"file_name", "document", "duplicate", "error"} <= set(result)
    assert result["error"]["anyOf"][0] == {"$ref": "#/components/schemas/UploadErrorBody"}
