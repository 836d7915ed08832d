"""The object store of uploaded files ("blobs"): one interface, a filesystem default and S3 for production.

A blob is an immutable sequence of bytes under a key such as ``tenant/kb/document/original.pdf``.
Both backends behave alike, and one behaviour suite (``tests/test_blob_store.py``) runs against both:

- ``put`` streams the bytes in, computing size and SHA-256 as they pass, and never holds the whole
  file in memory. More than ``max_bytes`` raises :class:`BlobTooLarge`; that, a failing stream or a
  cancelled put leave nothing behind (no object, no temp file, no empty folder; a put
  cancelled after its stream ended, while publishing or uploading, may still complete). A put is
  atomic: a reader sees the previous blob or the complete new one, never a part.
- ``read`` returns the whole blob (parsers need bytes); ``read_stream`` returns a
  :class:`BlobStream` that reads it in chunks. Both raise :class:`BlobNotFound`.
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
  :class:`FilesystemBlobStore` under that folder.
- ``s3://ACCESS_KEY:SECRET_KEY@host:port/bucket?secure=false&region=us-east-1``: an
  :class:`S3BlobStore` (MinIO, AWS S3 or any S3-compatible server). The credentials are
  percent-encoded (a ``/`` in a secret is ``%2F``); ``secure`` (``true``/``false``, default
  ``true``) chooses HTTPS; ``region`` is optional (without it the client asks the server). The
  bucket is created by ``start()`` when missing.

Filesystem: a blob is the file ``root/<key>``. A put writes a temp file in the same folder (its name
contains ``~``, which no key can, so it is never mistaken for a blob), fsyncs it, renames it over
the key with ``os.replace`` and fsyncs the folders. All blocking I/O runs in worker threads. A key
cannot be both a blob and the folder of other blobs (``a`` and ``a/b``): such a put raises
:class:`BlobStoreError`; S3 allows both.

S3, through the ``minio`` client (synchronous, so every call runs in a worker thread): a put first
spools the stream into a ``SpooledTemporaryFile`` (memory up to ``SPOOL_MEMORY_BYTES``, then an
unnamed temp file that vanishes when closed) while hashing it, so an over-limit or failing stream
never reaches the server; then it uploads with a known length, as one PUT up to
``S3_PART_SIZE_BYTES`` and as a multipart upload above, which the client aborts on failure. The
SHA-256 is stored as the object's ``x-amz-meta-sha256``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Any, BinaryIO, Protocol, cast
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error

MAX_KEY_CHARS = 512
MAX_KEY_SEGMENT_CHARS = 255  # the file name limit of common filesystems
# Stream bytes are gathered up to this size before one write (and hash) in a worker thread.
WRITE_BUFFER_BYTES = 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024
# S3 puts keep up to this much of an upload in memory before spooling it to a temp file.
SPOOL_MEMORY_BYTES = 8 * 1024 * 1024
# One PUT up to this size, multipart above; S3 parts are at least 5 MiB.
S3_PART_SIZE_BYTES = 16 * 1024 * 1024
S3_PARALLEL_PART_UPLOADS = 3
S3_MAX_CONNECTIONS = 10
S3_CONNECT_TIMEOUT_SECONDS = 10.0
S3_READ_TIMEOUT_SECONDS = 300.0
S3_RETRIES = 5
S3_RETRY_BACKOFF_SECONDS = 0.2
# SigV4 presigned URLs live from 1 second to 7 days.
MIN_PRESIGN_EXPIRY = timedelta(seconds=1)
MAX_PRESIGN_EXPIRY = timedelta(days=7)
SHA256_METADATA = "sha256"

TEMP_MARKER = "~"  # in every temp file's name, and in no valid key
_CREATE_FOLDER_ATTEMPTS = 3
_KEY_CHARS = re.compile(r"[A-Za-z0-9._/-]*")
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_NOT_FOUND = frozenset({"NoSuchKey", "NoSuchObject"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


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

    async def read(self, key: str) -> bytes: ...

    async def read_stream(self, key: str) -> BlobStream: ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> bool: ...

    async def delete_prefix(self, prefix: str) -> int: ...

    async def presigned_url(self, key: str, expires: timedelta) -> str | None: ...


# --- keys and streams, shared by both backends --------------------------------------------------


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


def _check_max_bytes(max_bytes: int) -> None:
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be 0 or more, got {max_bytes}")


class _LockedWriter:
    """Writes from worker threads; the lock makes a close wait for a write still running in a thread
    whose put was cancelled."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self._lock = threading.Lock()

    def write(self, data: bytes | bytearray) -> None:
        with self._lock:
            self.file.write(data)

    def finish(self, durable: bool = True) -> None:
        """Flush and (when durable) fsync before the file is published."""
        with self._lock:
            self.file.flush()
            if durable:
                os.fsync(self.file.fileno())

    def close(self) -> None:
        with self._lock:
            self.file.close()


