"""The workspace tools of a deep agent: list, read, write and edit the files of the session's
workspace (:mod:`knowsphere_toolrunner.domain.workspace`). Offered only to an agent that works in a
workspace (``ToolContext.workspace``; the conversation asks for it for deep agents).

The files are text the model writes (notes, drafts, data for a skill script); a file a skill script
wrote that is not UTF-8 is listed but not read here. Every call names the caller's tenant, user and
session: another session's workspace reads as empty.
"""

from __future__ import annotations

from typing import Any

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import (
    BadArguments,
    Needs,
    NothingFound,
    ToolContext,
    ToolOutput,
    ToolProblem,
    ToolSpec,
)
from knowsphere_toolrunner.domain.workspace import (
    WorkspaceError,
    WorkspaceErrorCode,
    WorkspaceKey,
    WorkspaceLimits,
    WorkspaceStore,
    check_size,
    normalise_path,
)

DEFAULT_READ_LINES = 400
MAX_READ_LINES = 2000
_PATH = {
    "type": "string",
    "minLength": 1,
    "maxLength": 300,
    "description": "File path in the workspace, e.g. notes/findings.md.",
}


def _spec(
    name: str, display: str, description: str, properties: dict[str, Any], required: list[str]
) -> ToolSpec:
    return ToolSpec(
        name=name,
        display_name=display,
        description=description,
        parameters={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        category=ToolCategory.RUNTIME,
        selectable=False,
        needs=frozenset({Needs.WORKSPACE}),
    )


def key_of(context: ToolContext) -> WorkspaceKey:
    return WorkspaceKey(context.tenant_id, context.user_id, context.session_id)


def problem(error: WorkspaceError) -> ToolProblem:
    if error.code == WorkspaceErrorCode.NOT_FOUND:
        return NothingFound(str(error))
    if error.code in (WorkspaceErrorCode.INVALID_PATH, WorkspaceErrorCode.TOO_LARGE):
        return BadArguments(str(error))
    return ToolProblem(str(error))


class _WorkspaceTool:
    def __init__(self, store: WorkspaceStore, limits: WorkspaceLimits) -> None:
        self._store = store
        self._limits = limits

    def _path(self, arguments: dict[str, Any]) -> str:
        try:
            return normalise_path(arguments["path"], self._limits)
        except WorkspaceError as error:
            raise problem(error) from None

    async def _read_text(self, context: ToolContext, path: str) -> str:
        data = await self._store.read_file(key_of(context), path)
        if data is None:
            raise NothingFound(f"path: no file {path!r} in the workspace; workspace_ls lists the files")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolProblem(
                f"{path} is not a text file ({len(data)} bytes); a skill script can use it, "
                "it is not read here"
            ) from None

    async def _write(self, context: ToolContext, path: str, content: str) -> int:
        data = content.encode("utf-8")
        try:
            check_size(data, self._limits)
            await self._store.write_file(key_of(context), path, data, self._limits)
        except WorkspaceError as error:
            raise problem(error) from None
        return len(data)


class WorkspaceList(_WorkspaceTool):
    spec = _spec(
        "workspace_ls",
        "List workspace files",
        "List the files in your workspace (paths and sizes). Files skill scripts wrote are under output/.",
        {},
        [],
    )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        entries = await self._store.list_files(key_of(context))
        return ToolOutput(
            {
                "files": [{"path": e.path, "size_bytes": e.size_bytes} for e in entries],
                "limits": {
                    "max_files": self._limits.max_files,
                    "max_total_bytes": self._limits.max_total_bytes,
                },
            }
        )


class WorkspaceRead(_WorkspaceTool):
    spec = _spec(
        "workspace_read",
        "Read workspace file",
        "Read a text file of your workspace, numbered lines from offset (0-based) for at most limit lines.",
        {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 0, "description": "First line, 0-based."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_READ_LINES},
        },
        ["path"],
    )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        path = self._path(arguments)
        lines = (await self._read_text(context, path)).splitlines()
        offset = int(arguments.get("offset", 0))
        limit = int(arguments.get("limit", DEFAULT_READ_LINES))
        shown = lines[offset : offset + limit]
        text = "\n".join(f"{offset + i + 1:>6}\t{line}" for i, line in enumerate(shown))
        if offset + limit < len(lines):
            text += f"\n[… {len(lines) - offset - limit} more lines; read on with offset {offset + limit}]"
        return ToolOutput(text or f"[{path} has {len(lines)} lines; none from offset {offset}]")


class WorkspaceWrite(_WorkspaceTool):
    spec = _spec(
        "workspace_write",
        "Write workspace file",
        "Create a file in your workspace, or replace it whole, with the text given. Use it for notes, "
        "drafts and data a skill script should read (scripts see the workspace in /workspace/input).",
        {"path": _PATH, "content": {"type": "string", "description": "The whole new text of the file."}},
        ["path", "content"],
    )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        path = self._path(arguments)
        size = await self._write(context, path, arguments["content"])
        return ToolOutput({"path": path, "size_bytes": size})


class WorkspaceEdit(_WorkspaceTool):
    spec = _spec(
        "workspace_edit",
        "Edit workspace file",
        "Replace one exact piece of text in a workspace file with another. old_text must occur exactly "
        "once (give more of the surrounding text if it occurs more often), or set replace_all.",
        {
            "path": _PATH,
            "old_text": {"type": "string", "minLength": 1},
            "new_text": {"type": "string"},
            "replace_all": {"type": "boolean"},
        },
        ["path", "old_text", "new_text"],
    )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        path = self._path(arguments)
        text = await self._read_text(context, path)
        old, new = arguments["old_text"], arguments["new_text"]
        count = text.count(old)
        if count == 0:
            raise NothingFound(f"old_text: not found in {path}; read the file and copy the text exactly")
        if count > 1 and not arguments.get("replace_all", False):
            raise BadArguments(
                f"old_text: occurs {count} times in {path}; give more surrounding text or set replace_all"
            )
        size = await self._write(context, path, text.replace(old, new))
        return ToolOutput(
            {"path": path, "replaced": count if arguments.get("replace_all") else 1, "size_bytes": size}
        )
