"""The S3 blob store: blobs as objects of one bucket on an S3-compatible server (MinIO, AWS S3).

It talks through the ``minio`` client, which is synchronous, so every call runs in a worker thread. A
put first spools the stream into a ``SpooledTemporaryFile`` (memory up to ``SPOOL_MEMORY_BYTES``, then
an unnamed temp file that vanishes when closed) while hashing it, so an over-limit or failing stream
never reaches the server; then it uploads with a known length, as one PUT up to
``S3_PART_SIZE_BYTES`` and as a multipart upload above, which the client aborts on failure. The
SHA-256 is stored as the object's ``x-amz-meta-sha256``. The behaviour shared with the filesystem
store, and the ``s3://`` URL format, are described in ``storage.blobs``.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import tempfile
from collections.abc import AsyncIterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import SplitResult, parse_qsl, unquote

import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error

from knowsphere_ingestion.storage.blobs import (
    READ_CHUNK_BYTES,
    BlobNotFound,
    BlobStoreError,
    BlobStream,
    StoredBlob,
    check_max_bytes,
    validate_key,
    validate_prefix,
)
from knowsphere_ingestion.storage.transfer import LockedWriter, drain

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

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_NOT_FOUND = frozenset({"NoSuchKey", "NoSuchObject"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


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
        check_max_bytes(max_bytes)
        spool = LockedWriter(
            tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES, dir=self._spool_dir_name)  # noqa: SIM115
        )
        try:
            size, sha256 = await drain(key, chunks, spool.write, max_bytes)
            await asyncio.to_thread(self._upload, key, cast(BinaryIO, spool.file), size, sha256)
        finally:
            await asyncio.to_thread(spool.close)
        return StoredBlob(key=key, size_bytes=size, sha256=sha256)

    async def put_bytes(self, key: str, data: bytes, *, durable: bool = True) -> StoredBlob:
        validate_key(key)
        sha256 = hashlib.sha256(data).hexdigest()
        await asyncio.to_thread(self._upload, key, io.BytesIO(data), len(data), sha256)
        return StoredBlob(key=key, size_bytes=len(data), sha256=sha256)

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


def s3_blob_store_from_url(parts: SplitResult) -> S3BlobStore:
    """The S3 store of an ``s3://`` URL (split); ValueError naming what is wrong with it."""
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
