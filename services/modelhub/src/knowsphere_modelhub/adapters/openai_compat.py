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

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import (
    ChatRole,
    EmbedInputType,
    ImageDetail,
    ImageInputFormat,
    ModelErrorCode,
    ModelType,
    ResponseFormatType,
    ToolChoiceMode,
)
from knowsphere_contracts.convert import duration
from knowsphere_modelhub.adapters.call_setup import (
    DEFAULT_MAX_IMAGE_BYTES,
    HttpProviderAdapter,
    endpoint_for,
    max_tokens_of,
    merged_extras,
    no_images,
    parse_json_object,
    spec_for,
    stamped,
    temperature_of,
    unsupported,
)
from knowsphere_modelhub.adapters.http import ProviderHttp, join_url, json_text
from knowsphere_modelhub.adapters.images import inline_image, parse_data_url
from knowsphere_modelhub.adapters.openai_stream import parse_chat_stream
from knowsphere_modelhub.domain.errors import ModelError, invalid_input
from knowsphere_modelhub.domain.ports import EmbedResult, TokenLogprob
from knowsphere_modelhub.domain.providers import PROVIDERS, ProviderSpec
from knowsphere_modelhub.domain.records import CallTarget
from knowsphere_modelhub.settings import Settings

_EPHEMERAL = {"type": "ephemeral"}

DEFAULT_MAX_AUDIO_BYTES: int = Settings.model_fields["max_audio_bytes"].default


def l2_normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [float(v) / norm for v in vector] if norm > 0 else [float(v) for v in vector]


