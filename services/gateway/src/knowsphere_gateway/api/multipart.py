"""Streaming ``multipart/form-data`` uploads: the body is parsed as it arrives (python-multipart's push
parser) and each ``file`` part spooled to its own temporary file, never held whole in memory.

A file stays in memory up to ``SPOOL_MEMORY_BYTES`` and spills to disk above it (disk writes and
reads run off the event loop); its size and sha256 are computed on the way. An optional
``metadata`` part holds a JSON object of strings; any other part is refused (400 naming it), so that a
misspelt ``metdata`` is never dropped unseen. ``spool_upload`` takes one file and stops reading as
soon as it goes over the size limit; ``spool_uploads`` takes several (up to a count limit) and refuses
a file over the size limit on its own, dropping its bytes, so that the others go on.
"""

from __future__ import annotations

import asyncio
import email.message
import email.utils
import hashlib
import json
import re
import sys
import tempfile
from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from knowsphere_gateway.api.errors import HttpError

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

# Largest accepted ``metadata`` part: room for ingestion's own limits (32 entries of 64 + 2,048
# characters), which it checks itself.
MAX_METADATA_PART_BYTES = 128 * 1024
# What multipart framing and the metadata part may add to the file's size in Content-Length.
MULTIPART_ALLOWANCE_BYTES = MAX_METADATA_PART_BYTES + 128 * 1024
# Largest header block of one multipart part.
MAX_PART_HEADER_BYTES = 16 * 1024
# An upload stays in memory up to this size and spills to a temporary file above it.
SPOOL_MEMORY_BYTES = 1024 * 1024


class MultipartError(ValueError):
    """The body is not well-formed multipart/form-data."""


@dataclass(frozen=True)
class PartStart:
    """The headers of a part; its bytes follow as ``bytes`` events until the next ``PartStart``."""

    name: str
    filename: str | None
    content_type: str


@dataclass
class SpooledUpload:
    file: IO[bytes]
    file_name: str
    content_type: str
    size: int
    sha256: str
    metadata: dict[str, str]


def _too_large(max_file_bytes: int) -> HttpError:
    return HttpError(413, "payload_too_large", f"file: over the limit of {max_file_bytes} bytes", "file")


def refuse_oversized(content_length: str | None, max_file_bytes: int) -> None:
    """413 for a ``Content-Length`` that cannot fit the size limit, before any of the body is read."""
    if (
        content_length is not None
        and content_length.isdigit()
        and int(content_length) > max_file_bytes + MULTIPART_ALLOWANCE_BYTES
    ):
        raise _too_large(max_file_bytes)


# --- parsing -------------------------------------------------------------------------------------


class _Events:
    """python-multipart's callbacks, turned into a list of events (``PartStart``, then the part's
    ``bytes``) that the caller takes after each ``write``. Bytes of parts nobody reads are dropped."""

    WANTED = ("file", "metadata")

    def __init__(self) -> None:
        self.pending: list[PartStart | bytes] = []
        self.done = False
        self._headers: list[bytes] = []
        self._field = bytearray()
        self._value = bytearray()
        self._header_bytes = 0
        self._keep = False

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_end": self._end,
        }

    def take(self) -> list[PartStart | bytes]:
        events, self.pending = self.pending, []
        return events

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_PART_HEADER_BYTES:
            raise MultipartError(f"part headers over {MAX_PART_HEADER_BYTES} bytes")

    def _part_begin(self) -> None:
        self._headers.clear()
        self._header_bytes = 0
        self._keep = False

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._count(end - start)
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._count(end - start)
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._count(4)  # ": " and CRLF
        self._headers.append(bytes(self._field) + b": " + bytes(self._value))
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        part = _part_start(b"\r\n".join(self._headers))
        self._keep = part.name in self.WANTED
        self.pending.append(part)

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._keep:
            self.pending.append(data[start:end])

    def _end(self) -> None:
        self.done = True


def _part_start(block: bytes) -> PartStart:
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        text = block.decode("latin-1")
    headers = email.message.Message()
    for line in text.split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip()] = value.strip()
    # email's parameter parsing also decodes RFC 2231/5987 ``filename*=UTF-8''…``, which
    # python-multipart's ``parse_options_header`` leaves out.
    field_name = headers.get_param("name", header="content-disposition")
    filename = headers.get_filename()
    return PartStart(
        name=email.utils.collapse_rfc2231_value(field_name) if field_name else "",
        # Some browsers send the client's full path; only the file name is the caller's to give.
        filename=re.split(r"[\\/]", filename)[-1] if filename is not None else None,
        content_type=headers.get_content_type() if headers.get("content-type") else "",
    )