def _hash_and_write(sha: Any, write: Callable[[bytearray], None], data: bytearray) -> None:
    sha.update(data)
    write(data)


async def _drain(
    key: str, chunks: AsyncIterable[bytes], write: Callable[[bytearray], None], max_bytes: int
) -> tuple[int, str]:
    """Copy the stream through ``write`` in buffered thread calls; return (size, sha256 hex).

    Raises :class:`BlobTooLarge` as soon as the total passes ``max_bytes``, before writing the excess.
    """
    sha = hashlib.sha256()
    size = 0
    buffer = bytearray()
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise BlobTooLarge(key, max_bytes)
        buffer += chunk
        if len(buffer) >= WRITE_BUFFER_BYTES:
            data, buffer = buffer, bytearray()
            await asyncio.to_thread(_hash_and_write, sha, write, data)
    if buffer:
        await asyncio.to_thread(_hash_and_write, sha, write, buffer)
    return size, sha.hexdigest()


# --- filesystem --------------------------------------------------------------------------------


class FilesystemBlobStore:
    """Blobs as files under ``root``: the embedded default, for one machine."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()

    async def start(self) -> None:
        await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True)

    async def close(self) -> None:
        return None

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    async def put(
        self, key: str, chunks: AsyncIterable[bytes], *, max_bytes: int, durable: bool = True
    ) -> StoredBlob:
        final = self._path(key)
        _check_max_bytes(max_bytes)
        writer, temp = await asyncio.to_thread(self._create_temp, key, final)
        try:
            size, sha256 = await _drain(key, chunks, writer.write, max_bytes)
            await asyncio.to_thread(self._publish, key, writer, temp, final, durable)
        except BaseException:
            # A thread keeps running when its awaiting task is cancelled, so this cleanup completes.
            await asyncio.to_thread(self._discard, writer, temp)
            raise
        return StoredBlob(key=key, size_bytes=size, sha256=sha256)

    def _create_temp(self, key: str, final: Path) -> tuple[_LockedWriter, Path]:
        for attempt in range(_CREATE_FOLDER_ATTEMPTS):
            try:
                final.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:
                raise BlobStoreError(f"blob key {key!r} runs through an existing blob: {exc}") from exc
            try:
                fd, name = tempfile.mkstemp(dir=final.parent, prefix=".tmp-", suffix=TEMP_MARKER)
            except FileNotFoundError:
                # A concurrent delete removed the folder, empty, between mkdir and mkstemp.
                if attempt == _CREATE_FOLDER_ATTEMPTS - 1:
                    raise
                continue
            except OSError:
                self._prune(final.parent)
                raise
            return _LockedWriter(os.fdopen(fd, "wb")), Path(name)
        raise AssertionError("unreachable")

    def _publish(
        self, key: str, writer: _LockedWriter, temp: Path, final: Path, durable: bool = True
    ) -> None:
        writer.finish(durable)
        writer.close()
        try:
            os.replace(temp, final)
        except IsADirectoryError as exc:
            raise BlobStoreError(f"blob key {key!r} is a folder of other blobs") from exc
        if durable:
            self._fsync_folders(final.parent)

    def _discard(self, writer: _LockedWriter, temp: Path) -> None:
        writer.close()
        temp.unlink(missing_ok=True)
        self._prune(temp.parent)

    def _fsync_folders(self, folder: Path) -> None:
        """fsync the folder and every parent up to the root, so new entries and folders survive a crash."""
        while True:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if folder == self.root or self.root not in folder.parents:
                return
            folder = folder.parent

    def _prune(self, folder: Path) -> None:
        """Remove empty folders from ``folder`` up to, not including, the root."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone): the folders above are not empty either
                return
            folder = folder.parent

    async def read(self, key: str) -> bytes:
        path = self._path(key)
        with self._not_found(key):
            return await asyncio.to_thread(path.read_bytes)

    async def read_stream(self, key: str) -> BlobStream:
        path = self._path(key)
        with self._not_found(key):
            file = await asyncio.to_thread(path.open, "rb")
        return BlobStream(lambda: file.read(READ_CHUNK_BYTES), file.close)

    @staticmethod
    @contextmanager
    def _not_found(key: str) -> Iterator[None]:
        try:
            yield
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise BlobNotFound(key) from exc

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._path(key).is_file)

    async def delete(self, key: str) -> bool:
        return await asyncio.to_thread(self._delete, self._path(key))

    def _delete(self, path: Path) -> bool:
        try:
            path.unlink()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        self._fsync_folders(path.parent)
        self._prune(path.parent)
        return True

    async def delete_prefix(self, prefix: str) -> int:
        return await asyncio.to_thread(self._delete_prefix, validate_prefix(prefix))

    def _delete_prefix(self, prefix: str) -> int:
        folder_part, _, _ = prefix.rpartition("/")
        base = self.root.joinpath(*folder_part.split("/")) if folder_part else self.root
        emptied: set[Path] = set()
        deleted = 0
        for folder, _dirs, files in os.walk(base):
            for name in files:
                path = Path(folder, name)
                key = path.relative_to(self.root).as_posix()
                if TEMP_MARKER in name or not key.startswith(prefix):
                    continue
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                deleted += 1
                emptied.add(path.parent)
        for folder_path in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
            if folder_path.exists():
                self._fsync_folders(folder_path)
            self._prune(folder_path)
        return deleted

    async def presigned_url(self, key: str, expires: timedelta) -> str | None:
        validate_key(key)
        return None


