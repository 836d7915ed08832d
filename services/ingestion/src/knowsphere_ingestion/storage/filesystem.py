"""The filesystem blob store: blobs as files under one folder, the embedded default for one machine.

A blob is the file ``root/<key>``. A put writes a temp file in the same folder (its name contains
``~``, which no key can, so it is never mistaken for a blob), fsyncs it, renames it over the key with
``os.replace`` and fsyncs the folders. Blocking I/O runs in worker threads, but for a small
non-durable ``put_bytes`` (an artifact that can be recomputed), which costs less than the thread hop.
A key cannot be both a blob and the folder of other blobs (``a`` and ``a/b``): such a put raises
:class:`BlobStoreError`; S3 allows both. The behaviour shared with S3 is described in ``storage.blobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
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

INLINE_WRITE_BYTES = 64 * 1024
"""A non-durable put of at most this many bytes is written on the calling thread (see put_bytes)."""
MAX_KNOWN_FOLDERS = 4096
"""Most folders a store remembers as existing (see ``FilesystemBlobStore._folders``)."""
TEMP_MARKER = "~"  # in every temp file's name, and in no valid key
_CREATE_FOLDER_ATTEMPTS = 3


class FilesystemBlobStore:
    """Blobs as files under ``root``: the embedded default, for one machine."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        # Folders this store created or found, so a put into one needs no mkdir (a slow system call on
        # some filesystems), each with whether its entry in its parent is known to be on disk (fsynced).
        # Forgotten when this store removes a folder; a folder another process removed is found
        # missing at the next put, which then creates it again.
        self._folders: dict[Path, bool] = {self.root: True}

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

    async def put_bytes(self, key: str, data: bytes, *, durable: bool = True) -> StoredBlob:
        final = self._path(key)
        if not durable and len(data) <= INLINE_WRITE_BYTES:
            # Into the page cache, no fsync: cheaper than the hop to a worker thread and back.
            return self._write_all(key, final, data, durable)
        return await asyncio.to_thread(self._write_all, key, final, data, durable)

    def _write_all(self, key: str, final: Path, data: bytes, durable: bool) -> StoredBlob:
        """Writes ``data`` to ``final`` as :meth:`put` does, in the calling thread."""
        writer, temp = self._create_temp(key, final)
        try:
            writer.write(data)
            self._publish(key, writer, temp, final, durable)
        except BaseException:
            self._discard(writer, temp)
            raise
        return StoredBlob(key=key, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

    def _make_folders(self, folder: Path) -> None:
        """Creates ``folder`` and its missing parents (or finds them)."""
        if folder in self._folders:
            return
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise NotADirectoryError(f"{folder} is a file") from None
        except FileNotFoundError:
            if folder.parent in self._folders:
                self._forget_folders(folder.parent)  # remembered, but removed meanwhile
            self._make_folders(folder.parent)
            with contextlib.suppress(FileExistsError):  # made meanwhile by a concurrent put
                folder.mkdir()
        if len(self._folders) >= MAX_KNOWN_FOLDERS:
            self._folders = {self.root: True}  # bounded: start over (costs a few mkdir and fsync calls)
        self._folders[folder] = False

    def _sync_folder_entries(self, folder: Path) -> None:
        """fsyncs what makes ``folder`` reachable after a crash: the entry of each folder on its way from
        the root, once (entries already on disk are skipped)."""
        while folder != self.root and self.root in folder.parents and not self._folders.get(folder, False):
            self._fsync_folder(folder.parent)
            self._folders[folder] = True
            folder = folder.parent

    def _create_temp(self, key: str, final: Path) -> tuple[LockedWriter, Path]:
        """A temp file beside ``final``, in its folder (made when missing)."""
        for attempt in range(_CREATE_FOLDER_ATTEMPTS):
            try:
                self._make_folders(final.parent)
            except (FileExistsError, NotADirectoryError) as exc:
                raise BlobStoreError(f"blob key {key!r} runs through an existing blob: {exc}") from exc
            try:
                fd, name = tempfile.mkstemp(dir=final.parent, prefix=".tmp-", suffix=TEMP_MARKER)
            except FileNotFoundError:
                # The folder was removed (a concurrent delete, maybe by another process) after it was
                # made or remembered: forget it and make it again.
                self._forget_folders(final.parent)
                if attempt == _CREATE_FOLDER_ATTEMPTS - 1:
                    raise
                continue
            except OSError:
                self._prune(final.parent)
                raise
            return LockedWriter(os.fdopen(fd, "wb")), Path(name)
        raise AssertionError("unreachable")

    def _publish(
        self,
        key: str,
        writer: LockedWriter,
        temp: Path,
        final: Path,
        durable: bool = True,
    ) -> None:
        writer.finish(durable)
        writer.close()
        try:
            os.replace(temp, final)
        except IsADirectoryError as exc:
            raise BlobStoreError(f"blob key {key!r} is a folder of other blobs") from exc
        if durable:
            self._fsync_folder(final.parent)  # the file's entry
            self._sync_folder_entries(final.parent)

    def _discard(self, writer: LockedWriter, temp: Path) -> None:
        writer.close()
        temp.unlink(missing_ok=True)
        self._prune(temp.parent)

    def _fsync_folders(self, folder: Path) -> None:
        """fsync the folder and every parent up to the root, so entries removed below survive a crash."""
        while True:
            self._fsync_folder(folder)
            if folder == self.root or self.root not in folder.parents:
                return
            folder = folder.parent

    @staticmethod
    def _fsync_folder(folder: Path) -> None:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _forget_folders(self, folder: Path) -> None:
        """Forgets ``folder`` and every folder below it."""
        self._folders = {f: s for f, s in self._folders.items() if f != folder and folder not in f.parents}
        self._folders[self.root] = True

    def _prune(self, folder: Path) -> None:
        """Remove empty folders from ``folder`` up to, not including, the root."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone): the folders above are not empty either
                return
            self._forget_folders(folder)
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
