"""The object store of uploaded files ("blobs"): the interface both backends share, and its rules.

A blob is an immutable sequence of bytes under a key such as ``tenant/kb/document/original.pdf``.
The backends are :class:`~knowsphere_ingestion.storage.filesystem.FilesystemBlobStore` (the embedded
default) and :class:`~knowsphere_ingestion.storage.s3.S3BlobStore` (production). They behave alike,
and one conformance suite (``tests/contract/test_blob_store.py``) runs against both:

- ``put`` streams the bytes in, computing size and SHA-256 as they pass, and never holds the whole
  file in memory. More than ``max_bytes`` raises :class:`BlobTooLarge`; that, a failing stream or a
  cancelled put leave nothing behind (no object, no temp file, no empty folder; a put
  cancelled after its stream ended, while publishing or uploading, may still complete). A put is
  atomic: a reader sees the previous blob or the complete new one, never a part.
- ``read`` returns the whole blob (parsers need bytes); ``read_stream`` returns a
  :class:`BlobStream` that reads it in chunks of at most ``READ_CHUNK_BYTES``. Both raise
  :class:`BlobNotFound`.
- ``delete`` is idempotent (False when absent); ``delete_prefix`` removes every key that starts
  with the prefix, as plain string matching (``"t1/kb"`` also matches ``"t1/kb2/x"``; end it with
  ``/`` to mean a folder).
- ``presigned_url`` is a time-limited GET URL on S3 and ``None`` on the filesystem, whose callers
  serve the bytes themselves.

Keys: 1 to 512 characters of ``A-Z a-z 0-9 . _ / -``, at most 255 between two ``/``, no leading
``/``, no ``..``, no empty or ``.`` segment, no trailing ``/``. A bad key raises ``ValueError``
naming the rule it breaks.

Configuration is one URL, for :func:`build_blob_store`:

- ``/var/lib/knowsphere/blobs``, ``relative/dir`` or ``file:///var/lib/knowsphere/blobs``: a
  filesystem store under that folder.
- ``s3://ACCESS_KEY:SECRET_KEY@host:port/bucket?secure=false&region=us-east-1``: an S3 store
  (MinIO, AWS S3 or any S3-compatible server). The credentials are percent-encoded (a ``/`` in a
  secret is ``%2F``); ``secure`` (``true``/``false``, default ``true``) chooses HTTPS; ``region`` is
  optional (without it the client asks the server). The bucket is created by ``start()`` when
  missing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Protocol
from urllib.parse import unquote, urlsplit

MAX_KEY_CHARS = 512
MAX_KEY_SEGMENT_CHARS = 255  # the file name limit of common filesystems
# The largest chunk a BlobStream hands out: one read call in a worker thread per chunk.
READ_CHUNK_BYTES = 1024 * 1024

_KEY_CHARS = re.compile(r"[A-Za-z0-9._/-]*")


class BlobStoreError(Exception):
    """A blob store operation failed."""


class BlobNotFound(BlobStoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"no blob at key {key!r}")
        self.key = key


class BlobTooLarge(BlobStoreError):
    def __init__(self, key: str, max_bytes: int) -> None:
        super().__init__(f"blob {key!r} is larger than the limit of {max_bytes} bytes")
        self.key = key
        self.max_bytes = max_bytes


@dataclass(frozen=True)
class StoredBlob:
    key: str
    size_bytes: int
    sha256: str  # lowercase hex


class BlobStream(AsyncIterator[bytes]):
    """The bytes of one blob in chunks, each read in a worker thread.

    It closes itself at the end of the blob or on an error; a reader that stops early calls
    ``await stream.aclose()`` or uses ``async with`` (else the file or connection stays open until
    the stream is garbage-collected).
    """

    def __init__(self, read_chunk: Callable[[], bytes], close: Callable[[], None]) -> None:
        self._read_chunk = read_chunk
        self._close = close
        self._closed = False

    async def __anext__(self) -> bytes:
        if self._closed:
            raise StopAsyncIteration
        try:
            chunk = await asyncio.to_thread(self._read_chunk)
        except BaseException:
            await self.aclose()
            raise
        if not chunk:
            await self.aclose()
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await asyncio.to_thread(self._close)

    async def __aenter__(self) -> BlobStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class BlobStore(Protocol):
    """Where uploaded files live; see the module docstring for the behaviour both backends share."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def put(
        self, key: str, chunks: AsyncIterable[bytes], *, max_bytes: int, durable: bool = True
    ) -> StoredBlob:
        """Stores the stream under ``key``. ``durable=False`` skips flushing to disk (fsync) where the
        backend does that: for data that can be recomputed, a crash may lose it but never tears it."""
        ...

    async def put_bytes(self, key: str, data: bytes, *, durable: bool = True) -> StoredBlob:
        """Stores bytes already in memory under ``key`` (a small artifact): as :meth:`put`, in one
        blocking step instead of a stream."""
        ...

    async def read(self, key: str) -> bytes: ...

    async def read_stream(self, key: str) -> BlobStream: ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> bool: ...

    async def delete_prefix(self, prefix: str) -> int: ...

    async def presigned_url(self, key: str, expires: timedelta) -> str | None: ...


