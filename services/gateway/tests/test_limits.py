"""The gateway's limits as a caller meets them: bodies over a size limit or too slow, too many requests
from one caller per second or at once, a batch with too many files, and what a failure tells a client.
Driven through the ASGI interface, and over a real socket where timing or streaming matters."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from fastapi import FastAPI

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_gateway.domain.limits import ConcurrencyLimiter, Limits, RateLimiter
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_runtime.identity import Identity

KB = "/api/v1/knowledge-bases/kb-1"
BOUNDARY = "ks-limits-boundary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
ACME = Identity("acme", "alice")


class FakeIngestion:
    """Enough of ingestion for uploads, documents and a progress watch that stays open."""

    def __init__(self) -> None:
        self.uploaded_files = 0
        self.watching = 0

    async def GetKnowledgeBase(self, request: pb.GetKnowledgeBaseRequest, context: Any) -> Any:
        return pb.GetKnowledgeBaseResponse(knowledge_base=pb.KnowledgeBase(id=request.knowledge_base_id))

    async def GetDocument(self, request: pb.GetDocumentRequest, context: Any) -> Any:
        if request.document_id == "secret-failure":
            raise RuntimeError("postgres://ingest:hunter2@10.0.0.7/ingestion refused the connection")
        return pb.GetDocumentResponse(document=pb.Document(id=request.document_id))

    async def GetUploadPolicy(self, request: pb.GetUploadPolicyRequest, context: Any) -> Any:
        return pb.GetUploadPolicyResponse(
            max_file_size_bytes=10 * 1024 * 1024, recommended_chunk_size_bytes=4096, max_files_per_upload=1000
        )

    async def UploadDocuments(self, messages: AsyncIterator[pb.UploadDocumentsRequest], context: Any) -> Any:
        names = [m.header.file_name async for m in messages if m.HasField("header")]
        self.uploaded_files += len(names)
        return pb.UploadDocumentsResponse(results=[pb.UploadResult(file_name=n) for n in names])

    async def WatchDocumentProgress(
        self, request: pb.WatchDocumentProgressRequest, context: Any
    ) -> AsyncIterator[Any]:
        self.watching += 1
        try:
            progress = pb.DocumentProgress(document_id=request.documents.document_ids[0])
            yield pb.WatchDocumentProgressResponse(progress=progress)
            await asyncio.sleep(30)
        finally:
            self.watching -= 1


def multipart(files: list[tuple[str, bytes]]) -> bytes:
    body = b""
    for name, data in files:
        head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
        body += head.encode() + data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


def asgi(app: FastAPI) -> httpx.AsyncClient:
    # Failures are answered, not raised into the test: the client sees what a real one would.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


def open_temporary_files() -> set[str]:
    """The temporary files this process holds open (an unlinked spool file still holds its disk)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(Path(os.environ.get("TMPDIR", "/tmp")))):
            found.add(target)
    return found


async def token(tokens: TokenService, name: str, identity: Identity = ACME) -> dict[str, str]:
    issued = await tokens.issue(identity, Role.ADMIN, name=name, ttl=timedelta(days=1))
    return {"authorization": f"Bearer {issued.token}"}


# --- per caller ------------------------------------------------------------------------------------


async def test_a_caller_over_the_rate_gets_429_with_retry_after_and_other_callers_do_not(
    gateway: Any, tokens: TokenService
) -> None:
    limits = Limits(caller_rate_limit_per_second=0.01, caller_rate_limit_burst=3)
    app = await gateway(ingestion=FakeIngestion(), local_identity=None, limits=limits)
    alice, bob = await token(tokens, "alice"), await token(tokens, "bob")
    async with asgi(app) as http:
        answers = [await http.get("/api/v1/documents/d1", headers=alice) for _ in range(4)]
        other = await http.get("/api/v1/documents/d1", headers=bob)
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "KS_GATEWAY_CALLER_RATE_LIMIT_PER_SECOND" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    assert other.status_code == 200


async def test_a_callers_requests_in_flight_are_capped_and_a_closed_stream_frees_its_slot(
    gateway: Any, tokens: TokenService, listening: Any
) -> None:
    ingestion = FakeIngestion()
    app = await gateway(
        ingestion=ingestion, local_identity=None, limits=Limits(caller_max_concurrent_requests=1)
    )
    alice, bob = await token(tokens, "alice"), await token(tokens, "bob")
    async with listening(app) as (host, port), httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        async with http.stream("GET", "/api/v1/documents/d1/progress", headers=alice) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()  # kept: dropping it would close the stream
            assert (await anext(lines)).startswith("event: progress")
            second = await http.get("/api/v1/documents/d1", headers=alice)
            others = await http.get("/api/v1/documents/d1", headers=bob)
        assert second.status_code == 429
        assert second.json()["error"]["code"] == "too_many_concurrent_requests"
        assert second.headers["retry-after"] == "1"
        assert others.status_code == 200
        for _ in range(100):  # the server notices the disconnect, ends the stream, frees the slot
            again = await http.get("/api/v1/documents/d1", headers=alice)
            if again.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert again.status_code == 200
    assert ingestion.watching == 0


