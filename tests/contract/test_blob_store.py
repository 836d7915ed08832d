"""Conformance suite for ingestion's ``BlobStore``: every backend must pass it.

Runs against the filesystem backend and a real S3 server.

The S3 server is moto's, started in this process on a free port for the module; the store talks to
it over HTTP with the ``minio`` client exactly as it would to MinIO. What is left in the backing
storage is read independently: the folder tree, or boto3's object and multipart-upload listings.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tracemalloc
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from knowsphere_ingestion.storage import blobs, s3
from knowsphere_ingestion.storage.blobs import (
    BlobNotFound,
    BlobStore,
    BlobStoreError,
    BlobTooLarge,
    build_blob_store,
)
from knowsphere_ingestion.storage.filesystem import FilesystemBlobStore
from knowsphere_ingestion.storage.s3 import S3BlobStore

MIB = 1024 * 1024
CHUNK = 64 * 1024
ACCESS_KEY = "test-access"
SECRET_KEY = "test-secret/with+odd=chars"
REGION = "us-east-1"


# --- the S3 server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"{host}:{port}"
    server.stop()


def _boto(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=f"http://{endpoint}",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )


# --- one fixture, both backends ----------------------------------------------------------------


@dataclass
class Backend:
    name: str
    store: BlobStore
    # Every name in the backing storage: folders and temp files, or objects and unfinished uploads.
    leftovers: Callable[[], list[str]]
    root: Path | None = None
    etag: Callable[[str], str] | None = None


def _tree(root: Path) -> list[str]:
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*"))


@pytest.fixture(params=["filesystem", "s3"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "filesystem":
        root = tmp_path / "blobs"
        fs_store = FilesystemBlobStore(root)
        await fs_store.start()
        yield Backend("filesystem", fs_store, lambda: _tree(root), root)
        await fs_store.close()
        return
    endpoint: str = request.getfixturevalue("s3_endpoint")
    bucket = f"blobs-{uuid.uuid4().hex[:16]}"
    s3_store = S3BlobStore(endpoint, ACCESS_KEY, SECRET_KEY, bucket, secure=False, region=REGION)
    await s3_store.start()
    client = _boto(endpoint)

    def leftovers() -> list[str]:
        objects = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        return sorted([o["Key"] for o in objects] + [f"upload:{u['Key']}" for u in uploads])

    def etag(key: str) -> str:
        return str(client.head_object(Bucket=bucket, Key=key)["ETag"])

    yield Backend("s3", s3_store, leftovers, etag=etag)
    await s3_store.close()


# --- streams -----------------------------------------------------------------------------------


async def stream(data: bytes, chunk: int = CHUNK) -> AsyncIterator[bytes]:
    for start in range(0, len(data), chunk):
        yield data[start : start + chunk]


async def failing_stream(data: bytes) -> AsyncIterator[bytes]:
    async for chunk in stream(data):
        yield chunk
    raise ConnectionResetError("client hung up")


class PausedStream:
    """Yields ``first``, then waits until resumed before yielding ``rest``."""

    def __init__(self, first: bytes, rest: bytes) -> None:
        self.first, self.rest = first, rest
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()

    async def __call__(self) -> AsyncIterator[bytes]:
        async for chunk in stream(self.first):
            yield chunk
        self.paused.set()
        await self.resume.wait()
        async for chunk in stream(self.rest):
            yield chunk


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- behaviour ---------------------------------------------------------------------------------


async def test_multi_mb_round_trip_keeps_bytes_size_and_sha256(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The smallest S3 part size, so 12 MiB is a three-part multipart upload.
    monkeypatch.setattr(s3, "S3_PART_SIZE_BYTES", 5 * MIB)
    data = os.urandom(12 * MIB + 12345)

    stored = await backend.store.put("t1/kb1/doc1/report.pdf", stream(data), max_bytes=20 * MIB)

    assert stored.key == "t1/kb1/doc1/report.pdf"
    assert stored.size_bytes == len(data)
    assert stored.sha256 == sha(data)
    assert await backend.store.exists("t1/kb1/doc1/report.pdf")
    assert await backend.store.read("t1/kb1/doc1/report.pdf") == data
    chunks = [chunk async for chunk in await backend.store.read_stream("t1/kb1/doc1/report.pdf")]
    assert len(chunks) > 1
    assert all(len(chunk) <= blobs.READ_CHUNK_BYTES for chunk in chunks)
    assert b"".join(chunks) == data
    assert backend.leftovers()[-1] == "t1/kb1/doc1/report.pdf"
    if backend.etag is not None:
        assert backend.etag("t1/kb1/doc1/report.pdf").endswith('-3"')  # S3's mark of a 3-part upload


async def test_a_blob_of_exactly_max_bytes_and_an_empty_blob_are_stored(backend: Backend) -> None:
    data = os.urandom(MIB)
    exact = await backend.store.put("t1/exact.bin", stream(data), max_bytes=MIB)
    empty = await backend.store.put("t1/empty.bin", stream(b""), max_bytes=MIB)

    assert (exact.size_bytes, exact.sha256) == (MIB, sha(data))
    assert (empty.size_bytes, empty.sha256) == (0, sha(b""))
    assert await backend.store.read("t1/empty.bin") == b""
    assert [c async for c in await backend.store.read_stream("t1/empty.bin")] == []


async def test_bytes_in_memory_are_stored_in_one_step_like_a_stream(backend: Backend) -> None:
    first, second = os.urandom(3 * CHUNK + 7), b'{"small": "artifact"}'
    stored = await backend.store.put_bytes("t1/artifact.json", first, durable=False)
    assert (stored.key, stored.size_bytes, stored.sha256) == ("t1/artifact.json", len(first), sha(first))
    assert await backend.store.read("t1/artifact.json") == first
    again = await backend.store.put_bytes("t1/artifact.json", second)  # replaces, durable or not
    assert (again.size_bytes, again.sha256) == (len(second), sha(second))
    assert await backend.store.read("t1/artifact.json") == second
    assert [k for k in backend.leftovers() if k != "t1"] == ["t1/artifact.json"]  # "t1": a folder


async def test_over_limit_stream_raises_and_leaves_nothing(backend: Backend) -> None:
    with pytest.raises(BlobTooLarge, match="3145728 bytes"):
        await backend.store.put("t1/kb1/doc1/big.bin", stream(os.urandom(4 * MIB)), max_bytes=3 * MIB)

    assert not await backend.store.exists("t1/kb1/doc1/big.bin")
    with pytest.raises(BlobNotFound):
        await backend.store.read("t1/kb1/doc1/big.bin")
    assert backend.leftovers() == []


async def test_over_limit_overwrite_keeps_the_previous_blob(backend: Backend) -> None:
    old = os.urandom(100_000)
    await backend.store.put("t1/doc.txt", stream(old), max_bytes=MIB)

    with pytest.raises(BlobTooLarge):
        await backend.store.put("t1/doc.txt", stream(os.urandom(2 * MIB)), max_bytes=MIB)

    assert await backend.store.read("t1/doc.txt") == old
    assert backend.leftovers() == (["t1", "t1/doc.txt"] if backend.name == "filesystem" else ["t1/doc.txt"])


async def test_a_stream_failing_midway_leaves_nothing(backend: Backend) -> None:
    with pytest.raises(ConnectionResetError, match="client hung up"):
        await backend.store.put("t1/kb1/partial.bin", failing_stream(os.urandom(3 * MIB)), max_bytes=10 * MIB)

    assert not await backend.store.exists("t1/kb1/partial.bin")
    assert backend.leftovers() == []


async def test_a_cancelled_put_leaves_nothing(backend: Backend) -> None:
    paused = PausedStream(os.urandom(2 * MIB), os.urandom(MIB))
    put = asyncio.create_task(backend.store.put("t1/kb1/cancelled.bin", paused(), max_bytes=10 * MIB))
    await asyncio.wait_for(paused.paused.wait(), timeout=30)

    put.cancel()
    with pytest.raises(asyncio.CancelledError):
        await put

    assert not await backend.store.exists("t1/kb1/cancelled.bin")
    assert backend.leftovers() == []


async def test_readers_never_see_a_blob_being_written(backend: Backend) -> None:
    old = os.urandom(MIB)
    await backend.store.put("t1/replaced.bin", stream(old), max_bytes=10 * MIB)
    new_first, new_rest = os.urandom(2 * MIB), os.urandom(2 * MIB)
    fresh = PausedStream(new_first, new_rest)
    replacing = PausedStream(new_first, new_rest)

    put_fresh = asyncio.create_task(backend.store.put("t1/fresh.bin", fresh(), max_bytes=10 * MIB))
    put_replacing = asyncio.create_task(backend.store.put("t1/replaced.bin", replacing(), max_bytes=10 * MIB))
    await asyncio.wait_for(asyncio.gather(fresh.paused.wait(), replacing.paused.wait()), timeout=30)

    # Half of each new blob has been written; readers see no new blob and the old one whole.
    assert not await backend.store.exists("t1/fresh.bin")
    with pytest.raises(BlobNotFound):
        await backend.store.read("t1/fresh.bin")
    assert await backend.store.read("t1/replaced.bin") == old
    if backend.root is not None:
        assert not (backend.root / "t1" / "fresh.bin").exists()
        in_progress = [name for name in backend.leftovers() if "~" in name]
        assert len(in_progress) == 2  # the halves are on disk, in temp files beside the keys
        assert all(name.startswith("t1/.") for name in in_progress)
        assert (backend.root / "t1" / "replaced.bin").read_bytes() == old

    fresh.resume.set()
    replacing.resume.set()
    await asyncio.gather(put_fresh, put_replacing)

    assert await backend.store.read("t1/fresh.bin") == new_first + new_rest
    assert await backend.store.read("t1/replaced.bin") == new_first + new_rest
    assert not [name for name in backend.leftovers() if "~" in name or name.startswith("upload:")]


async def test_delete_is_idempotent(backend: Backend) -> None:
    await backend.store.put("t1/kb1/doc.md", stream(b"# hello"), max_bytes=MIB)

    assert await backend.store.delete("t1/kb1/doc.md") is True
    assert await backend.store.delete("t1/kb1/doc.md") is False
    assert await backend.store.delete("never/stored.md") is False
    assert not await backend.store.exists("t1/kb1/doc.md")
    with pytest.raises(BlobNotFound, match=r"t1/kb1/doc\.md"):
        await backend.store.read("t1/kb1/doc.md")
    with pytest.raises(BlobNotFound):
        await backend.store.read_stream("t1/kb1/doc.md")
    assert backend.leftovers() == []


async def test_delete_prefix_removes_exactly_the_keys_that_start_with_it(backend: Backend) -> None:
    keys = ["t1/kb1/a.txt", "t1/kb1/sub/b.txt", "t1/kb10/c.txt", "t1/kb2/d.txt", "t2/kb1/e.txt"]
    for key in keys:
        await backend.store.put(key, stream(key.encode()), max_bytes=MIB)

    assert await backend.store.delete_prefix("t1/kb1/") == 2
    assert [await backend.store.exists(key) for key in keys] == [False, False, True, True, True]
    # A prefix is plain string matching, as on S3: "t1/kb1" also matches "t1/kb10/...".
    assert await backend.store.delete_prefix("t1/kb1") == 1
    assert await backend.store.delete_prefix("t1/kb1") == 0
    assert await backend.store.delete_prefix("nothing/here/") == 0
    assert await backend.store.read("t2/kb1/e.txt") == b"t2/kb1/e.txt"

    assert await backend.store.delete_prefix("t") == 2
    assert backend.leftovers() == []


BAD_KEYS = [
    ("", "must not be empty"),
    ("/etc/passwd", "must not start with '/'"),
    ("a/../b", r"must not contain '\.\.'"),
    ("..", r"must not contain '\.\.'"),
    ("a\x00b", "NUL"),
    ("a b.txt", "may only contain"),
    ("résumé.pdf", "may only contain"),
    ("a\\b", "may only contain"),
    ("a//b", "empty or '.' segment"),
    ("a/./b", "empty or '.' segment"),
    ("a/", "must not end with '/'"),
    ("x/" * 256 + "x", "513 characters long; the limit is 512"),
    ("k/" + "x" * 256, "segment of 256 characters between '/'; the limit is 255"),
]


@pytest.mark.parametrize(("key", "rule"), BAD_KEYS)
async def test_bad_keys_are_refused_naming_the_rule(backend: Backend, key: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        await backend.store.put(key, stream(b"x"), max_bytes=MIB)
    with pytest.raises(ValueError, match=rule):
        await backend.store.put_bytes(key, b"x")
    for call in (backend.store.read, backend.store.exists, backend.store.delete, backend.store.read_stream):
        with pytest.raises(ValueError, match=rule):
            await call(key)
    assert backend.leftovers() == []


async def test_longest_key_is_accepted_and_bad_prefixes_are_refused(backend: Backend) -> None:
    key = "a" * 255 + "/" + "b" * 254 + "/c"
    assert len(key) == 512
    await backend.store.put(key, stream(b"long"), max_bytes=MIB)
    assert await backend.store.read(key) == b"long"

    with pytest.raises(ValueError, match="must not be empty"):
        await backend.store.delete_prefix("")
    with pytest.raises(ValueError, match=r"'\.\.'"):
        await backend.store.delete_prefix("../")
    with pytest.raises(ValueError, match="max_bytes must be 0 or more"):
        await backend.store.put("k/neg", stream(b""), max_bytes=-1)


async def test_presigned_url_downloads_with_a_plain_get_on_s3_and_is_none_on_the_filesystem(
    backend: Backend,
) -> None:
    data = os.urandom(300_000)
    await backend.store.put("t1/kb1/doc/page.html", stream(data), max_bytes=MIB)

    url = await backend.store.presigned_url("t1/kb1/doc/page.html", timedelta(minutes=5))

    if backend.name == "filesystem":
        assert url is None
        return
    assert url is not None
    assert "X-Amz-Signature=" in url
    downloaded = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).read())
    assert downloaded == data
    with pytest.raises(ValueError, match="7 days"):
        await backend.store.presigned_url("t1/kb1/doc/page.html", timedelta(days=8))


async def test_a_stream_closed_early_can_be_read_again(backend: Backend) -> None:
    data = os.urandom(3 * MIB)
    await backend.store.put("t1/stream.bin", stream(data), max_bytes=10 * MIB)

    async with await backend.store.read_stream("t1/stream.bin") as reader:
        first = await anext(reader)
    assert first == data[: len(first)]
    assert [chunk async for chunk in reader] == []  # closed: iteration ends

    assert await backend.store.read("t1/stream.bin") == data


# --- filesystem only ---------------------------------------------------------------------------


async def test_filesystem_key_that_runs_through_a_blob_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    await store.start()
    await store.put("a", stream(b"blob a"), max_bytes=MIB)
    await store.put("x/y", stream(b"blob y"), max_bytes=MIB)

    with pytest.raises(BlobStoreError, match="runs through an existing blob"):
        await store.put("a/b", stream(b"under a"), max_bytes=MIB)
    with pytest.raises(BlobStoreError, match="folder of other blobs"):
        await store.put("x", stream(b"over x"), max_bytes=MIB)
    with pytest.raises(BlobStoreError, match="runs through an existing blob"):
        await store.put_bytes("a/c", b"under a")
    with pytest.raises(BlobStoreError, match="folder of other blobs"):
        await store.put_bytes("x", b"over x")

    assert _tree(tmp_path) == ["a", "x", "x/y"]
    assert await store.read("a") == b"blob a"
    assert not await store.exists("x")


async def test_filesystem_put_into_a_folder_removed_behind_its_back_makes_it_again(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    await store.start()
    await store.put("t/doc-1/run-1/parsed.json", stream(b"first"), max_bytes=MIB, durable=False)
    await store.put_bytes("t/doc-1/run-1/chunks.json", b"second", durable=False)
    shutil.rmtree(tmp_path / "t")  # another process deleted the document meanwhile

    await store.put_bytes("t/doc-1/run-1/chunks.json", b"again", durable=False)
    await store.put("t/doc-1/file", stream(b"upload"), max_bytes=MIB)
    assert await store.read("t/doc-1/run-1/chunks.json") == b"again"
    assert _tree(tmp_path) == ["t", "t/doc-1", "t/doc-1/file", "t/doc-1/run-1", "t/doc-1/run-1/chunks.json"]


async def test_filesystem_put_writes_the_file_where_the_key_says(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path / "root")
    await store.start()
    await store.put("t1/kb1/doc.txt", stream(b"hello"), max_bytes=MIB)

    assert (tmp_path / "root" / "t1" / "kb1" / "doc.txt").read_bytes() == b"hello"


async def test_filesystem_put_and_read_stream_hold_little_memory(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    size = 32 * MIB
    digest = hashlib.sha256()

    async def generated() -> AsyncIterator[bytes]:
        for start in range(0, size, CHUNK):
            chunk = start.to_bytes(8, "big") * (CHUNK // 8)
            digest.update(chunk)
            yield chunk

    tracemalloc.start()
    try:
        stored = await store.put("big/file.bin", generated(), max_bytes=size)
        read = 0
        async for chunk in await store.read_stream("big/file.bin"):
            read += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert (stored.size_bytes, stored.sha256, read) == (size, digest.hexdigest(), size)
    assert peak < 4 * MIB, f"peak {peak} bytes for a {size}-byte blob"


# --- S3 only -----------------------------------------------------------------------------------


async def test_s3_start_creates_the_bucket_once_and_stores_the_sha256(s3_endpoint: str) -> None:
    bucket = f"fresh-{uuid.uuid4().hex[:16]}"
    client = _boto(s3_endpoint)
    names = {b["Name"] for b in client.list_buckets()["Buckets"]}
    assert bucket not in names

    first = S3BlobStore(s3_endpoint, ACCESS_KEY, SECRET_KEY, bucket, secure=False, region=REGION)
    await first.start()
    second = S3BlobStore(s3_endpoint, ACCESS_KEY, SECRET_KEY, bucket, secure=False, region=REGION)
    await second.start()  # the bucket exists already: no error
    stored = await first.put("k/doc.bin", stream(b"payload"), max_bytes=MIB)

    assert client.head_object(Bucket=bucket, Key="k/doc.bin")["Metadata"]["sha256"] == stored.sha256
    assert await second.read("k/doc.bin") == b"payload"
    await first.close()
    await second.close()


async def test_s3_unreachable_server_raises_blob_store_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3, "S3_RETRIES", 0)
    store = S3BlobStore("127.0.0.1:1", ACCESS_KEY, SECRET_KEY, "some-bucket", secure=False, region=REGION)
    with pytest.raises(BlobStoreError, match="some-bucket"):
        await store.read("k/doc.bin")
    await store.close()


# --- configuration URL -------------------------------------------------------------------------


async def test_url_builds_the_filesystem_store(tmp_path: Path) -> None:
    from_path = build_blob_store(str(tmp_path / "a"))
    from_url = build_blob_store(f"file://{tmp_path}/b")

    assert isinstance(from_path, FilesystemBlobStore)
    assert from_path.root == tmp_path / "a"
    assert isinstance(from_url, FilesystemBlobStore)
    assert from_url.root == tmp_path / "b"
    await from_url.start()
    await from_url.put("k", stream(b"v"), max_bytes=MIB)
    assert (tmp_path / "b" / "k").read_bytes() == b"v"


async def test_url_builds_a_working_s3_store(s3_endpoint: str) -> None:
    bucket = f"url-{uuid.uuid4().hex[:16]}"
    secret = urllib.parse.quote(SECRET_KEY, safe="")
    store = build_blob_store(
        f"s3://{ACCESS_KEY}:{secret}@{s3_endpoint}/{bucket}?secure=false&region={REGION}"
    )

    assert isinstance(store, S3BlobStore)
    assert store.bucket == bucket
    await store.start()
    await store.put("k/v.txt", stream(b"from url"), max_bytes=MIB)
    assert await store.read("k/v.txt") == b"from url"
    url = await store.presigned_url("k/v.txt", timedelta(seconds=60))
    assert url is not None
    assert url.startswith(f"http://{s3_endpoint}/{bucket}/k/v.txt?")
    await store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must not be empty"),
        ("ftp://host/x", "scheme 'ftp' is not supported"),
        ("file://elsewhere/srv/blobs", "not host 'elsewhere'"),
        ("s3://host:9000/bucket", "must carry credentials"),
        ("s3://ak:hunter2@host:9000/", "exactly one bucket"),
        ("s3://ak:hunter2@host:9000/bucket/extra", "exactly one bucket"),
        ("s3://ak:hunter2@host:9000/bucket?secure=maybe", "secure must be true or false"),
        ("s3://ak:hunter2@host:9000/bucket?colour=red", "'colour' is unknown"),
        ("s3://ak:hunter2@host:9000/bucket?region=", "region must not be empty"),
        ("s3://ak:hunter2@host:9000/Bad_Bucket", "bucket name 'Bad_Bucket'"),
        ("s3://ak:hunter2@host:port/bucket", "[Pp]ort"),
    ],
)
def test_bad_urls_are_refused_without_revealing_the_secret(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        build_blob_store(url)
    assert "hunter2" not in str(refused.value)