def _boundary(content_type: str | None) -> bytes:
    media_type, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if media_type != b"multipart/form-data" or not boundary:
        raise HttpError(
            415,
            "unsupported_media_type",
            "file: send the upload as multipart/form-data with a part named 'file'",
            "file",
        )
    return boundary


def _metadata(raw: bytes | None) -> dict[str, str]:
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise HttpError(400, "invalid_argument", f"metadata: not JSON ({error})", "metadata") from error
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise HttpError(400, "invalid_argument", "metadata: must be a JSON object of strings", "metadata")
    return value


# --- spooling ------------------------------------------------------------------------------------


async def _write(file: Any, data: bytes) -> None:
    # Once a SpooledTemporaryFile has spilled to disk, writes block: keep them off the event loop.
    if getattr(file, "_rolled", True):
        await asyncio.to_thread(file.write, data)
    else:
        file.write(data)


async def read_spooled(file: Any, size: int) -> bytes:
    """Up to ``size`` bytes of a spooled file, off the event loop once it is on disk."""
    if getattr(file, "_rolled", True):
        return await asyncio.to_thread(file.read, size)
    data: bytes = file.read(size)
    return data


@dataclass
class SpooledFile:
    """One ``file`` part of ``spool_uploads``: its bytes in ``file``, or, when it was refused on its
    own (over the size limit), ``refusal`` and no file."""

    file_name: str
    content_type: str
    file: IO[bytes] | None = None
    size: int = 0
    sha256: str = ""
    refusal: HttpError | None = None


@dataclass
class SpooledFiles:
    """The ``file`` parts of one body, in order, and the ``metadata`` that applies to all of them; the
    caller calls ``close``."""

    files: list[SpooledFile]
    metadata: dict[str, str]

    def close(self) -> None:
        for spooled in self.files:
            if spooled.file is not None:
                spooled.file.close()


class _Spooler:
    """Takes the parser's events and spools every ``file`` part to its own temporary file."""

    def __init__(self, max_file_bytes: int, max_files: int, too_many: str, refuse_file_alone: bool) -> None:
        self.files: list[SpooledFile] = []
        self.metadata_raw: bytearray | None = None
        self._max_file_bytes = max_file_bytes
        self._max_files = max_files
        self._too_many = too_many
        self._refuse_file_alone = refuse_file_alone
        self._digest = hashlib.sha256()
        self._current: str | None = None  # "file", "metadata", or None for parts that are skipped

    async def start(self, part: PartStart) -> None:
        await self._finish_file()
        self._current = None
        if part.name == "file":
            if len(self.files) >= self._max_files:
                raise HttpError(400, "invalid_argument", self._too_many, "file")
            if part.filename is None:
                raise HttpError(
                    400, "invalid_argument", "file: the part 'file' must be a file upload", "file"
                )
            self.files.append(
                SpooledFile(
                    file_name=part.filename,
                    content_type=part.content_type,
                    file=tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES),  # noqa: SIM115 - closed by the caller
                )
            )
            self._digest = hashlib.sha256()
            self._current = "file"
        elif part.name == "metadata":
            if self.metadata_raw is not None:
                raise HttpError(
                    400, "invalid_argument", "metadata: send one metadata part, not several", "metadata"
                )
            self.metadata_raw, self._current = bytearray(), "metadata"
        else:
            raise HttpError(
                400,
                "invalid_argument",
                f"{part.name!r}: not a part of an upload; send 'file' and, optionally, 'metadata'",
                part.name or "body",
            )

    async def data(self, data: bytes) -> None:
        if self._current == "file":
            spooled = self.files[-1]
            if spooled.file is None:
                return  # refused: the rest of its bytes are dropped
            spooled.size += len(data)
            if spooled.size > self._max_file_bytes:
                if not self._refuse_file_alone:
                    raise _too_large(self._max_file_bytes)
                spooled.file.close()
                spooled.file, spooled.refusal = None, _too_large(self._max_file_bytes)
                return
            self._digest.update(data)
            await _write(spooled.file, data)
        elif self._current == "metadata" and self.metadata_raw is not None:
            self.metadata_raw += data
            if len(self.metadata_raw) > MAX_METADATA_PART_BYTES:
                raise HttpError(
                    400,
                    "invalid_argument",
                    f"metadata: over the limit of {MAX_METADATA_PART_BYTES} bytes",
                    "metadata",
                )

    async def _finish_file(self) -> None:
        if self._current == "file" and self.files[-1].file is not None:
            self.files[-1].sha256 = self._digest.hexdigest()
            await asyncio.to_thread(self.files[-1].file.seek, 0)

    async def finish(self) -> SpooledFiles:
        await self._finish_file()
        self._current = None
        if not self.files:
            raise HttpError(400, "invalid_argument", "file: required (a multipart part named 'file')", "file")
        metadata = _metadata(bytes(self.metadata_raw) if self.metadata_raw is not None else None)
        return SpooledFiles(files=self.files, metadata=metadata)

    def close(self) -> None:
        SpooledFiles(self.files, {}).close()