def test_a_token_bucket_refills_at_its_rate_and_forgets_full_buckets() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0], max_idle_keys=2)
    assert limiter.take("a") is None and limiter.take("a") is None
    refusal = limiter.take("a")
    assert refusal is not None and refusal.retry_after_seconds == pytest.approx(0.5)
    now[0] = 0.5
    assert limiter.take("a") is None  # one request refilled in half a second
    limiter.take("b")
    now[0] = 10.0
    limiter.take("c")  # the table is full: the buckets that refilled are dropped
    assert len(limiter) == 1
    slots = ConcurrencyLimiter(limit=1)
    assert slots.acquire("a") is None and slots.acquire("a") is not None
    slots.release("a")
    assert slots.acquire("a") is None


# --- body size ---------------------------------------------------------------------------------------


async def test_a_body_over_the_limit_is_refused_from_its_content_length_before_it_is_read(
    gateway: Any,
) -> None:
    app = await gateway(limits=Limits(max_body_bytes=2048))
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(10):
            pulled += 1
            yield b" " * 1024

    async with asgi(app) as http:
        response = await http.post(
            "/api/v1/sessions",
            content=body(),
            headers={"content-type": "application/json", "content-length": str(10 * 1024)},
        )
    assert response.status_code == 413
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("payload_too_large", "body")
    assert "2048 bytes" in error["message"] and "KS_GATEWAY_MAX_BODY_BYTES" in error["message"]
    assert pulled == 0


async def test_a_chunked_batch_upload_is_cut_off_at_the_total_limit_and_nothing_stays_spooled(
    gateway: Any,
) -> None:
    ingestion = FakeIngestion()
    limit = 3 * 1024 * 1024
    app = await gateway(ingestion=ingestion, limits=Limits(max_upload_bytes=limit))
    files = [(f"part-{i}.md", b"#" * (1024 * 1024)) for i in range(20)]  # 20 MiB, each file under its limit
    data = multipart(files)
    sent = 0

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length
        nonlocal sent
        for start in range(0, len(data), 64 * 1024):
            sent += 64 * 1024
            yield data[start : start + 64 * 1024]

    before = open_temporary_files()
    async with asgi(app) as http:
        response = await http.post(
            f"{KB}/documents/batch", content=chunked(), headers={"content-type": MULTIPART}
        )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and error["field"] == "file"
    assert f"{limit} bytes" in error["message"] and "KS_GATEWAY_MAX_UPLOAD_BYTES" in error["message"]
    assert sent <= limit + 2 * 64 * 1024  # reading stopped at the limit
    assert ingestion.uploaded_files == 0
    assert open_temporary_files() <= before  # the spooled files were closed (and so removed)


async def test_a_batch_with_a_content_length_over_the_total_limit_is_refused_before_it_is_read(
    gateway: Any,
) -> None:
    ingestion = FakeIngestion()
    app = await gateway(ingestion=ingestion, limits=Limits(max_upload_bytes=1024 * 1024))
    data = multipart([("a.md", b"#" * (2 * 1024 * 1024))])
    async with asgi(app) as http:
        response = await http.post(f"{KB}/documents/batch", content=data, headers={"content-type": MULTIPART})
    assert response.status_code == 413 and response.json()["error"]["field"] == "file"
    assert ingestion.uploaded_files == 0


async def test_a_batch_over_the_gateways_file_count_is_refused_naming_the_limit(gateway: Any) -> None:
    ingestion = FakeIngestion()
    app = await gateway(ingestion=ingestion, limits=Limits(max_upload_files=2))
    async with asgi(app) as http:
        response = await http.post(
            f"{KB}/documents/batch",
            content=multipart([("a.md", b"#"), ("b.md", b"#"), ("c.md", b"#")]),
            headers={"content-type": MULTIPART},
        )
        document = app.openapi()["paths"][f"{KB.replace('kb-1', '{kb_id}')}/documents/batch"]["post"]
    assert response.status_code == 400
    assert "more than 2 files" in response.json()["error"]["message"]
    assert "KS_GATEWAY_MAX_UPLOAD_FILES" in response.json()["error"]["message"]
    assert ingestion.uploaded_files == 0
    schema = document["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["properties"]["file"]["maxItems"] == 2  # the document states the cap


# --- body time ---------------------------------------------------------------------------------------


async def slow_request(host: str, port: int, pieces: list[bytes], pause: float) -> bytes:
    """A request sent in ``pieces`` with ``pause`` seconds between them, until the server answers; the
    raw answer."""
    reader, writer = await asyncio.open_connection(host, port)
    answer = asyncio.create_task(reader.read(65536))
    try:
        for piece in pieces:
            if answer.done():
                break
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause)
        return await asyncio.wait_for(answer, 5)
    finally:
        writer.close()


