"""The Anthropic Messages API (api_style "anthropic"): streamed chat with explicit cache breakpoints.

- ``POST {base}/v1/messages`` with ``x-api-key`` and ``anthropic-version: 2023-06-01``.
- System messages become the top-level ``system`` blocks (in order); tool results become
  ``tool_result`` blocks of a user turn; consecutive turns of one role are merged into one turn, as
  the API would do, so that tool results of one assistant turn share a user turn.
- Images are sent as base64 source blocks (http URLs are downloaded first).
- Explicit prompt caching: ``cache_control: {"type": "ephemeral"}`` on the last block of every
  message marked ``cache_breakpoint`` (and on the last system block when the system message is
  marked). The API allows a few breakpoints per request (the table's ``max_cache_breakpoints``); when
  more are marked the last ones are kept, since each covers the whole prefix before it.
- No logprobs: :meth:`AnthropicAdapter.next_token_logprobs` raises ModelError WRONG_MODEL_TYPE, which
  Decide catches to use its JSON path. No embeddings, rerank or transcription (WRONG_MODEL_TYPE).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ChatRole, ModelErrorCode, ModelType, ToolChoiceMode
from knowsphere_modelhub.adapters.call_setup import (
    HttpProviderAdapter,
    max_tokens_of,
    merged_extras,
    no_images,
    parse_json_object,
    spec_for,
    stamped,
    temperature_of,
    unsupported,
)
from knowsphere_modelhub.adapters.http import error_from_response, provider_text, sse_events
from knowsphere_modelhub.adapters.images import inline_image
from knowsphere_modelhub.domain.errors import ModelError, invalid_input
from knowsphere_modelhub.domain.ports import EmbedResult, TokenLogprob
from knowsphere_modelhub.domain.providers import ProviderSpec
from knowsphere_modelhub.domain.records import CallTarget

ANTHROPIC_VERSION = "2023-06-01"
_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_STOP = {
    "end_turn": pb.FINISH_REASON_STOP,
    "stop_sequence": pb.FINISH_REASON_STOP,
    "max_tokens": pb.FINISH_REASON_LENGTH,
    "tool_use": pb.FINISH_REASON_TOOL_CALLS,
    "refusal": pb.FINISH_REASON_CONTENT_FILTER,
}


class AnthropicAdapter(HttpProviderAdapter):
    """:class:`~knowsphere_modelhub.domain.ports.ProviderAdapter` for api_style "anthropic"."""

    async def chat_stream(
        self, target: CallTarget, request: pb.ChatStreamRequest
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        try:
            spec, endpoint, url = self._chat_call(target, **{"anthropic-version": ANTHROPIC_VERSION})
            body = await self._body(spec, target, request)
            async with self._http.stream(endpoint, "POST", url, json_body=body) as stream:
                events = _parse_stream(
                    stream.lines(), include_reasoning=request.include_reasoning, secrets=stream.secrets
                )
                async for event in events:
                    yield event
        except ModelError as exc:
            raise stamped(exc, target) from None

    async def _body(
        self, spec: ProviderSpec, target: CallTarget, request: pb.ChatStreamRequest
    ) -> dict[str, Any]:
        system, messages = await self._messages(spec, request.messages)
        max_tokens = max_tokens_of(target, request) or spec.default_max_tokens
        body: dict[str, Any] = {"model": target.model_name, "max_tokens": max_tokens}
        if system:
            body["system"] = system
        body["messages"] = messages
        body["stream"] = True
        temperature = temperature_of(target, request)
        if temperature is not None:
            body["temperature"] = temperature
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        if request.tools:
            body["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": parse_json_object(
                        tool.parameters_json_schema, f"tools[{i}].parameters_json_schema"
                    )
                    or {"type": "object", "properties": {}},
                }
                for i, tool in enumerate(request.tools)
            ]
        if request.HasField("tool_choice"):
            choice = _tool_choice(request.tool_choice)
            if choice is not None:
                body["tool_choice"] = choice
        body.update(merged_extras(target, request.provider_params))
        return body

    async def _messages(
        self, spec: ProviderSpec, messages: Sequence[pb.ChatMessage]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if not messages:
            raise invalid_input("messages", "at least one message is required")
        system: list[dict[str, Any]] = []
        turns: list[dict[str, Any]] = []
        marked: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            role = ChatRole.from_number(message.role)
            if role is None:
                raise invalid_input(f"messages[{i}].role", "role is required")
            if role is ChatRole.SYSTEM:
                blocks = []
                for j, part in enumerate(message.content):
                    if part.WhichOneof("part") == "image":
                        raise invalid_input(
                            f"messages[{i}].content[{j}]", "a system message cannot hold images"
                        )
                    if part.text:
                        blocks.append({"type": "text", "text": part.text})
                system.extend(blocks)
                if message.cache_breakpoint and blocks:
                    marked.append(blocks[-1])
                continue
            # Anthropic has two roles: tool results travel in user turns.
            turn_role = ChatRole.ASSISTANT if role is ChatRole.ASSISTANT else ChatRole.USER
            content = await self._blocks(spec, message, i)
            if role is ChatRole.TOOL:
                result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
                if content:
                    only_text = all(b["type"] == "text" for b in content)
                    result["content"] = "".join(b["text"] for b in content) if only_text else content
                blocks = [result]
            else:
                blocks = content
                for k, call in enumerate(message.tool_calls):
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": call.id,
                            "name": call.name,
                            "input": parse_json_object(
                                call.arguments_json, f"messages[{i}].tool_calls[{k}].arguments_json"
                            ),
                        }
                    )
            if not blocks:
                continue  # the API rejects empty turns; an empty message carries nothing
            if turns and turns[-1]["role"] == turn_role.value:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": turn_role.value, "content": blocks})
            if message.cache_breakpoint:
                marked.append(blocks[-1])
        limit = spec.max_cache_breakpoints
        for block in marked[-limit:] if limit else []:
            block["cache_control"] = {"type": "ephemeral"}
        return system, turns

    async def _blocks(self, spec: ProviderSpec, message: pb.ChatMessage, i: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for j, part in enumerate(message.content):
            field = f"messages[{i}].content[{j}]"
            if part.WhichOneof("part") == "text":
                if part.text:  # the API rejects empty text blocks
                    blocks.append({"type": "text", "text": part.text})
                continue
            if spec.image_input is None:
                raise no_images(spec, field)
            image = await inline_image(self._http, part.image, field=field, max_bytes=self._max_image_bytes)
            if image.mime_type not in _MEDIA_TYPES:
                raise invalid_input(
                    field, f"{image.mime_type} is not one of {', '.join(sorted(_MEDIA_TYPES))}"
                )
            blocks.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": image.mime_type, "data": image.data_b64},
                }
            )
        return blocks

    async def next_token_logprobs(
        self, target: CallTarget, messages: Sequence[pb.ChatMessage], top: int
    ) -> list[TokenLogprob]:
        raise ModelError(
            ModelErrorCode.WRONG_MODEL_TYPE,
            "the Anthropic Messages API returns no logprobs",
            model_id=target.model_id,
            provider_id=target.provider_id,
            type="logprobs",
            types="chat without logprobs",
        )

    async def embed(self, target: CallTarget, texts: Sequence[str], input_type: int) -> EmbedResult:
        raise unsupported(target, spec_for(self._providers, target), ModelType.EMBEDDING)

    async def rerank(
        self, target: CallTarget, query: str, documents: Sequence[str], top_n: int
    ) -> list[tuple[int, float]]:
        raise unsupported(target, spec_for(self._providers, target), ModelType.RERANK)

    async def transcribe(self, target: CallTarget, request: pb.TranscribeRequest) -> pb.TranscribeResponse:
        raise unsupported(target, spec_for(self._providers, target), ModelType.ASR)


# Anthropic's name of each tool choice mode ("any": some tool must be called).
_TOOL_CHOICE = {ToolChoiceMode.AUTO: "auto", ToolChoiceMode.NONE: "none", ToolChoiceMode.REQUIRED: "any"}


def _tool_choice(choice: pb.ToolChoice) -> dict[str, Any] | None:
    kind = choice.WhichOneof("choice")
    if kind == "tool_name":
        return {"type": "tool", "name": choice.tool_name}
    mode = ToolChoiceMode.from_number(choice.mode) if kind == "mode" else None
    return {"type": _TOOL_CHOICE[mode]} if mode is not None else None


class _Usage:
    def __init__(self) -> None:
        self.input = 0
        self.cache_read: int | None = None
        self.cache_write = 0
        self.output = 0
        self.seen = False

    def update(self, raw: Mapping[str, Any]) -> None:
        self.seen = True
        if raw.get("input_tokens") is not None:
            self.input = int(raw["input_tokens"])
        if raw.get("cache_read_input_tokens") is not None:
            self.cache_read = int(raw["cache_read_input_tokens"])
        if raw.get("cache_creation_input_tokens") is not None:
            self.cache_write = int(raw["cache_creation_input_tokens"])
        if raw.get("output_tokens") is not None:
            self.output = int(raw["output_tokens"])

    def proto(self) -> pb.TokenUsage:
        # Anthropic's input_tokens excludes cached and cache-written tokens; the contract's
        # prompt_tokens is the whole prompt.
        prompt = self.input + (self.cache_read or 0) + self.cache_write
        usage = pb.TokenUsage(
            prompt_tokens=prompt, completion_tokens=self.output, total_tokens=prompt + self.output
        )
        if self.cache_read is not None:
            usage.cached_prompt_tokens = self.cache_read
        return usage


async def _parse_stream(
    lines: AsyncIterator[str], *, include_reasoning: bool, secrets: tuple[str, ...] = ()
) -> AsyncIterator[pb.ChatStreamResponse]:
    usage = _Usage()
    tool_index: dict[int, int] = {}  # content block index → tool call index
    finished = False
    stopped = False
    async for sse in sse_events(lines):
        if stopped:
            continue  # read to the end, so the connection goes back to the pool
        try:
            data = json.loads(sse.data)
        except ValueError as exc:
            raise ModelError(
                ModelErrorCode.PROVIDER_ERROR, f"unparseable event: {provider_text(sse.data, secrets)}"
            ) from exc
        kind = data.get("type") or sse.event
        if kind == "error":
            raise error_from_response(0, json.dumps(data, ensure_ascii=False), secrets=secrets)
        if kind == "message_start":
            usage.update((data.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = tool_index.setdefault(int(data.get("index", 0)), len(tool_index))
                yield pb.ChatStreamResponse(
                    tool_call_delta=pb.ToolCallDelta(
                        index=index, id=str(block.get("id", "")), name=str(block.get("name", ""))
                    )
                )
            elif block.get("type") == "text" and block.get("text"):
                yield pb.ChatStreamResponse(text_delta=pb.TextDelta(text=str(block["text"])))
        elif kind == "content_block_delta":
            delta = data.get("delta") or {}
            delta_type = delta.get("type")
            if delta_type == "text_delta" and delta.get("text"):
                yield pb.ChatStreamResponse(text_delta=pb.TextDelta(text=str(delta["text"])))
            elif delta_type == "input_json_delta" and delta.get("partial_json"):
                block_index = int(data.get("index", 0))
                if block_index in tool_index:
                    yield pb.ChatStreamResponse(
                        tool_call_delta=pb.ToolCallDelta(
                            index=tool_index[block_index], arguments_delta=str(delta["partial_json"])
                        )
                    )
            elif delta_type == "thinking_delta" and include_reasoning and delta.get("thinking"):
                yield pb.ChatStreamResponse(reasoning_delta=pb.ReasoningDelta(text=str(delta["thinking"])))
        elif kind == "message_delta":
            usage.update(data.get("usage") or {})
            reason = (data.get("delta") or {}).get("stop_reason")
            if reason and not finished:
                finished = True
                yield pb.ChatStreamResponse(
                    finish=pb.ChatFinish(reason=_STOP.get(str(reason), pb.FINISH_REASON_UNSPECIFIED))
                )
        elif kind == "message_stop":
            stopped = True
    if not stopped and not finished:
        raise ModelError(ModelErrorCode.PROVIDER_ERROR, "the stream ended before the model finished")
    if not finished:
        yield pb.ChatStreamResponse(finish=pb.ChatFinish(reason=pb.FINISH_REASON_UNSPECIFIED))
    if usage.seen:
        yield pb.ChatStreamResponse(usage=usage.proto())