class OpenAICompatibleAdapter(HttpProviderAdapter):
    """:class:`~knowsphere_modelhub.domain.ports.ProviderAdapter` for api_style "openai"."""

    def __init__(
        self,
        http: ProviderHttp,
        providers: Mapping[str, ProviderSpec] = PROVIDERS,
        *,
        max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
        max_audio_bytes: int = DEFAULT_MAX_AUDIO_BYTES,
    ) -> None:
        super().__init__(http, providers, max_image_bytes=max_image_bytes)
        self._max_audio_bytes = max_audio_bytes

    # -- chat -------------------------------------------------------------------------------------

    async def chat_stream(
        self, target: CallTarget, request: pb.ChatStreamRequest
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        image_urls: list[tuple[str, str]] = []
        try:
            spec, endpoint, url = self._chat_call(target)
            messages = await self._messages(spec, request.messages, image_urls)
            body = self._chat_body(spec, target, request, messages)
            async with self._http.stream(endpoint, "POST", url, json_body=body) as stream:
                async for event in parse_chat_stream(stream, include_reasoning=request.include_reasoning):
                    yield event
        except ModelError as exc:
            if exc.code == ModelErrorCode.IMAGE_URL_UNREACHABLE and not exc.field:
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
            role = ChatRole.from_number(message.role)
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
            out: dict[str, Any] = {"role": role.value}
            if message.cache_breakpoint and spec.cache_breakpoints and parts:
                parts[-1]["cache_control"] = dict(_EPHEMERAL)
                out["content"] = parts
            elif has_image or (len(parts) > 1 and spec.content_arrays):
                out["content"] = parts
            elif parts:
                out["content"] = "".join(p["text"] for p in parts)
            else:
                out["content"] = None if message.tool_calls else ""
            if message.name and role is not ChatRole.TOOL:
                out["name"] = message.name
            if role is ChatRole.TOOL:
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
        if spec.image_input is None:
            raise no_images(spec, field)
        source = image.WhichOneof("source")
        if (
            source == "url"
            and image.url.startswith(("http://", "https://"))
            and spec.image_input != ImageInputFormat.BASE64_ONLY
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
        detail = ImageDetail.from_number(image.detail)
        if detail is not None:
            payload["detail"] = detail.value
        return {"type": "image_url", "image_url": payload}

    # -- logprobs (Decide) ------------------------------------------------------------------------

    async def next_token_logprobs(
        self, target: CallTarget, messages: Sequence[pb.ChatMessage], top: int
    ) -> list[TokenLogprob]:
        spec = spec_for(self._providers, target)
        try:
            if not spec.logprobs or not spec.chat_path:
                raise ModelError(
                    ModelErrorCode.WRONG_MODEL_TYPE,
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
                        ModelErrorCode.WRONG_MODEL_TYPE,
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
                raise unsupported(target, spec, ModelType.EMBEDDING)
            if not texts:
                return EmbedResult(vectors=[])
            endpoint, base_url = endpoint_for(spec, target)
            body: dict[str, Any] = {"model": target.model_name, "input": list(texts)}
            hint = spec.embed_input_hint
            if hint is not None:
                query = EmbedInputType.from_number(input_type) is EmbedInputType.QUERY
                body[hint.field] = hint.query if query else hint.document
            data = await self._http.request_json(
                endpoint, "POST", join_url(base_url, spec.embeddings_path), json_body=body
            )
            items = sorted(data.get("data") or [], key=lambda item: int(item.get("index", 0)))
            if len(items) != len(texts):
                raise ModelError(
                    ModelErrorCode.PROVIDER_ERROR,
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
                raise unsupported(target, spec, ModelType.RERANK)
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
                ModelError(ModelErrorCode.PROVIDER_ERROR, f"rerank index out of range: {json_text(data)}"),
                target,
            )
        scored.sort(key=lambda pair: pair[1], reverse=True)
        return scored[:n]

    async def transcribe(self, target: CallTarget, request: pb.TranscribeRequest) -> pb.TranscribeResponse:
        spec = spec_for(self._providers, target)
        try:
            if not spec.transcription_path:
                raise unsupported(target, spec, ModelType.ASR)
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
        seconds = data.get("duration")
        segments = (data.get("segments") or []) if request.include_segments else []
        return pb.TranscribeResponse(
            text=str(data.get("text") or ""),
            language=str(data.get("language") or request.language),
            model_id=target.model_id,
            duration=duration(float(seconds)) if seconds is not None else None,
            segments=[
                pb.TranscriptSegment(
                    start=duration(float(segment.get("start", 0))),
                    end=duration(float(segment.get("end", 0))),
                    text=str(segment.get("text", "")),
                )
                for segment in segments
            ],
        )


# -- request pieces ---------------------------------------------------------------------------------


def _tool(tool: pb.ToolDefinition, field: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = parse_json_object(tool.parameters_json_schema, field) or {
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
    mode = ToolChoiceMode.from_number(choice.mode) if kind == "mode" else None
    if mode is ToolChoiceMode.REQUIRED and not spec.tool_choice_required:
        return ToolChoiceMode.AUTO.value
    return mode.value if mode is not None else None


def _response_format(spec: ProviderSpec, fmt: pb.ResponseFormat) -> dict[str, Any] | None:
    kind = ResponseFormatType.from_number(fmt.type)
    if kind is ResponseFormatType.JSON_SCHEMA and spec.json_schema_output:
        schema: dict[str, Any] = {
            "name": fmt.schema_name or "response",
            "schema": parse_json_object(fmt.json_schema, "response_format.json_schema"),
        }
        if fmt.strict:
            schema["strict"] = True
        return {"type": kind.value, "json_schema": schema}
    if kind in (ResponseFormatType.JSON_SCHEMA, ResponseFormatType.JSON_OBJECT):
        return {"type": ResponseFormatType.JSON_OBJECT.value} if spec.json_object_output else None
    return None


def _rejects_logprobs(error: ModelError) -> bool:
    """A provider that has logprobs, but not for this model (reasoning models answer 400 to them)."""
    return (
        error.code == ModelErrorCode.PROVIDER_ERROR
        and error.params.get("status") == 400
        and "logprobs" in error.detail.lower()
    )


def _image_field(detail: str, image_urls: list[tuple[str, str]]) -> str:
    """The message part a provider-side image failure is about: the URL it names, or the only one."""
    for field, url in image_urls:
        if url in detail:
            return field
    return image_urls[0][0] if len(image_urls) == 1 else ""


def _malformed(exc: Exception, data: Any) -> ModelError:
    return ModelError(
        ModelErrorCode.PROVIDER_ERROR,
        f"unexpected answer ({type(exc).__name__}: {exc}): {json_text(data)}",
    )