# --- the rules both backends apply ---------------------------------------------------------------


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid blob key, else raise ``ValueError`` naming the rule."""
    _check_path_text("blob key", key)
    if key.endswith("/"):
        raise ValueError(f"blob key {key!r} must not end with '/'")
    return key


def validate_prefix(prefix: str) -> str:
    """A prefix follows the key rules but may end with ``/``; it may not be empty."""
    _check_path_text("blob key prefix", prefix)
    return prefix


def _check_path_text(what: str, text: str) -> None:
    if not text:
        raise ValueError(f"{what} must not be empty")
    if len(text) > MAX_KEY_CHARS:
        raise ValueError(f"{what} is {len(text)} characters long; the limit is {MAX_KEY_CHARS}")
    if "\x00" in text:
        raise ValueError(f"{what} {text!r} must not contain a NUL character")
    if text.startswith("/"):
        raise ValueError(f"{what} {text!r} must not start with '/'")
    if not _KEY_CHARS.fullmatch(text):
        bad = "".join(sorted({c for c in text if not _KEY_CHARS.fullmatch(c)}))
        raise ValueError(f"{what} {text!r} may only contain A-Z a-z 0-9 . _ / - (found {bad!r})")
    if ".." in text:
        raise ValueError(f"{what} {text!r} must not contain '..'")
    segments = text.split("/")
    if text.endswith("/"):
        segments.pop()
    if any(segment in ("", ".") for segment in segments):
        raise ValueError(f"{what} {text!r} must not contain an empty or '.' segment ('//' or '/./')")
    longest = max(len(segment) for segment in segments)
    if longest > MAX_KEY_SEGMENT_CHARS:
        raise ValueError(
            f"{what} has a segment of {longest} characters between '/'; the limit is {MAX_KEY_SEGMENT_CHARS}"
        )


def check_max_bytes(max_bytes: int) -> None:
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be 0 or more, got {max_bytes}")


# --- configuration -----------------------------------------------------------------------------


def build_blob_store(url: str) -> BlobStore:
    """The blob store a URL names; the formats are in the module docstring."""
    # The backends import this module (the port), so they are imported here, when a URL asks for one;
    # the S3 client library is then loaded only by deployments that use S3.
    from knowsphere_ingestion.storage.filesystem import FilesystemBlobStore

    if not url:
        raise ValueError("blob store URL must not be empty")
    if "://" not in url:
        return FilesystemBlobStore(Path(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"file blob store URL must name a local path (file:///path), not host {parts.netloc!r}"
            )
        if parts.query or parts.fragment:
            raise ValueError("file blob store URL takes no query or fragment")
        path = unquote(parts.path)
        if not path or path == "/":
            raise ValueError("file blob store URL must name a folder other than '/'")
        return FilesystemBlobStore(Path(path))
    if scheme == "s3":
        from knowsphere_ingestion.storage.s3 import s3_blob_store_from_url

        return s3_blob_store_from_url(parts)
    raise ValueError(f"blob store URL scheme {scheme!r} is not supported; use a path, file:// or s3://")
