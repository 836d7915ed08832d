"""get_stored_data: the model reads back an externalised result by its ``__refId``.

A result that fits one page comes back exactly as the tool produced it; a larger one in pages, each
saying where it starts, how much it holds and where the next begins. What it returns is never
externalised again. Only the tenant, user and session that stored a result can read it; any other ref
id reads as unknown.
"""

from __future__ import annotations

import json
from typing import Any

from knowsphere.toolrunner.v1.toolrunner_enums import ContentFormat, ToolCategory
from knowsphere_toolrunner.domain.ports import ToolResultStore
from knowsphere_toolrunner.domain.tools.base import NothingFound, ToolContext, ToolOutput, ToolSpec

MAX_REF_ID_CHARS = 100


class GetStoredData:
    def __init__(self, store: ToolResultStore, *, page_chars: int, timeout: float) -> None:
        self._store = store
        self._page_chars = page_chars
        self.spec = ToolSpec(
            name="get_stored_data",
            display_name="Read stored result",
            description=(
                "Read the full text of a tool result that was stored because it was large (a result "
                "showing __stored, __refId and __summary). Call it only when the summary is not enough. "
                f"Results longer than {page_chars} characters come in pages: pass the next_offset you got "
                "to read on."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "ref_id": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_REF_ID_CHARS,
                        "description": "The __refId of the stored result.",
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Character offset to read from: 0 (default), or the last next_offset.",
                    },
                },
                "required": ["ref_id"],
                "additionalProperties": False,
            },
            category=ToolCategory.RUNTIME,
            selectable=False,
            timeout_seconds=timeout,
            externalise=False,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        ref_id = arguments["ref_id"].strip()
        offset = arguments.get("offset", 0)
        stored = await self._store.get_result_page(
            context.tenant_id, context.user_id, ref_id, offset, self._page_chars
        )
        if stored is None or (
            context.session_id and stored.session_id and stored.session_id != context.session_id
        ):
            raise NothingFound(
                f"no stored result {ref_id!r} in this conversation; use a __refId you were given"
            )
        total = stored.char_count
        if offset == 0 and total <= self._page_chars:
            # Whole: exactly what the tool produced (a JSON result is given back as JSON, which the
            # executor writes out as the same text).
            return ToolOutput(
                json.loads(stored.content) if stored.format == ContentFormat.JSON else stored.content
            )
        if offset >= total:
            raise NothingFound(f"offset {offset} is past the end of {ref_id!r} ({total} characters)")
        end = offset + len(stored.content)
        return ToolOutput(
            {
                "ref_id": ref_id,
                "tool": stored.tool_name,
                "total_chars": total,
                "offset": offset,
                "returned_chars": len(stored.content),
                "next_offset": end if end < total else None,
                "content": stored.content,
            }
        )
