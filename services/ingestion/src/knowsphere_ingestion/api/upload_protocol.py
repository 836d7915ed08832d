"""What an upload stream must look like: files as a header then their bytes, headers that hold up, bytes
that are what the file name says.

Nothing here stores anything or asks another service: these are the checks an upload passes before
(and while) its bytes are stored, so a refused file leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_ingestion.formats import BY_EXTENSION, FILE_TYPES, FileType, check_content, extension_of
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.rpc.errors import invalid

SNIFF_BYTES = 8192
"""How many leading bytes decide whether a file's content fits its extension."""
MAX_FILE_NAME_CHARS = 255
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 2048
_HEX = frozenset("0123456789abcdef")


UploadMessage = pb.UploadDocumentRequest | pb.UploadDocumentsRequest
"""A message of an upload stream: a header or a chunk of bytes."""


class FileStream:
    """The messages of an UploadDocuments stream as files: a header, then that file's bytes."""

    def __init__(self, messages: AsyncIterable[UploadMessage]) -> None:
        self._messages = aiter(messages)
        self._header: pb.UploadHeader | None = None  # the next file's header, once read
        self._ended = False

    async def _next(self) -> UploadMessage | None:
        if self._ended:
            return None
        message = await anext(self._messages, None)
        if message is None:
            self._ended = True
        return message

    async def next_header(self) -> pb.UploadHeader | None:
        """The next file's header; None at the end of the stream."""
        if self._header is None:
            message = await self._next()
            if message is None:
                return None
            if not message.HasField("header"):
                raise invalid("header", "each file must start with a header message")
            self._header = message.header
        header, self._header = self._header, None
        return header

    async def file_bytes(self) -> AsyncIterator[bytes]:
        """The bytes of the current file, up to the next header."""
        while self._header is None:
            message = await self._next()
            if message is None:
                return
            if message.HasField("header"):
                self._header = message.header
                return
            yield message.chunk

    async def skip_file(self) -> None:
        """Reads past what is left of the current file."""
        async for _ in self.file_bytes():
            pass


async def single_file(messages: AsyncIterable[UploadMessage]) -> tuple[pb.UploadHeader, AsyncIterator[bytes]]:
    """The header and bytes of an UploadDocument stream, which carries exactly one file."""
    stream = aiter(messages)
    first = await anext(stream, None)
    if first is None or not first.HasField("header"):
        raise invalid("header", "the first message of an upload must carry the header")

    async def chunks() -> AsyncIterator[bytes]:
        async for message in stream:
            if message.HasField("header"):
                raise invalid(
                    "header",
                    "only the first message may carry a header (several files go through UploadDocuments)",
                )
            yield message.chunk

    return first.header, chunks()


def check_header(settings: Settings, header: pb.UploadHeader) -> FileType:
    """The type of the file a header announces, once the header holds up (its knowledge base and the
    models the type needs are the caller's to check)."""
    name = header.file_name
    if not name or "/" in name or "\\" in name or "\x00" in name or len(name) > MAX_FILE_NAME_CHARS:
        raise invalid(
            "header.file_name",
            f"a plain file name (no path), 1–{MAX_FILE_NAME_CHARS} characters, is required",
        )
    extension = extension_of(name)
    file_type = BY_EXTENSION.get(extension)
    if file_type is None:
        accepted = ", ".join(t.extension.lstrip(".") for t in FILE_TYPES)
        raise invalid(
            "header.file_name",
            f"unsupported file type {extension or '(no extension)'!r}; accepted: {accepted}",
        )
    limit = settings.max_file_size_bytes
    if header.declared_size_bytes <= 0:
        raise invalid("header.declared_size_bytes", "must be > 0 (an empty file cannot be ingested)")
    if header.declared_size_bytes > limit:
        raise invalid(
            "header.declared_size_bytes",
            f"{header.declared_size_bytes} bytes is over the limit of {limit} bytes",
        )
    digest = header.content_sha256
    if digest and (len(digest) != 64 or not _HEX.issuperset(digest.lower())):
        raise invalid("header.content_sha256", "must be 64 hex characters")
    if len(header.metadata) > settings.max_metadata_entries:
        raise invalid(
            "header.metadata", f"{len(header.metadata)} entries; the limit is {settings.max_metadata_entries}"
        )
    for key, value in header.metadata.items():
        if not key or len(key) > MAX_METADATA_KEY_CHARS or len(value) > MAX_METADATA_VALUE_CHARS:
            raise invalid(
                "header.metadata",
                f"key {key[:MAX_METADATA_KEY_CHARS]!r}: keys 1–{MAX_METADATA_KEY_CHARS} and values "
                f"≤ {MAX_METADATA_VALUE_CHARS} characters",
            )
    return file_type


class ContentCheck:
    """Passes a file's bytes through, refusing them as soon as the leading bytes do not fit the file
    name's extension (a PDF renamed to .docx), before the rest is stored."""

    def __init__(self, header: pb.UploadHeader) -> None:
        self._file_name = header.file_name
        # Enough bytes to decide: the sniff window, or the whole file when it is smaller.
        self._enough = min(SNIFF_BYTES, header.declared_size_bytes)
        self._head = b""

    def _check(self) -> None:
        problem = check_content(self._file_name, self._head)
        if problem:
            raise invalid("header.file_name", problem)

    async def passed(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        async for data in chunks:
            if len(self._head) < SNIFF_BYTES:
                self._head += data[: SNIFF_BYTES - len(self._head)]
                if len(self._head) >= self._enough:
                    self._check()
            yield data

    def finish(self) -> None:
        """The check of a file shorter than announced, once all its bytes passed."""
        self._check()
