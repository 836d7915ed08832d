"""The gateway's streaming multipart upload (``knowsphere_gateway.api.multipart``), fed bodies piece by
piece as ``request.stream()`` would."""

from __future__ import annotations

import hashlib
import json
import random
import tracemalloc
import urllib.parse
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from knowsphere_gateway.api import multipart
from knowsphere_gateway.api.errors import HttpError
from knowsphere_gateway.api.multipart import (
    SpooledFiles,
    SpooledUpload,
    refuse_oversized,
    spool_upload,
    spool_uploads,
)

BOUNDARY = "----ks-test-boundary-7MA4YWxkTrZu0gW"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
MIB = 1024 * 1024
LIMIT = 50 * MIB


def part(disposition: str, data: bytes, content_type: str | None = None) -> bytes:
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    return head.encode() + b"\r\n" + data + b"\r\n"


def file_part(data: bytes, filename: str = "report.md", content_type: str = "text/markdown") -> bytes:
    return part(f'form-data; name="file"; filename="{filename}"', data, content_type)


def file_head(filename: str = "big.bin") -> bytes:
    """The start of a file part whose bytes and end the caller sends."""
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n\r\n'.encode()
    )


def metadata_part(value: str) -> bytes:
    return part('form-data; name="metadata"', value.encode())


def closing() -> bytes:
    return f"--{BOUNDARY}--\r\n".encode()


