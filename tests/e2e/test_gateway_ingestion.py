"""Knowledge bases and documents through the gateway's HTTP API, against the running stack.

A multipart upload goes through the gateway into ingestion's streaming upload, the workflow runs on
Temporal, progress comes back as server-sent events, and the document is found by the gateway's search.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytestmark = pytest.mark.e2e

POLICY = (
    b"# Travel policy\n\n"
    b"Train journeys under four hours are booked in second class.\n\n"
    b"## Hotels\n\n"
    b"Hotel nights are reimbursed up to 140 euros in Munich and 110 euros elsewhere.\n\n"
    b"## Meals\n\n"
    b"Meals on travel days are covered by a daily allowance of 28 euros.\n"
)
TIMEOUT = httpx.Timeout(30.0, read=120.0)
READY_WITHIN_SECONDS = 180.0


def api(stack: Any) -> httpx.Client:
    return httpx.Client(base_url=f"{stack.gateway_url}/api/v1", timeout=TIMEOUT)


def events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a server-sent event stream; keep-alive comments are skipped."""
    name, data = "message", []
    for line in response.iter_lines():
        if line.startswith(":"):
            continue
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())


def create_kb(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = client.post("/knowledge-bases", json={"name": f"kb-{uuid.uuid4().hex[:8]}", **fields})
    assert response.status_code == 201, response.text
    kb: dict[str, Any] = response.json()
    return kb


def upload(
    client: httpx.Client, kb_id: str, name: str, data: bytes, metadata: dict[str, str] | None = None
) -> httpx.Response:
    form = {"metadata": json.dumps(metadata)} if metadata is not None else None
    return client.post(f"/knowledge-bases/{kb_id}/documents", files={"file": (name, data)}, data=form)


def test_an_upload_becomes_searchable_with_progress_over_sse(stack: Any) -> None:
    with api(stack) as client:
        kb = create_kb(client, description="travel", chunking={"strategy": "heading"})
        assert kb["chunking"]["strategy"] == "heading" and kb["embedding_dimension"] == 384
        assert kb["document_count"] == 0 and kb["create_time"].endswith("Z")

        uploaded = upload(client, kb["id"], "travel.md", POLICY, metadata={"source": "intranet"})
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json()["duplicate"] is False
        document = uploaded.json()["document"]
        assert document["status"] == "queued" and document["file_name"] == "travel.md"
        assert document["size_bytes"] == len(POLICY)
        assert document["content_sha256"] == hashlib.sha256(POLICY).hexdigest()
        assert document["metadata"] == {"source": "intranet"}

        # Progress until the stream ends by itself, at ready.
        seen: list[dict[str, Any]] = []
        with client.stream("GET", f"/documents/{document['id']}/progress") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            for name, data in events(stream):
                assert name == "progress", data
                seen.append(data)
        statuses = [p["status"] for p in seen]
        assert statuses[-1] == "ready", seen[-1]
        assert {"queued", "embedding", "indexing"} & set(statuses)
        percents = [p["percent"] for p in seen]
        assert percents == sorted(percents) and percents[-1] == 100
        assert all(p["document_id"] == document["id"] for p in seen)

        # Listed (also when filtered by status) and readable, with its chunks counted.
        listed = client.get(
            f"/knowledge-bases/{kb['id']}/documents", params=[("status", "ready"), ("status", "failed")]
        )
        assert listed.status_code == 200, listed.text
        assert [d["id"] for d in listed.json()["documents"]] == [document["id"]]
        assert listed.json()["next_page_token"] == ""
        queued = client.get(f"/knowledge-bases/{kb['id']}/documents", params={"status": "queued"})
        assert queued.json()["documents"] == []
        got = client.get(f"/documents/{document['id']}").json()
        assert got["status"] == "ready" and got["chunk_count"] > 0 and got["title"] == "Travel policy"
        assert got["ready_time"] is not None and got["progress"]["percent"] == 100

        # Searchable through the gateway's retrieval endpoint.
        found = client.post(f"/knowledge-bases/{kb['id']}/search", json={"query": "hotel limit in Munich"})
        assert found.status_code == 200, found.text
        results = found.json()["results"]
        assert results and "140 euros" in results[0]["text"] and results[0]["file_name"] == "travel.md"

        # The same content again: 200, the existing document, nothing new.
        again = upload(client, kb["id"], "copy.md", POLICY)
        assert again.status_code == 200, again.text
        assert again.json()["duplicate"] is True and again.json()["document"]["id"] == document["id"]
        assert len(client.get(f"/knowledge-bases/{kb['id']}/documents").json()["documents"]) == 1

        # Re-ingest runs the workflow again for a finished document.
        reingested = client.post(f"/documents/{document['id']}/reingest")
        assert reingested.status_code == 200, reingested.text
        assert reingested.json()["status"] == "queued"
        with client.stream("GET", f"/documents/{document['id']}/progress") as stream:
            last = [data for _, data in events(stream)][-1]
        assert last["status"] == "ready"

        # Rename; only the given field changes.
        renamed = client.patch(f"/knowledge-bases/{kb['id']}", json={"name": "Travel"})
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["name"] == "Travel" and renamed.json()["description"] == "travel"
        counted = client.get(f"/knowledge-bases/{kb['id']}").json()
        assert counted["document_count"] == 1 and counted["size_bytes"] == len(POLICY)
        names = [
            k["name"]
            for k in client.get("/knowledge-bases", params={"page_size": 100}).json()["knowledge_bases"]
        ]
        assert "Travel" in names

        # Delete the document, then the knowledge base.
        assert client.delete(f"/documents/{document['id']}").status_code == 204
        gone = client.get(f"/documents/{document['id']}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
        assert client.delete(f"/knowledge-bases/{kb['id']}").status_code == 204
        assert client.get(f"/knowledge-bases/{kb['id']}").status_code == 404


def test_a_large_file_streams_through_and_keeps_its_size(stack: Any) -> None:
    line = b"Line %07d of a long maintenance log: valve pressure nominal, no action taken.\n"
    data = b"".join(line % i for i in range(40_000))
    assert len(data) > 3 * 1024 * 1024
    with api(stack) as client:
        kb = create_kb(client)
        uploaded = upload(client, kb["id"], "maintenance-log.txt", data)
        assert uploaded.status_code == 201, uploaded.text
        document = uploaded.json()["document"]
        assert document["size_bytes"] == len(data)
        assert document["content_sha256"] == hashlib.sha256(data).hexdigest()
        assert document["content_type"].startswith("text/plain")
        # Deleting stops its ingestion; the knowledge base goes too.
        assert client.delete(f"/documents/{document['id']}").status_code == 204
        assert client.delete(f"/knowledge-bases/{kb['id']}").status_code == 204


def test_bad_uploads_are_refused_with_the_field_named(stack: Any) -> None:
    with api(stack) as client:
        kb = create_kb(client)
        policy = client.get("/upload-policy").json()
        assert policy["max_file_size_bytes"] > 0 and policy["recommended_chunk_size_bytes"] > 0
        assert policy["max_files_per_upload"] > 1 and policy["batch_max_documents"] > 1
        assert {"md", "txt", "pdf"} <= {t["extension"] for t in policy["file_types"]}

        exe = upload(client, kb["id"], "setup.exe", b"MZ\x90\x00 not a document")
        assert exe.status_code == 400, exe.text
        assert exe.json()["error"]["field"] == "file_name" and "exe" in exe.json()["error"]["message"]

        empty = upload(client, kb["id"], "empty.md", b"")
        assert empty.status_code == 400, empty.text
        assert empty.json()["error"]["field"] == "file"

        # A part the upload does not take is named, not ignored.
        other = client.post(f"/knowledge-bases/{kb['id']}/documents", files={"other": ("a.md", b"# A\n")})
        assert other.status_code == 400 and other.json()["error"]["field"] == "other", other.text

        not_multipart = client.post(f"/knowledge-bases/{kb['id']}/documents", json={"file": "x"})
        assert not_multipart.status_code == 415 and not_multipart.json()["error"]["field"] == "file"

        wrong = client.post(
            f"/knowledge-bases/{kb['id']}/documents",
            files={"file": ("b.md", b"# B\n\nother text\n")},
            data={"metadata": "[1, 2]"},
        )
        assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "metadata"

        unknown_kb = upload(client, "no-such-kb", "a.md", b"# A\n")
        assert unknown_kb.status_code == 404, unknown_kb.text

        # Over the limit by Content-Length: refused before any of the body is sent.
        over = policy["max_file_size_bytes"] + 10 * 1024 * 1024
        status_line, body = _post_headers_only(stack, f"/api/v1/knowledge-bases/{kb['id']}/documents", over)
        assert " 413 " in status_line, status_line
        assert str(policy["max_file_size_bytes"]) in body

        assert client.delete(f"/knowledge-bases/{kb['id']}").status_code == 204


def test_a_batch_upload_ingests_the_good_files_and_refuses_the_bad_one(stack: Any) -> None:
    faq = b"# FAQ\n\nThe canteen opens at 11:30 and closes at 14:00.\n"
    parking = b"Parking permits are renewed every January at the front desk.\n"
    with api(stack) as client:
        kb = create_kb(client)
        response = client.post(
            f"/knowledge-bases/{kb['id']}/documents/batch",
            files=[
                ("file", ("faq.md", faq, "text/markdown")),
                ("file", ("setup.exe", b"MZ\x90\x00 not a document", "application/octet-stream")),
                ("file", ("parking.txt", parking, "text/plain")),
            ],
            data={"metadata": json.dumps({"source": "handbook"})},
        )
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert [r["file_name"] for r in results] == ["faq.md", "setup.exe", "parking.txt"]

        refused = results[1]
        assert refused["document"] is None and refused["duplicate"] is False
        assert refused["error"]["code"] == "invalid_argument" and refused["error"]["field"] == "file_name"
        assert "unsupported file type '.exe'" in refused["error"]["message"], refused["error"]

        accepted = [results[0], results[2]]
        for result, data in zip(accepted, (faq, parking), strict=True):
            assert result["error"] is None and result["duplicate"] is False, result
            document = result["document"]
            assert document["file_name"] == result["file_name"] and document["status"] == "queued"
            assert document["size_bytes"] == len(data)
            assert document["content_sha256"] == hashlib.sha256(data).hexdigest()
            assert document["metadata"] == {"source": "handbook"}
        ids = [r["document"]["id"] for r in accepted]

        deadline = time.monotonic() + READY_WITHIN_SECONDS
        while True:
            documents = [client.get(f"/documents/{i}").json() for i in ids]
            if all(d["status"] in ("ready", "failed") for d in documents) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [(d["file_name"], d["status"]) for d in documents] == [
            ("faq.md", "ready"),
            ("parking.txt", "ready"),
        ], documents
        assert all(d["chunk_count"] > 0 for d in documents), documents

        listed = client.get(f"/knowledge-bases/{kb['id']}/documents").json()["documents"]
        assert sorted((d["id"], d["file_name"]) for d in listed) == sorted(
            zip(ids, ["faq.md", "parking.txt"], strict=True)
        )
        assert client.get(f"/knowledge-bases/{kb['id']}").json()["document_count"] == 2
        assert client.delete(f"/knowledge-bases/{kb['id']}").status_code == 204


def test_unknown_ids_and_bad_input_map_to_http_errors(stack: Any) -> None:
    with api(stack) as client:
        for method, path in (
            ("GET", "/documents/no-such-document"),
            ("DELETE", "/documents/no-such-document"),
            ("POST", "/documents/no-such-document/reingest"),
            ("GET", "/documents/no-such-document/progress"),
            ("GET", "/knowledge-bases/no-such-kb"),
            ("GET", "/knowledge-bases/no-such-kb/progress"),
            ("GET", "/knowledge-bases/no-such-kb/documents"),
        ):
            response = client.request(method, path)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"]["code"] == "not_found"
        kb = create_kb(client)
        clash = client.post("/knowledge-bases", json={"name": kb["name"]})
        assert clash.status_code == 409 and clash.json()["error"]["code"] == "already_exists"
        too_big = client.post(
            "/knowledge-bases",
            json={"name": f"kb-{uuid.uuid4().hex[:8]}", "chunking": {"chunk_size_tokens": 10_000_000}},
        )
        assert too_big.status_code == 400, too_big.text
        assert too_big.json()["error"]["field"] == "chunking.chunk_size_tokens"
        assert client.delete(f"/knowledge-bases/{kb['id']}").status_code == 204


def test_knowledge_base_progress_shows_documents_uploaded_while_watching(stack: Any) -> None:
    with api(stack) as client, api(stack) as uploader:
        kb = create_kb(client)
        with client.stream("GET", f"/knowledge-bases/{kb['id']}/progress") as stream:
            assert stream.status_code == 200
            uploaded = upload(uploader, kb["id"], "faq.md", b"# FAQ\n\nThe canteen opens at 11:30.\n")
            assert uploaded.status_code == 201, uploaded.text
            document_id = uploaded.json()["document"]["id"]
            statuses = []
            for name, data in events(stream):
                assert name == "progress" and data["knowledge_base_id"] == kb["id"]
                if data["document_id"] == document_id:
                    statuses.append(data["status"])
                    if data["status"] in ("ready", "failed"):
                        break  # the stream itself goes on until the client leaves
        assert statuses[-1] == "ready", statuses
        assert client.delete(f"/knowledge-bases/{kb['id']}").status_code == 204


def test_the_openapi_document_lists_the_knowledge_endpoints(stack: Any) -> None:
    document = httpx.get(f"{stack.gateway_url}/openapi.json", timeout=TIMEOUT).json()
    paths = document["paths"]
    expected = {
        "/api/v1/knowledge-bases": {"get", "post"},
        "/api/v1/knowledge-bases/{kb_id}": {"get", "patch", "delete"},
        "/api/v1/upload-policy": {"get"},
        "/api/v1/knowledge-bases/{kb_id}/documents": {"get", "post"},
        "/api/v1/knowledge-bases/{kb_id}/documents/batch": {"post"},
        "/api/v1/documents/{document_id}": {"get", "delete"},
        "/api/v1/documents/{document_id}/reingest": {"post"},
        "/api/v1/documents/{document_id}/progress": {"get"},
        "/api/v1/knowledge-bases/{kb_id}/progress": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths.get(path, {})), path
    upload_body = paths["/api/v1/knowledge-bases/{kb_id}/documents"]["post"]["requestBody"]["content"]
    assert "file" in upload_body["multipart/form-data"]["schema"]["properties"]
    assert (
        "text/event-stream"
        in paths["/api/v1/documents/{document_id}/progress"]["get"]["responses"]["200"]["content"]
    )
    schemas = document["components"]["schemas"]
    assert {"KnowledgeBase", "Document", "DocumentProgress", "UploadDocumentResponse"} <= set(schemas)


def _post_headers_only(stack: Any, path: str, content_length: int) -> tuple[str, str]:
    """Sends only the request head of an upload that claims ``content_length`` bytes; returns the
    status line and the body of the answer."""
    url = urlsplit(stack.gateway_url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as connection:
        connection.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                "Content-Type: multipart/form-data; boundary=b0undary\r\n"
                f"Content-Length: {content_length}\r\nConnection: close\r\n\r\n"
            ).encode()
        )
        received = b""
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            piece = connection.recv(65536)
            if not piece:
                break
            received += piece
    head, _, body = received.decode("utf-8", "replace").partition("\r\n\r\n")
    return head.split("\r\n")[0], body