async def _spool(content_type: str | None, body: AsyncIterable[bytes], spooler: _Spooler) -> SpooledFiles:
    boundary = _boundary(content_type)
    events = _Events()
    try:
        parser = MultipartParser(
            boundary,
            events.callbacks(),
            # The limit on a part's whole header block (``_Events``) is the one that applies.
            max_header_count=sys.maxsize,
            max_header_size=sys.maxsize,
        )
        async for data in body:
            parser.write(data)
            for event in events.take():
                if isinstance(event, PartStart):
                    await spooler.start(event)
                else:
                    await spooler.data(event)
            if events.done:
                break  # an epilogue is ignored
        if not events.done:
            raise MultipartError("the body ended before the closing boundary")
        return await spooler.finish()
    except (MultipartError, FormParserError) as error:
        spooler.close()
        raise HttpError(
            400, "invalid_argument", f"file: malformed multipart body: {error}", "file"
        ) from error
    except BaseException:
        spooler.close()
        raise


async def spool_upload(
    content_type: str | None, body: AsyncIterable[bytes], max_file_bytes: int
) -> SpooledUpload:
    """Parses the multipart ``body`` as it arrives, spooling the ``file`` part; the caller closes
    ``SpooledUpload.file``. On error the file is closed and an ``HttpError`` raised (415 not
    multipart, 413 file over ``max_file_bytes``, 400 anything else)."""
    spooler = _Spooler(max_file_bytes, 1, "file: only one file per upload", refuse_file_alone=False)
    spooled = await _spool(content_type, body, spooler)
    only = spooled.files[0]
    assert only.file is not None  # an oversized file raised
    return SpooledUpload(
        file=only.file,
        file_name=only.file_name,
        content_type=only.content_type,
        size=only.size,
        sha256=only.sha256,
        metadata=spooled.metadata,
    )


async def spool_uploads(
    content_type: str | None, body: AsyncIterable[bytes], max_file_bytes: int, max_files: int
) -> SpooledFiles:
    """Parses the multipart ``body`` as it arrives, spooling each of its ``file`` parts; the caller
    closes the result. A file over ``max_file_bytes`` is refused on its own (``SpooledFile.refusal``,
    a 413 body) and the others go on. On error every file is closed and an ``HttpError`` raised
    (415 not multipart, 400 more than ``max_files`` files, no file, bad metadata or a malformed
    body)."""
    too_many = (
        f"file: more than {max_files} files in one upload (the smaller of the upload policy's "
        f"max_files_per_upload and KS_GATEWAY_MAX_UPLOAD_FILES is {max_files})"
    )
    spooler = _Spooler(max_file_bytes, max_files, too_many, refuse_file_alone=True)
    return await _spool(content_type, body, spooler)


__all__ = [
    "MAX_METADATA_PART_BYTES",
    "MAX_PART_HEADER_BYTES",
    "MULTIPART_ALLOWANCE_BYTES",
    "SPOOL_MEMORY_BYTES",
    "SpooledFile",
    "SpooledFiles",
    "SpooledUpload",
    "read_spooled",
    "refuse_oversized",
    "spool_upload",
    "spool_uploads",
]