# --- S3 ----------------------------------------------------------------------------------------


class S3BlobStore:
    """Blobs as objects of one bucket on an S3-compatible server (MinIO, AWS S3), through ``minio``."""

    def __init__(
        self,
        endpoint: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        *,
        secure: bool = True,
        region: str | None = None,
        spool_dir: Path | None = None,
    ) -> None:
        if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
            raise ValueError(
                f"S3 bucket name {bucket!r} must be 3 to 63 characters of a-z 0-9 . - "
                "and start and end with a letter or digit"
            )
        self.bucket = bucket
        self._spool_dir_name = None if spool_dir is None else str(spool_dir)
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=S3_CONNECT_TIMEOUT_SECONDS, read=S3_READ_TIMEOUT_SECONDS),
            maxsize=S3_MAX_CONNECTIONS,
            cert_reqs="CERT_REQUIRED",
            retries=urllib3.Retry(
                total=S3_RETRIES,
                backoff_factor=S3_RETRY_BACKOFF_SECONDS,
                status_forcelist=[500, 502, 503, 504],
            ),
        )
        self._client = Minio(
            endpoint,
            access_key=access_key,
            secret_key=secret_key,
            secure=secure,
            region=region,
            http_client=self._http,
        )

    async def start(self) -> None:
        await asyncio.to_thread(self._ensure_bucket)

    def _ensure_bucket(self) -> None:
        with self._errors("create bucket", None):
            if self._client.bucket_exists(self.bucket):
                return
            try:
                self._client.make_bucket(self.bucket)
            except S3Error as exc:
                if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

    async def close(self) -> None:
        self._http.clear()

    @contextmanager
    def _errors(self, action: str, key: str | None, *, not_found: bool = True) -> Iterator[None]:
        """Turn client errors into ours: a missing object into BlobNotFound, the rest BlobStoreError."""
        try:
            yield
        except S3Error as exc:
            if not_found and key is not None and exc.code in _S3_NOT_FOUND:
                raise BlobNotFound(key) from exc
            raise BlobStoreError(self._describe(action, key, exc)) from exc
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            raise BlobStoreError(self._describe(action, key, exc)) from exc

    def _describe(self, action: str, key: str | None, exc: BaseException) -> str:
        where = f"{key!r} in bucket {self.bucket!r}" if key is not None else f"bucket {self.bucket!r}"
        return f"S3 {action} of {where} failed: {exc}"

    async def put(
        self, key: str, chunks: AsyncIterable[bytes], *, max_bytes: int, durable: bool = True
    ) -> StoredBlob:
        validate_key(key)  # the server decides durability; ``durable`` changes nothing here
        _check_max_bytes(max_bytes)
        spool = _LockedWriter(
            tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES, dir=self._spool_dir_name)  # noqa: SIM115
        )
        try:
            size, sha256 = await _drain(key, chunks, spool.write, max_bytes)
            await asyncio.to_thread(self._upload, key, cast(BinaryIO, spool.file), size, sha256)
        finally:
            await asyncio.to_thread(spool.close)
        return StoredBlob(key=key, size_bytes=size, sha256=sha256)

    def _upload(self, key: str, data: BinaryIO, size: int, sha256: str) -> None:
        data.seek(0)
        with self._errors("put", key, not_found=False):
            self._client.put_object(
                self.bucket,
                key,
                data,
                length=size,
                part_size=S3_PART_SIZE_BYTES,
                num_parallel_uploads=S3_PARALLEL_PART_UPLOADS,
                metadata={SHA256_METADATA: sha256},
            )

    async def read(self, key: str) -> bytes:
        validate_key(key)
        return await asyncio.to_thread(self._read_all, key)

    def _read_all(self, key: str) -> bytes:
        response = self._get(key)
        try:
            with self._errors("read", key):
                return response.read()
        finally:
            response.close()
            response.release_conn()

    def _get(self, key: str) -> Any:
        with self._errors("read", key):
            return self._client.get_object(self.bucket, key)

    async def read_stream(self, key: str) -> BlobStream:
        validate_key(key)
        response = await asyncio.to_thread(self._get, key)

        def read_chunk() -> bytes:
            with self._errors("read", key):
                chunk: bytes = response.read(READ_CHUNK_BYTES)
                return chunk

        def close() -> None:
            response.close()
            response.release_conn()

        return BlobStream(read_chunk, close)

    async def exists(self, key: str) -> bool:
        validate_key(key)
        return await asyncio.to_thread(self._exists, key)

    def _exists(self, key: str) -> bool:
        try:
            with self._errors("stat", key):
                self._client.stat_object(self.bucket, key)
        except BlobNotFound:
            return False
        return True

    async def delete(self, key: str) -> bool:
        validate_key(key)
        return await asyncio.to_thread(self._delete, key)

    def _delete(self, key: str) -> bool:
        # S3 deletes succeed whether or not the object exists; ask first to answer True or False.
        if not self._exists(key):
            return False
        with self._errors("delete", key):
            self._client.remove_object(self.bucket, key)
        return True

    async def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix)
        return await asyncio.to_thread(self._delete_prefix, prefix)

    def _delete_prefix(self, prefix: str) -> int:
        with self._errors("delete prefix", prefix, not_found=False):
            names = [
                obj.object_name
                for obj in self._client.list_objects(self.bucket, prefix=prefix, recursive=True)
                if obj.object_name is not None
            ]
            if not names:
                return 0
            errors = list(self._client.remove_objects(self.bucket, [DeleteObject(name) for name in names]))
        if errors:
            first = errors[0]
            raise BlobStoreError(
                f"S3 delete prefix {prefix!r} in bucket {self.bucket!r} failed for {len(errors)} of "
                f"{len(names)} objects, first {first.name!r}: {first.code} {first.message}"
            )
        return len(names)

    async def presigned_url(self, key: str, expires: timedelta) -> str | None:
        validate_key(key)
        if not MIN_PRESIGN_EXPIRY <= expires <= MAX_PRESIGN_EXPIRY:
            raise ValueError(
                f"presigned URL expiry must be from {MIN_PRESIGN_EXPIRY} to {MAX_PRESIGN_EXPIRY}, "
                f"got {expires}"
            )
        return await asyncio.to_thread(self._presign, key, expires)

    def _presign(self, key: str, expires: timedelta) -> str:
        with self._errors("presign", key):
            url: str = self._client.presigned_get_object(self.bucket, key, expires=expires)
            return url


