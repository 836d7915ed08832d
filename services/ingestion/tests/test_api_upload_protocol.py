"""The upload stream protocol: files as a header then bytes, the header checks and the content sniffing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc
import pytest

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_ingestion.api.upload_protocol import (
    SNIFF_BYTES,
    ContentCheck,
    FileStream,
    check_header,
    single_file,
)
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.rpc.errors import RequestError

SETTINGS = Settings(
    temporal_address="t:1",
    nats_url="nats://n:1",
    retrieval_addr="r:1",
    modelhub_addr="m:1",
    data_dir="/nonexistent",
    max_file_size_bytes=1000,
    max_metadata_entries=2,
)


def header(**fields: object) -> pb.UploadHeader:
    values: dict[str, object] = {"knowledge_base_id": "kb", "file_name": "a.txt", "declared_size_bytes": 10}
    values.update(fields)
    return pb.UploadHeader(**values)  # type: ignore[arg-type]


async def messages(items: Iterable[pb.UploadHeader | bytes]) -> AsyncIterator[pb.UploadDocumentsRequest]:
    for item in items:
        if isinstance(item, bytes):
            yield pb.UploadDocumentsRequest(chunk=item)
        else:
            yield pb.UploadDocumentsRequest(header=item)


async def test_a_stream_reads_as_files_each_a_header_and_its_bytes() -> None:
    stream = FileStream(messages([header(file_name="a.txt"), b"ab", b"cd", header(file_name="b.txt"), b"ef"]))
    first = await stream.next_header()
    assert first is not None and first.file_name == "a.txt"
    assert [chunk async for chunk in stream.file_bytes()] == [b"ab", b"cd"]
    second = await stream.next_header()
    assert second is not None and second.file_name == "b.txt"
    assert [chunk async for chunk in stream.file_bytes()] == [b"ef"]
    assert await stream.next_header() is None
    assert await stream.next_header() is None  # and stays ended


async def test_a_refused_file_is_skipped_up_to_the_next_header() -> None:
    stream = FileStream(
        messages([header(file_name="bad.exe"), b"x" * 5, b"y", header(file_name="c.md"), b"#"])
    )
    await stream.next_header()
    await stream.skip_file()
    following = await stream.next_header()
    assert following is not None and following.file_name == "c.md"
    assert [chunk async for chunk in stream.file_bytes()] == [b"#"]


async def test_a_file_starting_without_a_header_is_refused_naming_the_field() -> None:
    stream = FileStream(messages([b"no header first"]))
    with pytest.raises(RequestError) as refused:
        await stream.next_header()
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.field == "header"


async def test_a_single_file_upload_takes_one_header_only() -> None:
    async def upload(items: list[pb.UploadHeader | bytes]) -> AsyncIterator[pb.UploadDocumentRequest]:
        for item in items:
            yield (
                pb.UploadDocumentRequest(chunk=item)
                if isinstance(item, bytes)
                else pb.UploadDocumentRequest(header=item)
            )

    first, chunks = await single_file(upload([header(), b"a", b"b"]))
    assert first.file_name == "a.txt" and [c async for c in chunks] == [b"a", b"b"]

    _, chunks = await single_file(upload([header(), b"a", header()]))
    with pytest.raises(RequestError) as second_header:
        _ = [c async for c in chunks]
    assert second_header.value.field == "header" and "UploadDocuments" in second_header.value.message

    with pytest.raises(RequestError) as no_header:
        await single_file(upload([b"a"]))
    assert no_header.value.field == "header"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"file_name": ""}, "header.file_name", "a plain file name (no path)"),
        ({"file_name": "dir/a.txt"}, "header.file_name", "a plain file name (no path)"),
        ({"file_name": "x" * 252 + ".txt"}, "header.file_name", "1–255 characters"),
        ({"file_name": "tool.exe"}, "header.file_name", "unsupported file type '.exe'; accepted: pdf, docx"),
        ({"file_name": "README"}, "header.file_name", "unsupported file type '(no extension)'"),
        ({"declared_size_bytes": 0}, "header.declared_size_bytes", "must be > 0"),
        ({"declared_size_bytes": 1001}, "header.declared_size_bytes", "1001 bytes is over the limit of 1000"),
        ({"content_sha256": "abc"}, "header.content_sha256", "must be 64 hex characters"),
        ({"content_sha256": "g" * 64}, "header.content_sha256", "must be 64 hex characters"),
        ({"metadata": {"a": "1", "b": "2", "c": "3"}}, "header.metadata", "3 entries; the limit is 2"),
        ({"metadata": {"k" * 65: "v"}}, "header.metadata", "keys 1–64 and values ≤ 2048"),
        ({"metadata": {"k": "v" * 2049}}, "header.metadata", "keys 1–64 and values ≤ 2048"),
    ],
)
def test_a_bad_header_is_refused_naming_the_field_and_the_limit(
    fields: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(RequestError) as refused:
        check_header(SETTINGS, header(**fields))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.field == field
    assert refused.value.message.startswith(f"{field}: ")  # the words callers have always read
    assert words in refused.value.message, refused.value.message


def test_a_good_header_gives_the_file_type() -> None:
    file_type = check_header(
        SETTINGS, header(file_name="Report.PDF", content_sha256="A" * 64, metadata={"k": "v"})
    )
    assert file_type.extension == ".pdf" and file_type.content_types[0] == "application/pdf"


async def test_content_that_is_not_what_the_name_says_is_refused_before_the_rest_arrives() -> None:
    received: list[bytes] = []

    async def chunks() -> AsyncIterator[bytes]:
        for chunk in (b"%PDF-1.7\n" + b"x" * SNIFF_BYTES, b"never read"):
            received.append(chunk)
            yield chunk

    check = ContentCheck(header(file_name="notes.txt", declared_size_bytes=SNIFF_BYTES * 2))
    with pytest.raises(RequestError) as refused:
        _ = [c async for c in check.passed(chunks())]
    assert refused.value.field == "header.file_name"
    assert "the content is a PDF, not text" in refused.value.message
    assert len(received) == 1


async def test_a_small_file_is_checked_once_all_its_bytes_are_there() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"# Title\n"
        yield b"text"

    check = ContentCheck(header(file_name="a.md", declared_size_bytes=12))
    assert [c async for c in check.passed(chunks())] == [b"# Title\n", b"text"]
    check.finish()

    binary = ContentCheck(header(file_name="a.md", declared_size_bytes=100))  # shorter than declared
    _ = [c async for c in binary.passed(_once(b"ab\x00cd"))]
    with pytest.raises(RequestError) as refused:
        binary.finish()
    assert "binary, not text" in refused.value.message


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
