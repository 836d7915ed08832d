"""The model-call half of ``ModelHubService``: chat, Decide, embeddings, rerank, images, speech.

Each handler checks the request against the limits in the settings, resolves the model through the
registry (explicit id, else the tenant's default for the type), calls the provider adapter of the
model's API style inside one observed span (:func:`~knowsphere_modelhub.api.observe.model_call`), and
answers a :class:`ModelError` as a status with ``ModelErrorDetail`` (:mod:`~knowsphere_modelhub.api.errors`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import grpc

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import FinishReason, ModelErrorCode, ModelType
from knowsphere_modelhub.api.errors import abort, answer, caller_language
from knowsphere_modelhub.api.observe import model_call
from knowsphere_modelhub.domain.decide import decide
from knowsphere_modelhub.domain.errors import ModelError, invalid_input
from knowsphere_modelhub.domain.ports import ProviderAdapter
from knowsphere_modelhub.domain.providers import PROVIDERS, ProviderSpec
from knowsphere_modelhub.domain.records import CallTarget
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.domain.validation import type_list
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_telemetry import LlmObserver, attributes

# A finish the provider gave no reason for, as the span's gen_ai.response.finish_reasons shows it.
UNSPECIFIED_FINISH = "unspecified"

DEFAULT_IMAGE_PROMPT = {
    "en": "Describe this image in detail: what it shows, any text in it, and anything notable.",
    "zh": "请详细描述这张图片：内容、其中的文字以及值得注意的细节。",
}


class ModelCallsServicer:
    """The model-call RPCs of ``knowsphere.modelhub.v1.ModelHubService``."""

    def __init__(
        self,
        registry: Registry,
        adapters: Mapping[str, ProviderAdapter],
        settings: Settings,
        observer: LlmObserver,
    ) -> None:
        self._registry = registry
        self._adapters = adapters
        self._settings = settings
        self._observer = observer

    def _adapter(self, target: CallTarget) -> tuple[ProviderAdapter, ProviderSpec]:
        spec = PROVIDERS[target.provider_id]
        return self._adapters[spec.api_style], spec

    async def _target(self, model_id: str, model_type: ModelType) -> CallTarget:
        tenant = require_identity().tenant_id
        record, _ = await self._registry.resolve(tenant, model_id, model_type)
        return self._registry.call_target(record)

    def _language(self, context: grpc.aio.ServicerContext) -> str:
        return caller_language(context, self._settings.default_language)

    async def ChatStream(
        self, request: pb.ChatStreamRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        language = self._language(context)
        try:
            if not request.messages:
                raise invalid_input("messages", "at least one message is required")
            has_image = any(p.HasField("image") for m in request.messages for p in m.content)
            target = await self._target(
                request.model_id,
                ModelType.VLM if has_image and not request.model_id else ModelType.KNOWLEDGE_QA,
            )
            if has_image and ModelType.VLM not in target.types:
                raise ModelError(
                    ModelErrorCode.WRONG_MODEL_TYPE,
                    "image part sent to a model without the VLM type",
                    model_id=target.model_id,
                    type=ModelType.VLM,
                    types=type_list(target.types),
                )
            adapter, _ = self._adapter(target)
            yield pb.ChatStreamResponse(
                started=pb.ChatStarted(
                    model_id=target.model_id,
                    provider_id=target.provider_id,
                    model_name=target.model_name,
                    context_window=target.parameters.context_window or 0,
                )
            )
            with model_call(
                self._observer,
                "chat",
                target,
                purpose=request.purpose,
                parameters={
                    "temperature": request.temperature
                    if request.HasField("temperature")
                    else target.parameters.temperature,
                    "max_tokens": request.max_tokens
                    if request.HasField("max_tokens")
                    else target.parameters.max_tokens,
                },
            ) as (_, call):
                text: list[str] = []
                async for event in adapter.chat_stream(target, request):
                    kind = event.WhichOneof("event")
                    if kind == "text_delta":
                        text.append(event.text_delta.text)
                    elif kind == "finish":
                        reason = FinishReason.from_number(event.finish.reason)
                        call.finish_reason = reason.value if reason is not None else UNSPECIFIED_FINISH
                    elif kind == "usage":
                        call.input_tokens = event.usage.prompt_tokens
                        call.output_tokens = event.usage.completion_tokens
                        if event.usage.HasField("cached_prompt_tokens"):
                            call.cached_input_tokens = event.usage.cached_prompt_tokens
                    yield event
                call.output = "".join(text)
        except ModelError as error:
            await abort(context, error, language)

    async def Decide(self, request: pb.DecideRequest, context: grpc.aio.ServicerContext) -> pb.DecideResponse:
        async def work() -> pb.DecideResponse:
            target = await self._target(request.model_id, ModelType.KNOWLEDGE_QA)
            adapter, spec = self._adapter(target)
            with model_call(self._observer, "decide", target, purpose=request.purpose or "decide") as (
                span,
                call,
            ):
                response = await decide(
                    adapter, target, spec, request, max_labels=self._settings.max_decide_labels
                )
                call.output = {"label": response.label, "probability": response.probability}
                call.input_tokens = response.usage.prompt_tokens or None
                call.output_tokens = response.usage.completion_tokens or None
                span.set_attribute(attributes.DECIDE_METHOD, pb.DecisionMethod.Name(response.method))
                return response

        return await answer(context, self._settings.default_language, work)

    async def Embed(self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext) -> pb.EmbedResponse:
        async def work() -> pb.EmbedResponse:
            texts = list(request.texts)
            if not texts:
                raise invalid_input("texts", "at least one text is required")
            if len(texts) > self._settings.max_embed_batch:
                raise invalid_input(
                    "texts", f"{len(texts)} texts; the limit is {self._settings.max_embed_batch} per call"
                )
            for index, text in enumerate(texts):
                if not text.strip():
                    raise invalid_input(f"texts[{index}]", "empty text")
            target = await self._target(request.model_id, ModelType.EMBEDDING)
            adapter, _ = self._adapter(target)
            with model_call(self._observer, "embeddings", target, purpose="embed") as (span, call):
                result = await adapter.embed(target, texts, request.input_type)
                call.input_tokens = result.prompt_tokens
                span.set_attribute(attributes.EMBED_TEXTS, len(texts))
            dimension = len(result.vectors[0]) if result.vectors else 0
            return pb.EmbedResponse(
                embeddings=[pb.Embedding(values=v) for v in result.vectors],
                model_id=target.model_id,
                dimension=dimension,
                usage=pb.TokenUsage(
                    prompt_tokens=result.prompt_tokens or 0, total_tokens=result.prompt_tokens or 0
                ),
            )

        return await answer(context, self._settings.default_language, work)

    async def Rerank(self, request: pb.RerankRequest, context: grpc.aio.ServicerContext) -> pb.RerankResponse:
        async def work() -> pb.RerankResponse:
            documents = list(request.documents)
            if not request.query.strip():
                raise invalid_input("query", "empty query")
            if not documents:
                raise invalid_input("documents", "at least one document is required")
            if len(documents) > self._settings.max_rerank_documents:
                raise invalid_input(
                    "documents",
                    f"{len(documents)} documents; the limit is {self._settings.max_rerank_documents}",
                )
            target = await self._target(request.model_id, ModelType.RERANK)
            adapter, _ = self._adapter(target)
            with model_call(self._observer, "rerank", target, purpose="rerank") as (span, _call):
                scored = await adapter.rerank(target, request.query, documents, request.top_n)
                span.set_attribute(attributes.RERANK_DOCUMENTS, len(documents))
            return pb.RerankResponse(
                results=[pb.RerankResult(index=i, relevance_score=s) for i, s in scored],
                model_id=target.model_id,
            )

        return await answer(context, self._settings.default_language, work)

    async def DescribeImage(
        self, request: pb.DescribeImageRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeImageResponse:
        language = self._language(context)

        async def work() -> pb.DescribeImageResponse:
            image = request.image
            if not image.HasField("url") and not image.HasField("data"):
                raise invalid_input("image", "an image URL or image bytes are required")
            if image.HasField("data"):
                if len(image.data) > self._settings.max_image_bytes:
                    raise invalid_input(
                        "image.data",
                        f"{len(image.data)} bytes; the limit is {self._settings.max_image_bytes}",
                    )
                if not image.mime_type.startswith("image/"):
                    raise invalid_input(
                        "image.mime_type", "an image MIME type such as image/png is required with data"
                    )
            target = await self._target(request.model_id, ModelType.VLM)
            adapter, _ = self._adapter(target)
            answer_language = request.language or language
            prompt = (
                request.prompt or DEFAULT_IMAGE_PROMPT["zh" if answer_language.startswith("zh") else "en"]
            )
            chat = pb.ChatStreamRequest(
                model_id=target.model_id,
                messages=[
                    pb.ChatMessage(
                        role=pb.CHAT_ROLE_USER,
                        content=[pb.ContentPart(text=prompt), pb.ContentPart(image=image)],
                    )
                ],
                purpose=request.purpose or "describe_image",
            )
            if request.HasField("max_tokens"):
                chat.max_tokens = request.max_tokens
            usage = pb.TokenUsage()
            parts: list[str] = []
            with model_call(self._observer, "describe_image", target, purpose=chat.purpose) as (_, call):
                async for event in adapter.chat_stream(target, chat):
                    if event.HasField("text_delta"):
                        parts.append(event.text_delta.text)
                    elif event.HasField("usage"):
                        usage.CopyFrom(event.usage)
                        call.input_tokens, call.output_tokens = usage.prompt_tokens, usage.completion_tokens
                call.output = "".join(parts)
            return pb.DescribeImageResponse(description="".join(parts), model_id=target.model_id, usage=usage)

        return await answer(context, self._settings.default_language, work)

    async def Transcribe(
        self, request: pb.TranscribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TranscribeResponse:
        async def work() -> pb.TranscribeResponse:
            if not request.audio:
                raise invalid_input("audio", "audio bytes are required")
            if len(request.audio) > self._settings.max_audio_bytes:
                raise invalid_input(
                    "audio", f"{len(request.audio)} bytes; the limit is {self._settings.max_audio_bytes}"
                )
            target = await self._target(request.model_id, ModelType.ASR)
            adapter, _ = self._adapter(target)
            with model_call(self._observer, "transcribe", target, purpose="transcribe") as (_, call):
                response = await adapter.transcribe(target, request)
                call.output = response.text
            response.model_id = target.model_id
            return response

        return await answer(context, self._settings.default_language, work)
