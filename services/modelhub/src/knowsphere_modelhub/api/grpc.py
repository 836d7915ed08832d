"""The gRPC face of modelhub: the registry API and every model call.

Handlers are thin: they read the caller's tenant, resolve the model through the registry, call the
provider adapter for the model's provider, and turn :class:`ModelError` into a gRPC status whose
details carry ``ModelErrorDetail`` (code, message in the caller's language, model, field).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import any_pb2
from google.protobuf.duration_pb2 import Duration
from google.rpc import status_pb2
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_modelhub.adapters.ports import ProviderAdapter, Usage
from knowsphere_modelhub.api.convert import params_from_proto, record_to_proto
from knowsphere_modelhub.api.observe import model_call
from knowsphere_modelhub.domain.decide import decide
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.providers import PROVIDERS, ProviderSpec, to_proto
from knowsphere_modelhub.domain.records import ASR, EMBEDDING, KNOWLEDGE_QA, RERANK, VLM, CallTarget
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_telemetry import LlmObserver

log = structlog.get_logger(__name__)
T = TypeVar("T")

DEFAULT_IMAGE_PROMPT = {
    "en": "Describe this image in detail: what it shows, any text in it, and anything notable.",
    "zh": "请详细描述这张图片：内容、其中的文字以及值得注意的细节。",
}


def _language(context: grpc.aio.ServicerContext, default: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "accept-language" and value:
            first = str(value).split(",")[0].split(";")[0].strip()
            return first or default
    return default


def _invalid(field: str, reason: str) -> ModelError:
    return ModelError(
        pb.MODEL_ERROR_CODE_INVALID_INPUT, f"{field}: {reason}", field=field, reason=f"{field}: {reason}"
    )


async def _abort(context: grpc.aio.ServicerContext, error: ModelError, language: str) -> None:
    message = error.user_message(language)
    detail = pb.ModelErrorDetail(
        code=error.code,  # type: ignore[arg-type]
        user_message=message,
        language=language,
        model_id=error.model_id,
        provider_id=error.provider_id,
        field=error.field,
    )
    if error.retry_after is not None:
        detail.retry_after.CopyFrom(Duration(seconds=int(error.retry_after)))
    packed = any_pb2.Any()
    packed.Pack(detail)
    status = status_pb2.Status(code=error.grpc_status.value[0], message=message, details=[packed])
    log.warning(
        "model call failed",
        code=error.code_name,
        model_id=error.model_id,
        provider_id=error.provider_id,
        detail=error.detail[:2000],
    )
    await context.abort_with_status(rpc_status.to_status(status))


class ModelHubServicer:
    """Implements ``knowsphere.modelhub.v1.ModelHubService``."""

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

    # --- plumbing ------------------------------------------------------------------------------

    async def _guard(self, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await work()
        except ModelError as error:
            await _abort(context, error, _language(context, self._settings.default_language))
            raise AssertionError("unreachable") from error

    def _adapter(self, target: CallTarget) -> tuple[ProviderAdapter, ProviderSpec]:
        spec = PROVIDERS[target.provider_id]
        return self._adapters[spec.api_style], spec

    async def _target(self, model_id: str, model_type: int) -> CallTarget:
        tenant = require_identity().tenant_id
        record, _ = await self._registry.resolve(tenant, model_id, model_type)
        return self._registry.call_target(record)

    async def _model(self, record_id: str) -> pb.Model:
        tenant = require_identity().tenant_id
        record = await self._registry.get(tenant, record_id)
        return record_to_proto(record, await self._registry.defaults_of(tenant, record.id))

    # --- registry ------------------------------------------------------------------------------

    async def CreateModel(
        self, request: pb.CreateModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateModelResponse:
        async def work() -> pb.CreateModelResponse:
            record = await self._registry.create(
                require_identity().tenant_id,
                display_name=request.display_name,
                provider_id=request.provider_id,
                model_name=request.model_name,
                types=list(request.types),
                base_url=request.base_url,
                parameters=params_from_proto(request.parameters),
                api_key=request.api_key or None,
                description=request.description,
            )
            return pb.CreateModelResponse(model=record_to_proto(record, []))

        return await self._guard(context, work)

    async def GetModel(
        self, request: pb.GetModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetModelResponse:
        async def work() -> pb.GetModelResponse:
            return pb.GetModelResponse(model=await self._model(request.model_id))

        return await self._guard(context, work)

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        async def work() -> pb.ListModelsResponse:
            tenant = require_identity().tenant_id
            page = await self._registry.list(
                tenant,
                model_type=request.type or None,
                provider_id=request.provider_id or None,
                page_size=request.page_size,
                page_token=request.page_token,
            )
            models = [
                record_to_proto(r, await self._registry.defaults_of(tenant, r.id)) for r in page.records
            ]
            return pb.ListModelsResponse(models=models, next_page_token=page.next_page_token)

        return await self._guard(context, work)

    async def UpdateModel(
        self, request: pb.UpdateModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateModelResponse:
        async def work() -> pb.UpdateModelResponse:
            changes: dict[str, Any] = {}
            for name in ("display_name", "model_name", "base_url", "api_key", "description"):
                if request.HasField(name):
                    changes[name] = getattr(request, name)
            if request.HasField("types"):
                changes["types"] = list(request.types.types)
            if request.HasField("parameters"):
                changes["parameters"] = params_from_proto(request.parameters)
            tenant = require_identity().tenant_id
            record = await self._registry.update(tenant, request.model_id, **changes)
            return pb.UpdateModelResponse(
                model=record_to_proto(record, await self._registry.defaults_of(tenant, record.id))
            )

        return await self._guard(context, work)

    async def DeleteModel(
        self, request: pb.DeleteModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteModelResponse:
        async def work() -> pb.DeleteModelResponse:
            await self._registry.delete(require_identity().tenant_id, request.model_id)
            return pb.DeleteModelResponse()

        return await self._guard(context, work)

    async def SetDefaultModel(
        self, request: pb.SetDefaultModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetDefaultModelResponse:
        async def work() -> pb.SetDefaultModelResponse:
            tenant = require_identity().tenant_id
            await self._registry.set_default(tenant, request.type, request.model_id)
            return pb.SetDefaultModelResponse(
                default_model=await self._resolved_default(tenant, request.type)
            )

        return await self._guard(context, work)

    async def GetDefaultModel(
        self, request: pb.GetDefaultModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDefaultModelResponse:
        async def work() -> pb.GetDefaultModelResponse:
            tenant = require_identity().tenant_id
            return pb.GetDefaultModelResponse(
                default_model=await self._resolved_default(tenant, request.type)
            )

        return await self._guard(context, work)

    async def _resolved_default(self, tenant: str, model_type: int) -> pb.ResolvedDefault:
        if model_type not in (EMBEDDING, RERANK, KNOWLEDGE_QA, VLM, ASR):
            raise _invalid("type", "a model type is required")
        record, source = await self._registry.get_default(tenant, model_type)
        resolved = pb.ResolvedDefault(type=model_type, source=source)  # type: ignore[arg-type]
        if record is not None:
            resolved.model.CopyFrom(
                record_to_proto(record, await self._registry.defaults_of(tenant, record.id))
            )
        return resolved

    async def PutModelUsage(
        self, request: pb.PutModelUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutModelUsageResponse:
        async def work() -> pb.PutModelUsageResponse:
            usage = Usage(request.model_id, request.consumer_kind, request.consumer_id, request.consumer_name)
            await self._registry.put_usage(require_identity().tenant_id, usage)
            return pb.PutModelUsageResponse(
                usage=pb.ModelUsage(
                    model_id=usage.model_id,
                    consumer_kind=usage.consumer_kind,  # type: ignore[arg-type]
                    consumer_id=usage.consumer_id,
                    consumer_name=usage.consumer_name,
                )
            )

        return await self._guard(context, work)

    async def DeleteModelUsage(
        self, request: pb.DeleteModelUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteModelUsageResponse:
        async def work() -> pb.DeleteModelUsageResponse:
            await self._registry.delete_usage(
                require_identity().tenant_id, request.model_id, request.consumer_kind, request.consumer_id
            )
            return pb.DeleteModelUsageResponse()

        return await self._guard(context, work)

    async def ListModelUsages(
        self, request: pb.ListModelUsagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelUsagesResponse:
        async def work() -> pb.ListModelUsagesResponse:
            usages = await self._registry.list_usages(require_identity().tenant_id, request.model_id)
            return pb.ListModelUsagesResponse(
                usages=[
                    pb.ModelUsage(
                        model_id=u.model_id,
                        consumer_kind=u.consumer_kind,  # type: ignore[arg-type]
                        consumer_id=u.consumer_id,
                        consumer_name=u.consumer_name,
                    )
                    for u in usages
                ]
            )

        return await self._guard(context, work)

    async def ListProviders(
        self, request: pb.ListProvidersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListProvidersResponse:
        return pb.ListProvidersResponse(providers=[to_proto(spec) for spec in PROVIDERS.values()])

    # --- calls ---------------------------------------------------------------------------------

    async def ChatStream(
        self, request: pb.ChatStreamRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        language = _language(context, self._settings.default_language)
        try:
            if not request.messages:
                raise _invalid("messages", "at least one message is required")
            has_image = any(p.HasField("image") for m in request.messages for p in m.content)
            target = await self._target(
                request.model_id, VLM if has_image and not request.model_id else KNOWLEDGE_QA
            )
            if has_image and VLM not in target.types:
                raise ModelError(
                    pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE,
                    "image part sent to a model without the VLM type",
                    model_id=target.model_id,
                    type="vlm",
                    types=",".join(sorted(str(t) for t in target.types)),
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
                        call.finish_reason = (
                            pb.FinishReason.Name(event.finish.reason).removeprefix("FINISH_REASON_").lower()
                        )
                    elif kind == "usage":
                        call.input_tokens = event.usage.prompt_tokens
                        call.output_tokens = event.usage.completion_tokens
                        if event.usage.HasField("cached_prompt_tokens"):
                            call.cached_input_tokens = event.usage.cached_prompt_tokens
                    yield event
                call.output = "".join(text)
        except ModelError as error:
            await _abort(context, error, language)

    async def Decide(self, request: pb.DecideRequest, context: grpc.aio.ServicerContext) -> pb.DecideResponse:
        async def work() -> pb.DecideResponse:
            target = await self._target(request.model_id, KNOWLEDGE_QA)
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
                span.set_attribute("ks.decide.method", pb.DecisionMethod.Name(response.method))
                return response

        return await self._guard(context, work)

    async def Embed(self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext) -> pb.EmbedResponse:
        async def work() -> pb.EmbedResponse:
            texts = list(request.texts)
            if not texts:
                raise _invalid("texts", "at least one text is required")
            if len(texts) > self._settings.max_embed_batch:
                raise _invalid(
                    "texts", f"{len(texts)} texts; the limit is {self._settings.max_embed_batch} per call"
                )
            for index, text in enumerate(texts):
                if not text.strip():
                    raise _invalid(f"texts[{index}]", "empty text")
            target = await self._target(request.model_id, EMBEDDING)
            adapter, _ = self._adapter(target)
            with model_call(self._observer, "embeddings", target, purpose="embed") as (span, call):
                result = await adapter.embed(target, texts, request.input_type)
                call.input_tokens = result.prompt_tokens
                span.set_attribute("ks.embed.texts", len(texts))
            dimension = len(result.vectors[0]) if result.vectors else 0
            return pb.EmbedResponse(
                embeddings=[pb.Embedding(values=v) for v in result.vectors],
                model_id=target.model_id,
                dimension=dimension,
                usage=pb.TokenUsage(
                    prompt_tokens=result.prompt_tokens or 0, total_tokens=result.prompt_tokens or 0
                ),
            )

        return await self._guard(context, work)

    async def Rerank(self, request: pb.RerankRequest, context: grpc.aio.ServicerContext) -> pb.RerankResponse:
        async def work() -> pb.RerankResponse:
            documents = list(request.documents)
            if not request.query.strip():
                raise _invalid("query", "empty query")
            if not documents:
                raise _invalid("documents", "at least one document is required")
            if len(documents) > self._settings.max_rerank_documents:
                raise _invalid(
                    "documents",
                    f"{len(documents)} documents; the limit is {self._settings.max_rerank_documents}",
                )
            target = await self._target(request.model_id, RERANK)
            adapter, _ = self._adapter(target)
            with model_call(self._observer, "rerank", target, purpose="rerank") as (span, _call):
                scored = await adapter.rerank(target, request.query, documents, request.top_n)
                span.set_attribute("ks.rerank.documents", len(documents))
            return pb.RerankResponse(
                results=[pb.RerankResult(index=i, relevance_score=s) for i, s in scored],
                model_id=target.model_id,
            )

        return await self._guard(context, work)

    async def DescribeImage(
        self, request: pb.DescribeImageRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeImageResponse:
        language = _language(context, self._settings.default_language)

        async def work() -> pb.DescribeImageResponse:
            image = request.image
            if not image.HasField("url") and not image.HasField("data"):
                raise _invalid("image", "an image URL or image bytes are required")
            if image.HasField("data"):
                if len(image.data) > self._settings.max_image_bytes:
                    raise _invalid(
                        "image.data",
                        f"{len(image.data)} bytes; the limit is {self._settings.max_image_bytes}",
                    )
                if not image.mime_type.startswith("image/"):
                    raise _invalid(
                        "image.mime_type", "an image MIME type such as image/png is required with data"
                    )
            target = await self._target(request.model_id, VLM)
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

        try:
            return await work()
        except ModelError as error:
            await _abort(context, error, language)
            raise AssertionError("unreachable") from error

    async def Transcribe(
        self, request: pb.TranscribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TranscribeResponse:
        async def work() -> pb.TranscribeResponse:
            if not request.audio:
                raise _invalid("audio", "audio bytes are required")
            if len(request.audio) > self._settings.max_audio_bytes:
                raise _invalid(
                    "audio", f"{len(request.audio)} bytes; the limit is {self._settings.max_audio_bytes}"
                )
            target = await self._target(request.model_id, ASR)
            adapter, _ = self._adapter(target)
            with model_call(self._observer, "transcribe", target, purpose="transcribe") as (_, call):
                response = await adapter.transcribe(target, request)
                call.output = response.text
            response.model_id = target.model_id
            return response

        return await self._guard(context, work)


def build_binding(servicer: ModelHubServicer) -> ServiceBinding:
    return bind_service(CONTRACTS["modelhub"].descriptor, servicer, pending="")
