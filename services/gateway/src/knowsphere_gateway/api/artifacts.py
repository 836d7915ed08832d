"""Files that tools produced (a generated presentation, a skill script's output), downloaded from the
toolrunner's ``DownloadArtifact`` stream (``GET /api/v1/artifacts/{artifact_id}``).

Only the tenant and user whose turn produced a file can download it: the toolrunner answers anyone
else NOT_FOUND, a 404 like a file that never was. The first message of the stream (the file's name,
type and size) is read before the answer starts, so a refusal is a proper 404 and not a broken body;
the bytes then stream through as they arrive.
"""

import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_clients import ToolRunnerClient
from knowsphere_contracts.vocabulary import ARTIFACT_DOWNLOAD_PREFIX
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES, HttpError

FALLBACK_CONTENT_TYPE = "application/octet-stream"
# What an ASCII ``filename=`` may keep; everything else becomes "_" (the exact name is in filename*).
_UNSAFE_ASCII = re.compile(r"[^A-Za-z0-9._ -]")
_CONTENT_TYPE = re.compile(r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+$")


def content_disposition(file_name: str) -> str:
    """``attachment`` with an ASCII ``filename`` and the exact name as RFC 5987 ``filename*``."""
    name = "".join(ch for ch in file_name if ch.isprintable() and ch not in "/\\") or "download"
    ascii_name = _UNSAFE_ASCII.sub("_", name)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


def build_artifacts_router(toolrunner: ToolRunnerClient, caller: Callable[..., Caller]) -> APIRouter:
    router = APIRouter(prefix=ARTIFACT_DOWNLOAD_PREFIX, tags=["artifacts"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    @router.get(
        "/{artifact_id}",
        response_class=StreamingResponse,
        responses={
            200: {
                # Whatever type the tool produced (a .pptx deck, …); application/octet-stream when unknown.
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                "description": "the file's bytes",
            }
        },
    )
    async def download_artifact(artifact_id: str, who: Who) -> StreamingResponse:
        """A file a tool produced in one of the caller's turns (e.g. a generated .pptx), as an
        attachment with its name and type."""
        messages = aiter(toolrunner.download_artifact(pb.DownloadArtifactRequest(artifact_id=artifact_id)))
        with who.bound():
            first = await anext(messages, None)
        if first is None or first.WhichOneof("payload") != "artifact":
            raise HttpError(502, "bad_gateway", "the toolrunner sent no file description")
        artifact = first.artifact
        content_type = artifact.content_type if _CONTENT_TYPE.match(artifact.content_type) else ""

        async def body() -> AsyncIterator[bytes]:
            while True:
                with who.bound():
                    message = await anext(messages, None)
                if message is None:
                    return
                yield message.chunk

        headers = {
            "content-disposition": content_disposition(artifact.file_name),
            "x-content-type-options": "nosniff",
            "cache-control": "private, no-store",
        }
        if artifact.size_bytes > 0:
            headers["content-length"] = str(artifact.size_bytes)
        return StreamingResponse(body(), media_type=content_type or FALLBACK_CONTENT_TYPE, headers=headers)

    return router


__all__ = ["build_artifacts_router", "content_disposition"]
