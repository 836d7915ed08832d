"""The handoff model over modelhub: one ``ChatStream`` call asking for a JSON object.

The conversation builds it on its ``ModelHubClient`` and hands it to
``knowsphere_memory.domain.handoff.compact``; the call uses the tenant's default KnowledgeQA model
unless a model id is named, and is traced by modelhub under the purpose ``compaction``.
"""

from __future__ import annotations

from knowsphere.modelhub.v1 import modelhub_pb2 as hpb
from knowsphere.modelhub.v1.modelhub_enums import ChatRole
from knowsphere_clients.modelhub import ModelHubClient, chat_message

PURPOSE = "compaction"
TEMPERATURE = 0.0
"""A record of what happened, not prose: no sampling."""


class ModelHubHandoffModel:
    """:class:`~knowsphere_memory.domain.handoff.HandoffModel` on modelhub."""

    def __init__(self, client: ModelHubClient, *, model_id: str = "") -> None:
        self._client = client
        self._model_id = model_id

    async def complete_json(self, system: str, user: str, *, max_tokens: int) -> str:
        request = hpb.ChatStreamRequest(
            model_id=self._model_id,
            messages=[chat_message(ChatRole.SYSTEM, system), chat_message(ChatRole.USER, user)],
            response_format=hpb.ResponseFormat(type=hpb.RESPONSE_FORMAT_TYPE_JSON_OBJECT),
            purpose=PURPOSE,
            temperature=TEMPERATURE,
            max_tokens=max_tokens,
        )
        parts = [
            e.text_delta.text async for e in self._client.chat_stream(request) if e.HasField("text_delta")
        ]
        return "".join(parts)
