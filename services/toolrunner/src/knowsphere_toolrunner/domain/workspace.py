"""A deep agent's workspace: the files it writes and reads while it works on a session's questions.

A workspace belongs to one session of one user of one tenant; every read and write names all three, so
another caller's workspace reads as empty. It lives in the toolrunner's store (SQLite by default,
PostgreSQL in production), so any replica sees what another wrote and a restart loses nothing, and a
skill script run by the same agent finds the files in ``/workspace/input`` and adds what it writes to
``/workspace/output`` back under ``output/``.

Paths are relative, ``/``-separated, without ``.``/``..`` segments, empty segments, backslashes or
control characters (``/workspace/notes.md`` and ``notes.md`` name the same file). Limits — the size
of one file, the number of files and their total size — are checked in the same transaction as the
write, so concurrent writes cannot pass them together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, Field

KIB = 1024
MIB = 1024 * KIB
ROOT = "/workspace/"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class WorkspaceLimits(BaseModel):
    max_file_bytes: int = Field(default=1 * MIB, gt=0, description="one file")
    max_files: int = Field(
        default=100,
        gt=0,
        description="files in one session's workspace (a skill script gets at most 100 inputs)",
    )
    max_total_bytes: int = Field(default=20 * MIB, gt=0, description="all files of one workspace")
    max_path_chars: int = Field(default=255, gt=0)


class WorkspaceErrorCode(StrEnum):
    INVALID_PATH = "invalid_path"
    TOO_LARGE = "too_large"
    FULL = "full"
    NOT_FOUND = "not_found"


class WorkspaceError(Exception):
    def __init__(self, code: WorkspaceErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class WorkspaceKey:
    """Whose workspace: the session of one user of one tenant."""

    tenant_id: str
    user_id: str
    session_id: str


@dataclass(frozen=True)
class WorkspaceEntry:
    path: str
    size_bytes: int
    update_time: datetime


class WorkspaceStore(Protocol):
    async def list_files(self, key: WorkspaceKey) -> list[WorkspaceEntry]:
        """The workspace's files by path."""
        ...

    async def read_file(self, key: WorkspaceKey, path: str) -> bytes | None: ...

    async def write_file(self, key: WorkspaceKey, path: str, data: bytes, limits: WorkspaceLimits) -> None:
        """Create or replace; raises :class:`WorkspaceError` (``FULL``) when the workspace would hold more
        files or bytes than ``limits`` allow."""
        ...


def normalise_path(path: str, limits: WorkspaceLimits) -> str:
    """The workspace-relative form of ``path``, or :class:`WorkspaceError` saying what is wrong."""
    text = path.strip()
    if text.startswith(ROOT):
        text = text[len(ROOT) :]
    text = text.lstrip("/")
    if not text:
        raise WorkspaceError(
            WorkspaceErrorCode.INVALID_PATH, "path: empty; name a file such as notes/plan.md"
        )
    if "\\" in text or _CONTROL.search(text):
        raise WorkspaceError(
            WorkspaceErrorCode.INVALID_PATH, "path: backslashes and control characters are not allowed"
        )
    parts = text.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WorkspaceError(
            WorkspaceErrorCode.INVALID_PATH,
            f"path: {path!r} has an empty, '.' or '..' segment; paths stay inside the workspace",
        )
    if len(text) > limits.max_path_chars:
        raise WorkspaceError(
            WorkspaceErrorCode.INVALID_PATH, f"path: longer than {limits.max_path_chars} characters"
        )
    return text


def check_size(data: bytes, limits: WorkspaceLimits) -> None:
    if len(data) > limits.max_file_bytes:
        raise WorkspaceError(
            WorkspaceErrorCode.TOO_LARGE,
            f"content: {len(data)} bytes is more than a workspace file may hold ({limits.max_file_bytes})",
        )


def full_message(files: int, total: int, limits: WorkspaceLimits) -> str:
    return (
        f"the workspace is full: {files} files and {total} bytes after this write, at most "
        f"{limits.max_files} files and {limits.max_total_bytes} bytes"
    )


__all__ = [
    "WorkspaceEntry",
    "WorkspaceError",
    "WorkspaceErrorCode",
    "WorkspaceKey",
    "WorkspaceLimits",
    "WorkspaceStore",
    "check_size",
    "full_message",
    "normalise_path",
]
