"""Reading an OpenAI-compatible chat answer: streamed chunks (or one whole completion) to events.

Normalises what the providers do differently: tool-call deltas with repeated or missing ids and
indexes, usage inside the last choice (Moonshot) or in its own chunk, cached prompt tokens under three
names, reasoning text as ``reasoning_content`` or ``reasoning``, finish reasons outside OpenAI's names,
an error object sent with status 200, and a provider that answers without streaming.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import FinishReason, ModelErrorCode
from knowsphere_modelhub.adapters.http import ResponseStream, error_from_response, provider_text, sse_events
from knowsphere_modelhub.domain.errors import ModelError

# Finish reasons outside OpenAI's own names (which are FinishReason's values).
_FINISH_ALIASES = {
    "eos": FinishReason.STOP,
    "function_call": FinishReason.TOOL_CALLS,
    "sensitive": FinishReason.CONTENT_FILTER,  # Zhipu
}


def finish_event(raw: str) -> pb.ChatStreamResponse:
    """The finish event of a provider's ``finish_reason`` (reason UNSPECIFIED when unknown)."""
    reason = _FINISH_ALIASES.get(raw)
    if reason is None and raw in set(FinishReason):
        reason = FinishReason(raw)
    finish = pb.ChatFinish(reason=reason.to_proto()) if reason is not None else pb.ChatFinish()
    return pb.ChatStreamResponse(finish=finish)


def usage_from(raw: Mapping[str, Any]) -> pb.TokenUsage:
    """OpenAI-style usage, with cached prompt tokens in whichever field the provider reports them."""
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    usage = pb.TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
    )
    prompt_details = raw.get("prompt_tokens_details") or {}
    cached = prompt_details.get("cached_tokens")
    if cached is None:
        cached = raw.get("prompt_cache_hit_tokens")  # DeepSeek
    if cached is None:
        cached = raw.get("cached_tokens")  # Moonshot
    if cached is not None:
        usage.cached_prompt_tokens = int(cached)
    reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        usage.reasoning_tokens = int(reasoning)
    return usage


class _ToolCallIndexer:
    """Normalises tool-call deltas: a stable index per call, id and name sent once.

    Some providers repeat id and name in every delta or leave out ``index``; the contract says id and
    name arrive in the first delta of a call only.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, int] = {}
        self._sent_id: set[int] = set()
        self._sent_name: set[int] = set()
        self._last = -1

    def delta(self, raw: Mapping[str, Any]) -> pb.ToolCallDelta | None:
        call_id = str(raw.get("id") or "")
        index = raw.get("index")
        if not isinstance(index, int):
            if call_id and call_id in self._by_id:
                index = self._by_id[call_id]
            elif call_id or self._last < 0:
                index = self._last + 1
            else:
                index = self._last
        if call_id:
            self._by_id.setdefault(call_id, index)
        self._last = max(self._last, index)
        function = raw.get("function") or {}
        out = pb.ToolCallDelta(index=index, arguments_delta=str(function.get("arguments") or ""))
        if call_id and index not in self._sent_id:
            out.id = call_id
            self._sent_id.add(index)
        name = str(function.get("name") or "")
        if name and index not in self._sent_name:
            out.name = name
            self._sent_name.add(index)
        if not (out.id or out.name or out.arguments_delta):
            return None
        return out


class _ChatState:
    """What one chat answer has said so far: tool calls begun, whether it finished, its usage."""

    def __init__(self, include_reasoning: bool, secrets: tuple[str, ...] = ()) -> None:
        self.include_reasoning = include_reasoning
        self.secrets = secrets  # the call's credentials, scrubbed from an error event
        self.tools = _ToolCallIndexer()
        self.finished = False
        self.usage: pb.TokenUsage | None = None

    def events(self, chunk: Mapping[str, Any]) -> list[pb.ChatStreamResponse]:
        """Events of one streamed chunk (or of a whole non-streamed completion)."""
        if chunk.get("error"):
            raise error_from_response(0, json.dumps(chunk, ensure_ascii=False), secrets=self.secrets)
        out: list[pb.ChatStreamResponse] = []
        for choice in (chunk.get("choices") or [])[:1]:
            delta = choice.get("delta") or choice.get("message") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and self.include_reasoning:
                out.append(pb.ChatStreamResponse(reasoning_delta=pb.ReasoningDelta(text=str(reasoning))))
            if delta.get("content"):
                out.append(pb.ChatStreamResponse(text_delta=pb.TextDelta(text=str(delta["content"]))))
            for raw in delta.get("tool_calls") or []:
                piece = self.tools.delta(raw)
                if piece is not None:
                    out.append(pb.ChatStreamResponse(tool_call_delta=piece))
            if choice.get("usage"):  # Moonshot reports usage inside the last choice
                self.usage = usage_from(choice["usage"])
            reason = choice.get("finish_reason")
            if reason and not self.finished:
                self.finished = True
                out.append(finish_event(str(reason)))
        if chunk.get("usage"):
            self.usage = usage_from(chunk["usage"])
        return out


async def parse_chat_stream(
    stream: ResponseStream, *, include_reasoning: bool
) -> AsyncIterator[pb.ChatStreamResponse]:
    state = _ChatState(include_reasoning, stream.secrets)
    content_type = stream.response.headers.get("content-type", "")
    if "text/event-stream" not in content_type and "json" in content_type:
        # The provider answered without streaming (or with an error object and status 200).
        body = b"".join([chunk async for chunk in stream.chunks()]).decode("utf-8", errors="replace")
        try:
            whole = json.loads(body)
        except ValueError as exc:
            raise ModelError(
                ModelErrorCode.PROVIDER_ERROR, f"unexpected answer: {provider_text(body, stream.secrets)}"
            ) from exc
        for event in state.events(whole):
            yield event
        done = True
    else:
        done = False
        async for sse in sse_events(stream.lines()):
            data = sse.data.strip()
            if done:
                continue  # read to the end, so the connection goes back to the pool
            if data == "[DONE]":
                done = True
                continue
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise ModelError(
                    ModelErrorCode.PROVIDER_ERROR,
                    f"unparseable stream chunk: {provider_text(data, stream.secrets)}",
                ) from exc
            for event in state.events(chunk):
                yield event
    if not state.finished:
        if not done and state.usage is None:
            raise ModelError(ModelErrorCode.PROVIDER_ERROR, "the stream ended before the model finished")
        yield pb.ChatStreamResponse(finish=pb.ChatFinish(reason=pb.FINISH_REASON_UNSPECIFIED))
    if state.usage is not None:
        yield pb.ChatStreamResponse(usage=state.usage)
