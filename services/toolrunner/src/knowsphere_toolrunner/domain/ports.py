"""The toolrunner's ports: the store of externalised results and artifacts, and the distiller.

Every read names the tenant and the user: a ref id or artifact id of anyone else reads as missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from knowsphere.toolrunner.v1.toolrunner_enums import ContentFormat
from knowsphere_toolrunner.domain.workspace import WorkspaceStore


@dataclass(frozen=True)
class StoredResult:
    """One externalised tool result (a row of ``tool_result_refs``)."""

    ref_id: str
    tenant_id: str
    user_id: str
    session_id: str
    turn_id: str
    tool_name: str
    content: str
    format: ContentFormat
    char_count: int
    summary: str
    distilled: bool
    degraded: bool
    create_time: datetime


@dataclass(frozen=True)
class StoredArtifact:
    """A file a tool produced (metadata; the bytes are stored beside it)."""

    artifact_id: str
    tenant_id: str
    user_id: str
    session_id: str
    turn_id: str
    tool_name: str
    file_name: str
    content_type: str
    size_bytes: int
    create_time: datetime


class ToolResultStore(Protocol):
    async def put_result(self, result: StoredResult) -> None:
        """Store a result; a ref id already stored is an error (ids are never reused)."""

    async def get_result(self, tenant_id: str, user_id: str, ref_id: str) -> StoredResult | None:
        """The result, only for the tenant and user that stored it; None otherwise."""

    async def get_result_page(
        self, tenant_id: str, user_id: str, ref_id: str, offset: int, length: int
    ) -> StoredResult | None:
        """As :meth:`get_result`, with ``content`` only the ``length`` characters from ``offset``
        (``char_count`` stays the whole length), read without loading the whole text."""

    async def put_artifact(self, artifact: StoredArtifact, data: bytes) -> None: ...

    async def get_artifact(
        self, tenant_id: str, user_id: str, artifact_id: str
    ) -> tuple[StoredArtifact, bytes] | None:
        """The artifact and its bytes, only for the tenant and user whose call produced it."""


class ToolStore(ToolResultStore, WorkspaceStore, Protocol):
    """The service's one store: results, artifacts and deep agents' workspaces."""


class DistillationFailed(Exception):
    """The distiller could not produce a summary (no model, model error, empty answer, time out)."""


class Distiller(Protocol):
    async def distil(self, text: str, *, target_chars: int, tool_name: str, language: str) -> str:
        """A summary of ``text`` of at most about ``target_chars`` characters keeping ids, names, numbers
        and conclusions; raises :class:`DistillationFailed`."""
