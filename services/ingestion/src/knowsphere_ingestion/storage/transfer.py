"""Copying an upload stream into a file while hashing it, for both blob store backends.

The filesystem store writes into a temp file beside the key, the S3 store into a spool file before the
upload; either way the stream is gathered into buffers of ``WRITE_BUFFER_BYTES`` and each buffer is
hashed and written in a worker thread, so the event loop never blocks on disk and the whole file is
never in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import AsyncIterable, Callable
from typing import IO, Any

from knowsphere_ingestion.storage.blobs import BlobTooLarge

# Stream bytes are gathered up to this size before one write (and hash) in a worker thread.
WRITE_BUFFER_BYTES = 1024 * 1024


class LockedWriter:
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


async def drain(
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