async def stream(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def spool(body: bytes | Iterable[bytes], limit: int = LIMIT) -> SpooledUpload:
    pieces = [body] if isinstance(body, bytes) else body
    return await spool_upload(CONTENT_TYPE, stream(pieces), limit)


async def spool_error(body: bytes | Iterable[bytes], limit: int = LIMIT) -> HttpError:
    with pytest.raises(HttpError) as caught:
        await spool(body, limit)
    return caught.value


async def spool_many(body: bytes | Iterable[bytes], limit: int = LIMIT, max_files: int = 10) -> SpooledFiles:
    pieces = [body] if isinstance(body, bytes) else body
    return await spool_uploads(CONTENT_TYPE, stream(pieces), limit, max_files)


def described(spooled: SpooledFiles) -> list[tuple[str, str, int, str, bytes | None]]:
    """(name, content type, size, sha256, content) of each file; the content is None for a refused
    file. Closes the files."""
    try:
        return [
            (f.file_name, f.content_type, f.size, f.sha256, f.file.read() if f.file is not None else None)
            for f in spooled.files
        ]
    finally:
        spooled.close()


def expected(name: str, data: bytes, content_type: str = "text/markdown") -> tuple[str, str, int, str, bytes]:
    return (name, content_type, len(data), hashlib.sha256(data).hexdigest(), data)


def content(upload: SpooledUpload) -> bytes:
    try:
        return upload.file.read()
    finally:
        upload.file.close()


def record_spooled_files(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every temporary file the spooling opens from now on, in order."""
    opened: list[Any] = []
    original = multipart.tempfile.SpooledTemporaryFile

    def recording(*args: Any, **kwargs: Any) -> Any:
        opened.append(original(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(multipart.tempfile, "SpooledTemporaryFile", recording)
    return opened


def split_at_random(body: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(body)), rng.randint(1, min(40, len(body) - 1))))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


# --- the parts arrive whole ----------------------------------------------------------------------


async def test_file_and_metadata_are_read_with_size_and_hash() -> None:
    data = b"# Travel policy\n\nTrains under four hours.\r\n--almost-a-boundary\r\n"
    body = metadata_part('{"source": "intranet"}') + file_part(data) + closing()
    upload = await spool(body)
    assert (upload.file_name, upload.content_type) == ("report.md", "text/markdown")
    assert (upload.size, upload.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert upload.metadata == {"source": "intranet"}
    assert content(upload) == data


async def test_an_epilogue_is_ignored() -> None:
    body = file_part(b"abc") + closing() + b"epilogue that is not multipart at all"
    upload = await spool(body)
    assert (upload.metadata, content(upload)) == ({}, b"abc")


async def test_a_part_other_than_file_and_metadata_or_a_second_metadata_is_refused_naming_it() -> None:
    misspelt = await spool_error(part('form-data; name="metdata"', b"{}") + file_part(b"abc") + closing())
    assert (misspelt.status_code, misspelt.body["field"]) == (400, "metdata")
    assert "'metdata': not a part of an upload" in misspelt.body["message"]
    twice = await spool_error(
        metadata_part("{}") + metadata_part('{"a": "b"}') + file_part(b"abc") + closing()
    )
    assert (twice.status_code, twice.body["field"]) == (400, "metadata")


async def test_body_split_at_random_byte_boundaries_gives_the_same_upload() -> None:
    rng = random.Random(20240611)
    # Content that keeps nearly matching the delimiter, so partial matches straddle the cuts.
    data = b"".join(
        rng.choice([b"\r\n", b"\r\n--", f"\r\n--{BOUNDARY[:-1]}".encode(), b"-", bytes([rng.randrange(256)])])
        for _ in range(3000)
    )
    metadata = {"source": "wiki", "owner": "Zoë"}
    body = metadata_part(json.dumps(metadata)) + file_part(data, "plan.bin", "application/octet-stream")
    body += closing()
    for _ in range(60):
        upload = await spool(split_at_random(body, rng))
        assert (upload.size, upload.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert upload.metadata == metadata and upload.file_name == "plan.bin"
        assert content(upload) == data
    one_byte_at_a_time = [body[i : i + 1] for i in range(len(body))]
    assert content(await spool(one_byte_at_a_time)) == data


@pytest.mark.parametrize(
    "disposition",
    [
        'form-data; name="file"; filename="季度报告 Ü.pdf"',  # raw UTF-8, as browsers and httpx send it
        "form-data; name=\"file\"; filename*=UTF-8''" + urllib.parse.quote("季度报告 Ü.pdf"),  # RFC 5987
    ],
)
async def test_non_ascii_file_names(disposition: str) -> None:
    upload = await spool(part(disposition, b"%PDF-1.7", "application/pdf") + closing())
    assert upload.file_name == "季度报告 Ü.pdf"
    assert upload.content_type == "application/pdf"
    content(upload)


async def test_a_client_path_is_cut_to_the_file_name() -> None:
    upload = await spool(file_part(b"x", filename="C:\\\\Users\\\\ana\\\\notes.txt") + closing())
    assert upload.file_name == "notes.txt"
    content(upload)


# --- errors --------------------------------------------------------------------------------------


async def test_missing_file_part_is_a_400_on_file() -> None:
    # A file under another part name is not taken for the file: it is refused, naming that part.
    error = await spool_error(metadata_part("{}") + part('form-data; name="other"; filename="a.md"', b"#"))
    assert error.status_code == 400
    assert error.body["field"] == "other"
    error = await spool_error(metadata_part("{}") + closing())
    assert error.status_code == 400
    assert error.body == {
        "code": "invalid_argument",
        "message": "file: required (a multipart part named 'file')",
        "field": "file",
    }


async def test_a_file_part_without_a_file_name_or_twice_is_refused() -> None:
    error = await spool_error(part('form-data; name="file"', b"text") + closing())
    assert error.body["message"] == "file: the part 'file' must be a file upload"
    error = await spool_error(file_part(b"a") + file_part(b"b") + closing())
    assert error.body["message"] == "file: only one file per upload"


@pytest.mark.parametrize("value", ["[1, 2]", '"text"', '{"n": 1}'])
async def test_metadata_that_is_not_a_json_object_of_strings_is_a_400(value: str) -> None:
    error = await spool_error(metadata_part(value) + file_part(b"a") + closing())
    assert error.status_code == 400
    assert error.body == {
        "code": "invalid_argument",
        "message": "metadata: must be a JSON object of strings",
        "field": "metadata",
    }


async def test_metadata_that_is_not_json_or_too_large_is_a_400() -> None:
    error = await spool_error(metadata_part("{nope") + file_part(b"a") + closing())
    assert error.body["field"] == "metadata"
    assert str(error.body["message"]).startswith("metadata: not JSON (")
    big = json.dumps({"k": "v" * multipart.MAX_METADATA_PART_BYTES})
    error = await spool_error(metadata_part(big) + file_part(b"a") + closing())
    assert error.body["message"] == f"metadata: over the limit of {multipart.MAX_METADATA_PART_BYTES} bytes"


async def test_a_body_that_is_not_multipart_is_a_415() -> None:
    for content_type in (None, "application/json", "multipart/form-data", "multipart/mixed; boundary=x"):
        with pytest.raises(HttpError) as caught:
            await spool_upload(content_type, stream([b"{}"]), LIMIT)
        assert caught.value.status_code == 415
        assert caught.value.body["field"] == "file"


async def test_malformed_bodies_are_a_400_on_file() -> None:
    truncated = file_part(b"abc")  # no closing boundary
    error = await spool_error(truncated)
    assert error.status_code == 400
    assert (
        error.body["message"] == "file: malformed multipart body: the body ended before the closing boundary"
    )
    error = await spool_error(b"--not-the-boundary\r\n" + file_part(b"abc") + closing())
    assert str(error.body["message"]).startswith("file: malformed multipart body: ")
    headers = "".join(f"X-Header-{i}: {'v' * 100}\r\n" for i in range(200))
    huge_head = f"--{BOUNDARY}\r\n{headers}\r\n".encode()
    error = await spool_error(huge_head + b"x\r\n" + closing())
    assert error.body["message"] == (
        f"file: malformed multipart body: part headers over {multipart.MAX_PART_HEADER_BYTES} bytes"
    )


async def test_a_file_over_the_limit_stops_the_reading_early() -> None:
    limit = 100 * 1024
    piece = 64 * 1024
    pulled = 0

    async def endless_body() -> AsyncIterator[bytes]:
        nonlocal pulled
        pulled += 1
        yield file_head()
        for _ in range(10 * 1024 * 1024 // piece):
            pulled += 1
            yield b"\0" * piece

    with pytest.raises(HttpError) as caught:
        await spool_upload(CONTENT_TYPE, endless_body(), limit)
    assert caught.value.status_code == 413
    assert caught.value.body == {
        "code": "payload_too_large",
        "message": f"file: over the limit of {limit} bytes",
        "field": "file",
    }
    assert pulled <= 3


def test_a_content_length_that_cannot_fit_is_refused_before_reading() -> None:
    refuse_oversized(None, 1000)
    refuse_oversized("not-a-number", 1000)
    refuse_oversized(str(1000 + multipart.MULTIPART_ALLOWANCE_BYTES), 1000)
    with pytest.raises(HttpError) as caught:
        refuse_oversized(str(1001 + multipart.MULTIPART_ALLOWANCE_BYTES), 1000)
    assert caught.value.status_code == 413


async def test_the_spooled_file_is_closed_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    opened = record_spooled_files(monkeypatch)
    await spool_error(file_part(b"abc"), limit=2)
    assert len(opened) == 1 and opened[0].closed


# --- several files -------------------------------------------------------------------------------


async def test_several_files_are_spooled_each_in_order_and_share_the_metadata() -> None:
    first, second, third = b"# One\n", b"# Two\r\n--almost-a-boundary\r\n", b"three as plain text\n"
    body = (
        file_part(first, "one.md")
        + metadata_part('{"source": "intranet"}')  # anywhere in the body, for every file
        + file_part(second, "two.md")
        + file_part(third, "three.txt", "text/plain")
        + closing()
    )
    spooled = await spool_many(body)
    assert spooled.metadata == {"source": "intranet"}
    assert described(spooled) == [
        expected("one.md", first),
        expected("two.md", second),
        expected("three.txt", third, "text/plain"),
    ]


async def test_several_files_split_at_random_byte_boundaries_give_the_same_files() -> None:
    rng = random.Random(20240612)
    near_delimiters = [b"\r\n", f"\r\n--{BOUNDARY[:-1]}".encode()]
    datas = [  # content that nearly matches the delimiter; the second file is empty
        b"".join(rng.choice([*near_delimiters, bytes([rng.randrange(256)])]) for _ in range(pieces))
        for pieces in (500, 0, 1500)
    ]
    body = b"".join(file_part(d, f"f{i}.bin", "application/octet-stream") for i, d in enumerate(datas))
    body += closing()
    want = [expected(f"f{i}.bin", d, "application/octet-stream") for i, d in enumerate(datas)]
    for _ in range(30):
        assert described(await spool_many(split_at_random(body, rng))) == want


async def test_a_file_over_the_limit_is_refused_alone_and_the_others_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = record_spooled_files(monkeypatch)
    small, big, last = b"# Small\n", b"x" * 5000, b"# Last\n"
    body = file_part(small, "small.md") + file_part(big, "big.md") + file_part(last, "last.md") + closing()
    spooled = await spool_many(split_at_random(body, random.Random(3)), limit=1000)
    refused = spooled.files[1]
    assert refused.file is None and refused.refusal is not None
    assert refused.refusal.status_code == 413
    assert refused.refusal.body == {
        "code": "payload_too_large",
        "message": "file: over the limit of 1000 bytes",
        "field": "file",
    }
    assert [f.refusal for f in (spooled.files[0], spooled.files[2])] == [None, None]
    assert opened[1].closed  # its temporary file went as soon as it was over
    described_files = described(spooled)
    assert described_files[0] == expected("small.md", small)
    assert described_files[1][0] == "big.md" and described_files[1][4] is None
    assert described_files[2] == expected("last.md", last)
    assert all(file.closed for file in opened)


async def test_more_files_than_the_limit_stop_the_reading_with_a_400_naming_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = record_spooled_files(monkeypatch)
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for i in range(100):
            pulled += 1
            yield file_part(b"# A file\n", f"f{i}.md")
        yield closing()

    with pytest.raises(HttpError) as caught:
        await spool_uploads(CONTENT_TYPE, body(), LIMIT, 3)
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "code": "invalid_argument",
        "message": "file: more than 3 files in one upload (the smaller of the upload policy's "
        "max_files_per_upload and KS_GATEWAY_MAX_UPLOAD_FILES is 3)",
        "field": "file",
    }
    assert pulled == 4
    assert len(opened) == 3 and all(file.closed for file in opened)


async def test_several_files_need_at_least_one_file_part_each_with_a_name() -> None:
    with pytest.raises(HttpError) as caught:
        await spool_many(metadata_part("{}") + closing())
    assert caught.value.body["message"] == "file: required (a multipart part named 'file')"
    with pytest.raises(HttpError) as caught:
        await spool_many(file_part(b"a", "a.md") + part('form-data; name="file"', b"text") + closing())
    assert caught.value.body["message"] == "file: the part 'file' must be a file upload"


async def test_bad_metadata_or_a_malformed_body_refuses_the_whole_batch_and_closes_every_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = record_spooled_files(monkeypatch)
    two_files = file_part(b"a", "a.md") + file_part(b"b", "b.md")
    with pytest.raises(HttpError) as caught:
        await spool_many(two_files + metadata_part("[1]") + closing())
    assert (caught.value.status_code, caught.value.body["field"]) == (400, "metadata")
    with pytest.raises(HttpError) as caught:
        await spool_many(two_files)  # no closing boundary
    assert str(caught.value.body["message"]).startswith("file: malformed multipart body: ")
    assert len(opened) == 4 and all(file.closed for file in opened)


# --- large files ---------------------------------------------------------------------------------


async def test_a_5_mib_file_spills_to_disk_with_bounded_memory_and_the_right_hash() -> None:
    size = 5 * MIB
    piece = 64 * 1024
    rng = random.Random(5)
    expected = hashlib.sha256()

    async def body() -> AsyncIterator[bytes]:
        yield metadata_part('{"kind": "large"}')
        yield file_head()
        for _ in range(size // piece):
            data = rng.randbytes(piece)
            expected.update(data)
            yield data
        yield b"\r\n" + closing()

    tracemalloc.start()
    try:
        upload = await spool_upload(CONTENT_TYPE, body(), LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        assert upload.file._rolled  # type: ignore[attr-defined]
        assert (upload.size, upload.sha256) == (size, expected.hexdigest())
        assert upload.metadata == {"kind": "large"}
        assert peak < multipart.SPOOL_MEMORY_BYTES + MIB, peak  # not the 5 MiB
        read_back = hashlib.sha256()
        while data := await multipart.read_spooled(upload.file, 256 * 1024):
            read_back.update(data)
        assert read_back.hexdigest() == expected.hexdigest()
    finally:
        upload.file.close()
