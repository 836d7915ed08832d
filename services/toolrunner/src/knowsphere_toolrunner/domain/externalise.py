"""Externalising large tool results: the full text goes to the store, the model gets a placeholder.

A result is stored when its text is over ``over_chars`` characters, when it is a JSON array of more
than ``over_items`` items, or when its tool flags it whole-result. The model then reads
``{"__stored": true, "__refId": …, "__summary": …, "__hint": …}``. Above ``distil_over_chars`` the
summary is distilled by a model to at most ``distil_target_chars`` characters; if that fails the
summary is a view cut at a safe boundary and marked degraded. Smaller stored results get that view
directly (it fits, so nothing is lost to a model call).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from knowsphere.toolrunner.v1.toolrunner_enums import ContentFormat
from knowsphere_toolrunner.domain.ports import DistillationFailed, Distiller, StoredResult, ToolResultStore
from knowsphere_toolrunner.domain.previews import cut_text, view
from knowsphere_toolrunner.domain.tools.base import ToolContext, canonical_json

log = structlog.get_logger(__name__)

REF_PREFIX = "ref_"

# Placeholder keys, as the spec names them.
STORED = "__stored"
REF_ID = "__refId"
SUMMARY = "__summary"
HINT = "__hint"

_HINTS = {
    "en": (
        'The full result ({chars} characters) is stored. Call get_stored_data with ref_id "{ref}" to read it '
        "(in pages of {page} characters) when the summary is not enough."
    ),
    "zh": (
        '完整结果（{chars} 字）已外置保存。摘要不够用时，调用 get_stored_data，ref_id 为 "{ref}"'
        "（每页 {page} 字）。"
    ),
}
_DEGRADED = {
    "en": "[Degraded: the result could not be distilled; this is a shortened view, not the whole result.]",
    "zh": "【降级结果：蒸馏失败，以下为截断视图，并非完整结果。】",
}


def _language(tag: str) -> str:
    return "zh" if tag.lower().startswith("zh") else "en"


@dataclass(frozen=True)
class ExternaliseLimits:
    over_chars: int
    over_items: int
    distil_over_chars: int
    distil_target_chars: int
    preview_chars: int
    page_chars: int


@dataclass(frozen=True)
class Externalised:
    """What the model sees instead of a stored result."""

    content: str
    placeholder: dict[str, Any]
    ref_id: str
    summary: str
    hint: str
    distilled: bool
    degraded: bool


def must_store(text: str, value: Any, *, whole_result: bool, limits: ExternaliseLimits) -> bool:
    if whole_result or len(text) > limits.over_chars:
        return True
    return isinstance(value, list) and len(value) > limits.over_items


def new_ref_id() -> str:
    return f"{REF_PREFIX}{uuid.uuid4().hex}"


class Externaliser:
    def __init__(
        self,
        store: ToolResultStore,
        distiller: Distiller,
        limits: ExternaliseLimits,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_id: Callable[[], str] = new_ref_id,
    ) -> None:
        self._store = store
        self._distiller = distiller
        self.limits = limits
        self._clock = clock
        self._new_id = new_id

    async def _summary(self, tool_name: str, text: str, value: Any, language: str) -> tuple[str, bool, bool]:
        """(summary, distilled, degraded)."""
        limits = self.limits
        if len(text) <= limits.distil_over_chars:
            return view(value, text, limits.preview_chars), False, False
        try:
            distilled = await self._distiller.distil(
                text, target_chars=limits.distil_target_chars, tool_name=tool_name, language=language
            )
        except DistillationFailed as error:
            log.warning("distillation failed; the summary is a cut view", tool=tool_name, reason=str(error))
            marker = _DEGRADED[_language(language)]
            return f"{marker}\n{view(value, text, limits.distil_target_chars - len(marker) - 1)}", False, True
        return cut_text(distilled.strip(), limits.distil_target_chars), True, False

    async def externalise(
        self, tool_name: str, text: str, value: Any, context: ToolContext, *, is_json: bool
    ) -> Externalised:
        """Store ``text`` (the result's exact text) and return the placeholder the model reads."""
        summary, distilled, degraded = await self._summary(tool_name, text, value, context.language)
        ref_id = self._new_id()
        await self._store.put_result(
            StoredResult(
                ref_id=ref_id,
                tenant_id=context.tenant_id,
                user_id=context.user_id,
                session_id=context.session_id,
                turn_id=context.turn_id,
                tool_name=tool_name,
                content=text,
                format=ContentFormat.JSON if is_json else ContentFormat.TEXT,
                char_count=len(text),
                summary=summary,
                distilled=distilled,
                degraded=degraded,
                create_time=self._clock(),
            )
        )
        hint = _HINTS[_language(context.language)].format(
            chars=len(text), ref=ref_id, page=self.limits.page_chars
        )
        placeholder = {STORED: True, REF_ID: ref_id, SUMMARY: summary, HINT: hint}
        return Externalised(
            content=canonical_json(placeholder),
            placeholder=placeholder,
            ref_id=ref_id,
            summary=summary,
            hint=hint,
            distilled=distilled,
            degraded=degraded,
        )