def head(path: str, length: int, content_type: str = "application/json") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def test_a_stalled_body_is_refused_with_408_after_the_idle_timeout(
    gateway: Any, listening: Any
) -> None:
    # The rate rule is set out of reach (1 byte/s), so only the idle rule can answer, however late the
    # first piece reaches the app on a loaded machine.
    app = await gateway(limits=Limits(body_idle_timeout_seconds=0.3, body_min_bytes_per_second=1))
    async with listening(app) as (host, port):
        started = asyncio.get_running_loop().time()
        answer = await slow_request(host, port, [head("/api/v1/sessions", 100) + b'{"title": '], 0)
        waited = asyncio.get_running_loop().time() - started
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"KS_GATEWAY_BODY_IDLE_TIMEOUT_SECONDS" in answer
    assert waited < 3


async def test_a_slow_loris_upload_is_refused_with_408_once_it_falls_below_the_minimum_rate(
    gateway: Any, listening: Any
) -> None:
    ingestion = FakeIngestion()
    limits = Limits(body_idle_timeout_seconds=0.3, body_min_bytes_per_second=1024)
    app = await gateway(ingestion=ingestion, limits=limits)
    body = multipart([("a.md", b"#" * 200)])
    trickle = [head(f"{KB}/documents/batch", len(body), MULTIPART)] + [bytes([b]) for b in body]
    async with listening(app) as (host, port):
        answer = await slow_request(host, port, trickle, 0.05)
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"KS_GATEWAY_BODY_MIN_BYTES_PER_SECOND" in answer
    assert ingestion.uploaded_files == 0


# --- shapes of refusals and failures ------------------------------------------------------------------


async def test_malformed_json_and_a_wrong_type_are_422s_naming_the_field(gateway: Any) -> None:
    app = await gateway()
    async with asgi(app) as http:
        broken = await http.post(
            "/api/v1/sessions", content=b'{"title": ', headers={"content-type": "application/json"}
        )
        wrong = await http.post("/api/v1/knowledge-bases/kb-1/search", json={"query": "q", "rerank": 1})
        huge = await http.get("/api/v1/knowledge-bases", params={"page_size": 2**40})
    assert broken.status_code == 422 and broken.json()["error"]["field"] == "body"
    assert "not valid JSON" in broken.json()["error"]["message"]
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "rerank"
    assert huge.status_code == 422 and huge.json()["error"]["field"] == "page_size"
    assert str(2**31 - 1) in huge.json()["error"]["message"]


class Broken:
    """A token store whose database is down, with the connection string in its error."""

    async def list(self, tenant_id: str) -> Any:
        raise RuntimeError("could not connect to postgresql://gateway:s3cret@db.internal/gateway")


async def test_internal_failures_reach_the_client_as_a_correlation_id_never_as_their_text(
    gateway: Any, tokens: TokenService
) -> None:
    app = await gateway(ingestion=FakeIngestion())
    tokens.store = Broken()  # type: ignore[assignment]
    async with asgi(app) as http:
        ours = await http.get("/api/v1/tokens")
        theirs = await http.get("/api/v1/documents/secret-failure")
    assert ours.status_code == 500
    assert "s3cret" not in ours.text and "postgresql" not in ours.text
    assert ours.json()["error"]["correlation_id"] == ours.headers["x-correlation-id"]
    assert theirs.status_code == 502
    assert (
        "hunter2" not in theirs.text and "10.0.0.7" not in theirs.text and "RuntimeError" not in theirs.text
    )
    assert theirs.json()["error"]["correlation_id"] == theirs.headers["x-correlation-id"]
    assert "ingestion" in theirs.json()["error"]["message"]


async def test_options_lists_the_documented_methods_and_another_method_is_a_405_with_allow(
    gateway: Any,
) -> None:
    app = await gateway()
    async with asgi(app) as http:
        options = await http.options("/api/v1/knowledge-bases/kb-1")
        trace = await http.request("TRACE", "/api/v1/knowledge-bases/kb-1")
        missing = await http.get("/api/v1/no-such-thing")
    assert options.status_code == 204
    assert set(options.headers["allow"].split(", ")) == {"GET", "HEAD", "PATCH", "DELETE", "OPTIONS"}
    assert "access-control-allow-origin" not in options.headers  # no CORS preflight is granted
    assert trace.status_code == 405 and trace.headers["allow"] == options.headers["allow"]
    assert trace.json()["error"]["code"] == "method_not_allowed"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_no_grpc_status_is_left_without_an_http_answer() -> None:
    from knowsphere_clients.errors import ServiceError
    from knowsphere_gateway.api.errors import error_body, http_status

    for status in grpc.StatusCode:
        error = ServiceError("boom at 10.0.0.7:5432", service="memory", status=status)
        body = error_body(error)
        assert 400 <= http_status(error) < 600
        if http_status(error) >= 500 and status != grpc.StatusCode.UNIMPLEMENTED:
            assert "10.0.0.7" not in body["message"] and body["correlation_id"]
