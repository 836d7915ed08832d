"""Storing a file a tool or a skill script produced, as an artifact its caller downloads."""

from __future__ import annotations

import mimetypes
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from knowsphere_toolrunner.domain.ports import StoredArtifact, ToolResultStore
from knowsphere_toolrunner.domain.tools.base import Artifact

ARTIFACT_PREFIX = "art_"
DEFAULT_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Owner:
    """Whose call produced a file: only they download it."""

    tenant_id: str
    user_id: str
    session_id: str
    turn_id: str


def content_type_of(file_name: str) -> str:
    guessed, _ = mimetypes.guess_type(file_name, strict=False)
    return guessed or DEFAULT_CONTENT_TYPE


async def save_artifact(
    store: ToolResultStore, owner: Owner, tool_name: str, file_name: str, data: bytes, content_type: str = ""
) -> Artifact:
    artifact = Artifact(
        artifact_id=f"{ARTIFACT_PREFIX}{uuid.uuid4().hex}",
        file_name=file_name,
        content_type=content_type or content_type_of(file_name),
        size_bytes=len(data),
    )
    await store.put_artifact(
        StoredArtifact(
            artifact_id=artifact.artifact_id,
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            session_id=owner.session_id,
            turn_id=owner.turn_id,
            tool_name=tool_name,
            file_name=artifact.file_name,
            content_type=artifact.content_type,
            size_bytes=artifact.size_bytes,
            create_time=datetime.now(UTC),
        ),
        data,
    )
    return artifact
