"""Distilling a very large tool result through modelhub's ChatStream (its own short request, never the
conversation's prompt prefix)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from knowsphere_clients.errors import ServiceError
from knowsphere_clients.modelhub import ChatInput
from knowsphere_toolrunner.domain.ports import DistillationFailed

PURPOSE = "tool_result_distillation"

SYSTEM_PROMPT = (
    "You compress the result of a tool call so that an agent can keep reasoning without the full text. "
    "Keep every identifier (ids, handles, source labels such as c3, file names, URLs), every name, number, "
    "date and unit, and every conclusion or status the result states. Drop repetition, boilerplate and "
    "formatting. Do not add facts, opinions or advice. Write plain text (no JSON), in the language of the "
    "result, at most {target} characters."
)


class ChatCompleter(Protocol):
    """What the distiller needs of ``knowsphere_clients.ModelHubClient``."""

    async def complete(
        self,
        messages: list[ChatInput],
        *,
        purpose: str,
        model_id: str = "",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str: ...


class ModelHubDistiller:
    def __init__(
        self, models: ChatCompleter, *, model_id: str, timeout_seconds: float, max_input_chars: int
    ) -> None:
        self._models = models
        self._max_input_chars = max_input_chars
        self._model_id = model_id
        self._timeout = timeout_seconds

    async def distil(self, text: str, *, target_chars: int, tool_name: str, language: str) -> str:
        # A result larger than the model reads is cut, and the model is told where.
        limit = self._max_input_chars
        body = text if len(text) <= limit else text[:limit] + "\n[… the rest of the result is left out]"
        messages: list[ChatInput] = [
            {"role": "system", "content": SYSTEM_PROMPT.format(target=target_chars)},
            {"role": "user", "content": f"Result of the tool {tool_name}:\n\n{body}"},
        ]
        try:
            async with asyncio.timeout(self._timeout):
                summary = await self._models.complete(
                    messages, purpose=PURPOSE, model_id=self._model_id, temperature=0.0
                )
        except TimeoutError as error:
            raise DistillationFailed(f"no answer within {self._timeout:g} s") from error
        except ServiceError as error:
            raise DistillationFailed(str(error)) from error
        if not summary.strip():
            raise DistillationFailed("the model returned an empty summary")
        return summary
