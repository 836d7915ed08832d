"""The filesystem blob store: blobs as files under one folder, the embedded default for one machine.

A blob is the file ``root/<key>``. A put writes a temp file in the same folder (its name contains
``~``, which no key can, so it is never mistaken for a blob), fsyncs it, renames it over the key with
``os.replace`` and fsyncs the folders. All blocking I/O runs in worker threads. A key cannot be both a
blob and the folder of other blobs (``a`` and ``a/b``): such a put raises :class:`BlobStoreError`;
S3 allows both. The behaviour shared with S3 is described in ``storage.blobs``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

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

TEMP_MARKER = "~"  # in every temp file's name, and in no valid key
_CREATE_FOLDER_ATTEMPTS = 3


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
        check_max_bytes(max_bytes)
        writer, temp = await asyncio.to_thread(self._create_temp, key, final)
        try:
            size, sha256 = await drain(key, chunks, writer.write, max_bytes)
            await asyncio.to_thread(self._publish, key, writer, temp, final, durable)
        except BaseException:
            # A thread keeps running when its awaiting task is cancelled, so this cleanup completes.
            await asyncio.to_thread(self._discard, writer, temp)
            raise
        return StoredBlob(key=key, size_bytes=size, sha256=sha256)

    def _create_temp(self, key: str, final: Path) -> tuple[LockedWriter, Path]:
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
            return LockedWriter(os.fdopen(fd, "wb")), Path(name)
        raise AssertionError("unreachable")

    def _publish(self, key: str, writer: LockedWriter, temp: Path, final: Path, durable: bool = True) -> None:
        writer.finish(durable)
        writer.close()
        try:
            os.replace(temp, final)
        except IsADirectoryError as exc:
            raise BlobStoreError(f"blob key {key!r} is a folder of other blobs") from exc
        if durable:
            self._fsync_folders(final.parent)

    def _discard(self, writer: LockedWriter, temp: Path) -> None:
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