# --- configuration -----------------------------------------------------------------------------


def build_blob_store(url: str) -> BlobStore:
    """The blob store a URL names; the formats are in the module docstring."""
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
        return _s3_from_url(parts)
    raise ValueError(f"blob store URL scheme {scheme!r} is not supported; use a path, file:// or s3://")


def _s3_from_url(parts: SplitResult) -> S3BlobStore:
    # Messages never repeat the URL: it carries the secret key.
    if parts.username is None or parts.password is None:
        raise ValueError(
            "s3 blob store URL must carry credentials: s3://ACCESS_KEY:SECRET_KEY@host:port/bucket"
        )
    endpoint = parts.netloc.rpartition("@")[2]
    if not parts.hostname:
        raise ValueError("s3 blob store URL must name a host")
    _ = parts.port  # raises ValueError on a port that is not a number in range
    bucket = parts.path.strip("/")
    if not bucket or "/" in bucket:
        raise ValueError("s3 blob store URL path must be exactly one bucket name: s3://...@host:port/bucket")
    if parts.fragment:
        raise ValueError("s3 blob store URL takes no fragment")
    secure = True
    region: str | None = None
    seen: set[str] = set()
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in seen:
            raise ValueError(f"s3 blob store URL parameter {name!r} is given twice")
        seen.add(name)
        if name == "secure":
            if value.lower() in _TRUE:
                secure = True
            elif value.lower() in _FALSE:
                secure = False
            else:
                raise ValueError(f"s3 blob store URL parameter secure must be true or false, got {value!r}")
        elif name == "region":
            if not value:
                raise ValueError("s3 blob store URL parameter region must not be empty")
            region = value
        else:
            raise ValueError(
                f"s3 blob store URL parameter {name!r} is unknown; the parameters are secure, region"
            )
    return S3BlobStore(
        endpoint,
        unquote(parts.username),
        unquote(parts.password),
        bucket,
        secure=secure,
        region=region,
    )
