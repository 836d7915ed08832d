"""The OpenAI-compatible wire format (api_style "openai"): chat, logprobs, embeddings, rerank, speech.

Serves every provider whose table row says ``api_style="openai"`` (OpenAI, SiliconFlow, DashScope's
compatible mode, Zhipu, DeepSeek, Moonshot, Volcengine Ark, Hunyuan, Qianfan, OpenRouter, Jina,
Ollama and custom endpoints). Their differences — ``stream_options``, the max-tokens field name,
image URLs or base64 only, string-only content, rerank shape, embedding input hints, explicit cache
breakpoints — come from the provider table; nothing here branches on a provider id.

Prompt bytes pass through unchanged: messages keep their order and their text as given, tool schemas
are sent as parsed from their JSON text, so a stable prompt prefix stays a stable cache prefix.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from google.protobuf import duration_pb2

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_modelhub.adapters.call_setup import (
    endpoint_for,
    invalid_input,
    max_tokens_of,
    merged_extras,
    parse_schema,
    spec_for,
    stamped,
    temperature_of,
    unsupported,
)
from knowsphere_modelhub.adapters.http import (
    ProviderHttp,
    ResponseStream,
    error_from_response,
    join_url,
    json_text,
    sse_events,
)
from knowsphere_modelhub.adapters.images import inline_image, parse_data_url
from knowsphere_modelhub.adapters.ports import EmbedResult, TokenLogprob
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.providers import BASE64_ONLY, NO_IMAGES, PROVIDERS, ProviderSpec
from knowsphere_modelhub.domain.records import ASR, EMBEDDING, KNOWLEDGE_QA, RERANK, CallTarget
from knowsphere_modelhub.settings import Settings

_ROLES = {
    pb.CHAT_ROLE_SYSTEM: "system",
    pb.CHAT_ROLE_USER: "user",
    pb.CHAT_ROLE_ASSISTANT: "assistant",
    pb.CHAT_ROLE_TOOL: "tool",
}
_DETAIL = {pb.IMAGE_DETAIL_AUTO: "auto", pb.IMAGE_DETAIL_LOW: "low", pb.IMAGE_DETAIL_HIGH: "high"}
_FINISH = {
    "stop": pb.FINISH_REASON_STOP,
    "eos": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "tool_calls": pb.FINISH_REASON_TOOL_CALLS,
    "function_call": pb.FINISH_REASON_TOOL_CALLS,
    "content_filter": pb.FINISH_REASON_CONTENT_FILTER,
    "sensitive": pb.FINISH_REASON_CONTENT_FILTER,  # Zhipu
}
_EPHEMERAL = {"type": "ephemeral"}

DEFAULT_MAX_IMAGE_BYTES: int = Settings.model_fields["max_image_bytes"].default
DEFAULT_MAX_AUDIO_BYTES: int = Settings.model_fields["max_audio_bytes"].default


def l2_normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [float(v) / norm for v in vector] if norm > 0 else [float(v) for v in vector]


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


class OpenAICompatibleAdapter:
    """:class:`~knowsphere_modelhub.adapters.ports.ProviderAdapter` for api_style "openai".

    ``close()`` closes the shared :class:`ProviderHttp` (idempotent; its clients are recreated on
    next use).
    """

    def __init__(
        self,
        http: ProviderHttp,
        providers: Mapping[str, ProviderSpec] = PROVIDERS,
        *,
        max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
        max_audio_bytes: int = DEFAULT_MAX_AUDIO_BYTES,
    ) -> None:
        self._http = http
        self._providers = providers
        self._max_image_bytes = max_image_bytes
        self._max_audio_bytes = max_audio_bytes

    async def close(self) -> None:
        await self._http.close()

    # -- chat -------------------------------------------------------------------------------------

    async def chat_stream(
        self, target: CallTarget, request: pb.ChatStreamRequest
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        spec = spec_for(self._providers, target)
        image_urls: list[tuple[str, str]] = []
        try:
            if not spec.chat_path:
                raise unsupported(target, spec, KNOWLEDGE_QA)
            endpoint, base_url = endpoint_for(spec, target)
            messages = await self._messages(spec, request.messages, image_urls)
            body = self._chat_body(spec, target, request, messages)
            async with self._http.stream(
                endpoint, "POST", join_url(base_url, spec.chat_path), json_body=body
            ) as stream:
                async for event in _parse_chat_stream(stream, include_reasoning=request.include_reasoning):
                    yield event
        except ModelError as exc:
            if exc.code == pb.MODEL_ERROR_CODE_IMAGE_URL_UNREACHABLE and not exc.field:
                exc.field = _image_field(exc.detail, image_urls)
            raise stamped(exc, target) from None

    def _chat_body(
        self,
        spec: ProviderSpec,
        target: CallTarget,
        request: pb.ChatStreamRequest,
        messages: list[dict[str, Any]],
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": target.model_name, "messages": messages, "stream": True}
        if spec.stream_usage_option:
            body["stream_options"] = {"include_usage": True}
        temperature = temperature_of(target, request)
        if temperature is not None:
            body["temperature"] = temperature
        max_tokens = max_tokens_of(target, request)
        if max_tokens:
            body[spec.max_tokens_field] = max_tokens
        if request.stop:
            body["stop"] = list(request.stop)
        if request.tools:
            if not spec.tool_calls:
                raise invalid_input("tools", f"provider {spec.id} does not support tool calls")
            body["tools"] = [
                _tool(t, f"tools[{i}].parameters_json_schema") for i, t in enumerate(request.tools)
            ]
        tool_choice = _tool_choice(spec, request.tool_choice) if request.HasField("tool_choice") else None
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        response_format = _response_format(spec, request.response_format)
        if response_format is not None:
            body["response_format"] = response_format
        body.update(merged_extras(target, request.provider_params))
        return body

    async def _messages(
        self, spec: ProviderSpec, messages: Sequence[pb.ChatMessage], image_urls: list[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        if not messages:
            raise invalid_input("messages", "at least one message is required")
        wire: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            role = _ROLES.get(message.role)
            if role is None:
                raise invalid_input(f"messages[{i}].role", "role is required")
            parts: list[dict[str, Any]] = []
            has_image = False
            for j, part in enumerate(message.content):
                kind = part.WhichOneof("part")
                if kind == "text":
                    parts.append({"type": "text", "text": part.text})
                elif kind == "image":
                    has_image = True
                    parts.append(
                        await self._image_part(spec, part.image, f"messages[{i}].content[{j}]", image_urls)
                    )
            out: dict[str, Any] = {"role": role}
            if message.cache_breakpoint and spec.cache_breakpoints and parts:
                parts[-1]["cache_control"] = dict(_EPHEMERAL)
                out["content"] = parts
            elif has_image or (len(parts) > 1 and spec.content_arrays):
                out["content"] = parts
            elif parts:
                out["content"] = "".join(p["text"] for p in parts)
            else:
                out["content"] = None if message.tool_calls else ""
            if message.name and role != "tool":
                out["name"] = message.name
            if role == "tool":
                out["tool_call_id"] = message.tool_call_id
            if message.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json},
                    }
                    for call in message.tool_calls
                ]
            wire.append(out)
        return wire

    async def _image_part(
        self, spec: ProviderSpec, image: pb.ImageInput, field: str, image_urls: list[tuple[str, str]]
    ) -> dict[str, Any]:
        if spec.image_input == NO_IMAGES:
            raise ModelError(
                pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE,
                f"provider {spec.id} takes no images",
                field=field,
                type="vlm",
                types="text chat",
            )
        source = image.WhichOneof("source")
        if (
            source == "url"
            and image.url.startswith(("http://", "https://"))
            and spec.image_input != BASE64_ONLY
        ):
            url = image.url
            image_urls.append((field, url))
        elif source == "url" and image.url.startswith("data:"):
            url = parse_data_url(image.url, field=field, max_bytes=self._max_image_bytes).data_url
        else:
            url = (
                await inline_image(self._http, image, field=field, max_bytes=self._max_image_bytes)
            ).data_url
        payload: dict[str, Any] = {"url": url}
        if image.detail in _DETAIL:
            payload["detail"] = _DETAIL[image.detail]
        return {"type": "image_url", "image_url": payload}

    # -- logprobs (Decide) ------------------------------------------------------------------------

    async def next_token_logprobs(
        self, target: CallTarget, messages: Sequence[pb.ChatMessage], top: int
    ) -> list[TokenLogprob]:
        spec = spec_for(self._providers, target)
        try:
            if not spec.logprobs or not spec.chat_path:
                raise ModelError(
                    pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE,
                    f"provider {spec.id} returns no logprobs",
                    type="logprobs",
                    types="chat without logprobs",
                )
            endpoint, base_url = endpoint_for(spec, target)
            body: dict[str, Any] = {
                "model": target.model_name,
                "messages": await self._messages(spec, messages, []),
                spec.max_tokens_field: 1,
                "logprobs": True,
                "top_logprobs": min(top, spec.max_top_logprobs) if spec.max_top_logprobs else top,
            }
            body.update(merged_extras(target))
            try:
                data = await self._http.request_json(
                    endpoint, "POST", join_url(base_url, spec.chat_path), json_body=body
                )
            except ModelError as exc:
                if _rejects_logprobs(exc):
                    raise ModelError(
                        pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE,
                        f"model {target.model_name} returns no logprobs: {exc.detail}",
                        type="logprobs",
                        types="chat without logprobs",
                    ) from exc
                raise
        except ModelError as exc:
            raise stamped(exc, target) from None
        choices = data.get("choices") or [{}]
        content = ((choices[0].get("logprobs") or {}).get("content")) or []
        if not content:
            return []
        first = content[0]
        alternatives = first.get("top_logprobs") or [first]
        return [
            TokenLogprob(token=str(alt.get("token", "")), logprob=float(alt.get("logprob", -math.inf)))
            for alt in alternatives
            if "token" in alt
        ]

    # -- embeddings, rerank, transcription --------------------------------------------------------

    async def embed(self, target: CallTarget, texts: Sequence[str], input_type: int) -> EmbedResult:
        spec = spec_for(self._providers, target)
        data: Any = None
        try:
            if not spec.embeddings_path:
                raise unsupported(target, spec, EMBEDDING)
            if not texts:
                return EmbedResult(vectors=[])
            endpoint, base_url = endpoint_for(spec, target)
            body: dict[str, Any] = {"model": target.model_name, "input": list(texts)}
            hint = spec.embed_input_hint
            if hint is not None:
                body[hint.field] = hint.query if input_type == pb.EMBED_INPUT_TYPE_QUERY else hint.document
            data = await self._http.request_json(
                endpoint, "POST", join_url(base_url, spec.embeddings_path), json_body=body
            )
            items = sorted(data.get("data") or [], key=lambda item: int(item.get("index", 0)))
            if len(items) != len(texts):
                raise ModelError(
                    pb.MODEL_ERROR_CODE_PROVIDER_ERROR,
                    f"{len(items)} embeddings for {len(texts)} texts: {json_text(data)}",
                )
            vectors = [l2_normalise(item["embedding"]) for item in items]
        except ModelError as exc:
            raise stamped(exc, target) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise stamped(_malformed(exc, data), target) from exc
        prompt_tokens = (data.get("usage") or {}).get("prompt_tokens")
        return EmbedResult(
            vectors=vectors, prompt_tokens=int(prompt_tokens) if prompt_tokens is not None else None
        )

    async def rerank(
        self, target: CallTarget, query: str, documents: Sequence[str], top_n: int
    ) -> list[tuple[int, float]]:
        spec = spec_for(self._providers, target)
        data: Any = None
        try:
            if not spec.rerank_path or spec.rerank_shape is None:
                raise unsupported(target, spec, RERANK)
            if not documents:
                return []
            endpoint, base_url = endpoint_for(spec, target)
            n = top_n if 0 < top_n <= len(documents) else len(documents)
            url = join_url(base_url, spec.rerank_path, from_origin=spec.rerank_from_origin)
            body: dict[str, Any]
            if spec.rerank_shape == "dashscope":
                body = {
                    "model": target.model_name,
                    "input": {"query": query, "documents": list(documents)},
                    "parameters": {"top_n": n, "return_documents": False},
                }
            else:
                body = {
                    "model": target.model_name,
                    "query": query,
                    "documents": list(documents),
                    "top_n": n,
                    "return_documents": False,
                }
            data = await self._http.request_json(endpoint, "POST", url, json_body=body)
            results = (data.get("output") or {}).get("results") if spec.rerank_shape == "dashscope" else None
            if results is None:
                results = data.get("results")
            scored = [(int(r["index"]), float(r["relevance_score"])) for r in results]
        except ModelError as exc:
            raise stamped(exc, target) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise stamped(_malformed(exc, data), target) from exc
        if any(not 0 <= index < len(documents) for index, _ in scored):
            raise stamped(
                ModelError(
                    pb.MODEL_ERROR_CODE_PROVIDER_ERROR, f"rerank index out of range: {json_text(data)}"
                ),
                target,
            )
        scored.sort(key=lambda pair: pair[1], reverse=True)
        return scored[:n]

    async def transcribe(self, target: CallTarget, request: pb.TranscribeRequest) -> pb.TranscribeResponse:
        spec = spec_for(self._providers, target)
        try:
            if not spec.transcription_path:
                raise unsupported(target, spec, ASR)
            if not request.audio:
                raise invalid_input("audio", "no audio given")
            if len(request.audio) > self._max_audio_bytes:
                raise invalid_input(
                    "audio",
                    f"{len(request.audio)} bytes is over the audio limit of {self._max_audio_bytes} bytes",
                )
            endpoint, base_url = endpoint_for(spec, target)
            form = {
                "model": target.model_name,
                "response_format": "verbose_json" if request.include_segments else "json",
            }
            if request.language:
                form["language"] = request.language.split("-")[0].lower()  # ISO-639-1, as Whisper wants
            if request.prompt:
                form["prompt"] = request.prompt
            files = {
                "file": (
                    request.file_name or "audio",
                    request.audio,
                    request.mime_type or "application/octet-stream",
                )
            }
            data = await self._http.request_json(
                endpoint, "POST", join_url(base_url, spec.transcription_path), files=files, data=form
            )
        except ModelError as exc:
            raise stamped(exc, target) from None
        response = pb.TranscribeResponse(
            text=str(data.get("text") or ""),
            language=str(data.get("language") or request.language),
            model_id=target.model_id,
        )
        if data.get("duration") is not None:
            response.duration.CopyFrom(_duration(float(data["duration"])))
        segments = (data.get("segments") or []) if request.include_segments else []
        for segment in segments:
            response.segments.append(
                pb.TranscriptSegment(
                    start=_duration(float(segment.get("start", 0))),
                    end=_duration(float(segment.get("end", 0))),
                    text=str(segment.get("text", "")),
                )
            )
        return response


# -- request pieces ---------------------------------------------------------------------------------


def _tool(tool: pb.ToolDefinition, field: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = parse_schema(tool.parameters_json_schema, field) or {
        "type": "object",
        "properties": {},
    }
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _tool_choice(spec: ProviderSpec, choice: pb.ToolChoice) -> Any:
    kind = choice.WhichOneof("choice")
    if kind == "tool_name":
        # Providers that cannot be forced get "auto" with the tool on offer; the caller sees which
        # tool was called (or not) in the answer.
        if not spec.tool_choice_required:
            return "auto"
        return {"type": "function", "function": {"name": choice.tool_name}}
    if kind == "mode":
        if choice.mode == pb.TOOL_CHOICE_MODE_AUTO:
            return "auto"
        if choice.mode == pb.TOOL_CHOICE_MODE_NONE:
            return "none"
        if choice.mode == pb.TOOL_CHOICE_MODE_REQUIRED:
            return "required" if spec.tool_choice_required else "auto"
    return None


def _response_format(spec: ProviderSpec, fmt: pb.ResponseFormat) -> dict[str, Any] | None:
    if fmt.type == pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA and spec.json_schema_output:
        schema: dict[str, Any] = {
            "name": fmt.schema_name or "response",
            "schema": parse_schema(fmt.json_schema, "response_format.json_schema"),
        }
        if fmt.strict:
            schema["strict"] = True
        return {"type": "json_schema", "json_schema": schema}
    if fmt.type in (pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT):
        return {"type": "json_object"} if spec.json_object_output else None
    return None


def _rejects_logprobs(error: ModelError) -> bool:
    """A provider that has logprobs, but not for this model (reasoning models answer 400 to them)."""
    return (
        error.code == pb.MODEL_ERROR_CODE_PROVIDER_ERROR
        and error.params.get("status") == 400
        and "logprobs" in error.detail.lower()
    )


def _image_field(detail: str, image_urls: list[tuple[str, str]]) -> str:
    """The message part a provider-side image failure is about: the URL it names, or the only one."""
    for field, url in image_urls:
        if url in detail:
            return field
    return image_urls[0][0] if len(image_urls) == 1 else ""


def _duration(seconds: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def _malformed(exc: Exception, data: Any) -> ModelError:
    return ModelError(
        pb.MODEL_ERROR_CODE_PROVIDER_ERROR,
        f"unexpected answer ({type(exc).__name__}: {exc}): {json_text(data)}",
    )


# -- response parsing -------------------------------------------------------------------------------


class _ChatState:
    def __init__(self, include_reasoning: bool) -> None:
        self.include_reasoning = include_reasoning
        self.tools = _ToolCallIndexer()
        self.finished = False
        self.usage: pb.TokenUsage | None = None

    def events(self, chunk: Mapping[str, Any]) -> list[pb.ChatStreamResponse]:
        """Events of one streamed chunk (or of a whole non-streamed completion)."""
        if chunk.get("error"):
            raise error_from_response(0, json_text(chunk))
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
                finish = _FINISH.get(str(reason), pb.FINISH_REASON_UNSPECIFIED)
                out.append(pb.ChatStreamResponse(finish=pb.ChatFinish(reason=finish)))
        if chunk.get("usage"):
            self.usage = usage_from(chunk["usage"])
        return out


async def _parse_chat_stream(
    stream: ResponseStream, *, include_reasoning: bool
) -> AsyncIterator[pb.ChatStreamResponse]:
    state = _ChatState(include_reasoning)
    content_type = stream.response.headers.get("content-type", "")
    if "text/event-stream" not in content_type and "json" in content_type:
        # The provider answered without streaming (or with an error object and status 200).
        body = b"".join([chunk async for chunk in stream.chunks()]).decode("utf-8", errors="replace")
        try:
            whole = json.loads(body)
        except ValueError as exc:
            raise ModelError(pb.MODEL_ERROR_CODE_PROVIDER_ERROR, f"unexpected answer: {body[:4000]}") from exc
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
                    pb.MODEL_ERROR_CODE_PROVIDER_ERROR, f"unparseable stream chunk: {data[:4000]}"
                ) from exc
            for event in state.events(chunk):
                yield event
    if not state.finished:
        if not done and state.usage is None:
            raise ModelError(pb.MODEL_ERROR_CODE_PROVIDER_ERROR, "the stream ended before the model finished")
        yield pb.ChatStreamResponse(finish=pb.ChatFinish(reason=pb.FINISH_REASON_UNSPECIFIED))
    if state.usage is not None:
        yield pb.ChatStreamResponse(usage=state.usage)
