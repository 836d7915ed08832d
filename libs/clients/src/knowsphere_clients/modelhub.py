"""The modelhub client: the model registry and every model call (chat, decide, embed, rerank, VLM, ASR).

Facts about models that callers consult on every request — a tenant's default model of a type, the
languages an embedding model reads — are cached per tenant for ``cache_seconds`` and dropped at once by
:meth:`ModelHubClient.invalidate` (called on ``ks.modelhub.model.changed.v1`` events), so a model that
changes is seen at the next request, not after the cache expires.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ChatRole, ModelErrorCode, ModelType
from knowsphere_clients.base import ServiceClient
from knowsphere_clients.errors import NotFound, ServiceError
from knowsphere_runtime.identity import current_identity

ChatInput = mpb.ChatMessage | Mapping[str, str]
"""A chat message: a ChatMessage, or ``{"role": "system" | "user" | "assistant", "content": text}``."""


@dataclass(frozen=True)
class EmbeddingModel:
    """An embedding model as a knowledge base records it."""

    model_id: str
    dimension: int


@dataclass(frozen=True)
class Embedded:
    """The vectors of some texts, in input order, and the tokens the model read for them (0 when the
    provider reports no count)."""

    vectors: list[list[float]]
    prompt_tokens: int


class NoModelConfigured(LookupError):
    """The tenant has no model of the type asked for (and none was named)."""


class WrongModelType(ValueError):
    """The named model exists but cannot serve the type asked for."""


def chat_message(role: ChatRole | str, text: str) -> mpb.ChatMessage:
    """A text-only chat message."""
    return mpb.ChatMessage(role=ChatRole(role).to_proto(), content=[mpb.ContentPart(text=text)])


def _messages(messages: Sequence[ChatInput]) -> list[mpb.ChatMessage]:
    return [m if isinstance(m, mpb.ChatMessage) else chat_message(m["role"], m["content"]) for m in messages]


def is_model_missing(error: ServiceError) -> bool:
    """True when a call failed because no usable model of the needed type is configured."""
    return error.model_code in (ModelErrorCode.NO_MODEL_CONFIGURED, ModelErrorCode.WRONG_MODEL_TYPE)


class ModelHubClient(ServiceClient):
    service = "modelhub"

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        embed_timeout: float = 300.0,
        call_timeout: float | None = None,
        cache_seconds: float = 60.0,
        query_cache_size: int = 1024,
        outage_wait: float = 0.0,
    ) -> None:
        super().__init__(channel, outage_wait=outage_wait)
        self._embed_timeout = embed_timeout
        self._call_timeout = call_timeout
        self._cache_seconds = cache_seconds
        self._facts: dict[tuple[str, str, str], tuple[float, Any]] = {}
        self._query_vectors: OrderedDict[tuple[str, str, str], list[float]] = OrderedDict()
        self._query_cache_size = query_cache_size

    # --- cached facts -----------------------------------------------------------------------------

    @staticmethod
    def _tenant() -> str:
        identity = current_identity()
        return identity.tenant_id if identity else ""

    def _cached(self, kind: str, key: str) -> tuple[bool, Any]:
        entry = self._facts.get((self._tenant(), kind, key))
        if entry is None or entry[0] < time.monotonic():
            return False, None
        return True, entry[1]

    def _remember(self, kind: str, key: str, value: Any) -> None:
        if self._cache_seconds > 0:
            self._facts[(self._tenant(), kind, key)] = (time.monotonic() + self._cache_seconds, value)

    def invalidate(self, tenant_id: str, model_id: str = "") -> None:
        """Forget what is cached of a tenant's model (and its defaults, which may point at it); with no
        model id, everything cached for the tenant."""
        for key in [k for k in self._facts if k[0] == tenant_id]:
            if not model_id or key[1] == "default" or key[2] == model_id:
                del self._facts[key]
        for key in [k for k in self._query_vectors if k[0] == tenant_id]:
            if not model_id or key[1] == model_id:
                del self._query_vectors[key]

    # --- registry ---------------------------------------------------------------------------------

    async def list_providers(self) -> mpb.ListProvidersResponse:
        response: mpb.ListProvidersResponse = await self._call("ListProviders", mpb.ListProvidersRequest())
        return response

    async def create_model(self, request: mpb.CreateModelRequest) -> mpb.Model:
        response: mpb.CreateModelResponse = await self._call("CreateModel", request)
        return response.model

    async def get_model(self, model_id: str) -> mpb.Model:
        response: mpb.GetModelResponse = await self._call("GetModel", mpb.GetModelRequest(model_id=model_id))
        return response.model

    async def list_models(self, request: mpb.ListModelsRequest) -> mpb.ListModelsResponse:
        response: mpb.ListModelsResponse = await self._call("ListModels", request)
        return response

    async def update_model(self, request: mpb.UpdateModelRequest) -> mpb.Model:
        response: mpb.UpdateModelResponse = await self._call("UpdateModel", request)
        return response.model

    async def delete_model(self, model_id: str) -> None:
        await self._call("DeleteModel", mpb.DeleteModelRequest(model_id=model_id))

    async def set_default_model(self, model_type: ModelType, model_id: str) -> mpb.ResolvedDefault:
        response: mpb.SetDefaultModelResponse = await self._call(
            "SetDefaultModel", mpb.SetDefaultModelRequest(type=model_type.to_proto(), model_id=model_id)
        )
        return response.default_model

    async def get_default_model(self, model_type: ModelType) -> mpb.ResolvedDefault:
        """The tenant's default model of a type, with where it comes from (not cached)."""
        response: mpb.GetDefaultModelResponse = await self._call(
            "GetDefaultModel", mpb.GetDefaultModelRequest(type=model_type.to_proto())
        )
        return response.default_model

    async def list_model_usages(self, model_id: str) -> mpb.ListModelUsagesResponse:
        response: mpb.ListModelUsagesResponse = await self._call(
            "ListModelUsages", mpb.ListModelUsagesRequest(model_id=model_id)
        )
        return response

    async def default_model(self, model_type: ModelType) -> mpb.Model | None:
        """The tenant's default model of a type; None when there is none. Cached."""
        found, value = self._cached("default", model_type.value)
        if found:
            model: mpb.Model | None = value
            return model
        resolved = await self.get_default_model(model_type)
        model = resolved.model if resolved.HasField("model") else None
        self._remember("default", model_type.value, model)
        return model

    async def has_default(self, model_type: ModelType) -> bool:
        """Whether the tenant has a default model of the type. Cached."""
        return await self.default_model(model_type) is not None

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        """Languages an embedding model reads, from its record (``parameters.extra.languages``); () when
        unknown or when modelhub cannot say. Cached."""
        found, value = self._cached("languages", model_id)
        if found:
            languages: tuple[str, ...] = value
            return languages
        try:
            model = await self.get_model(model_id)
        except ServiceError:
            return ()
        extra = MessageToDict(model.parameters.extra) if model.parameters.HasField("extra") else {}
        listed = extra.get("languages")
        languages = tuple(str(lang) for lang in listed) if isinstance(listed, list) else ()
        self._remember("languages", model_id, languages)
        return languages

    async def model_window(self, model_id: str) -> int:
        """How many tokens the model reads (its record's ``parameters.context_window``); 0 when its record
        does not say or the model does not exist. Other failures raise. Cached."""
        found, value = self._cached("window", model_id)
        if found:
            window: int = value
            return window
        try:
            model = await self.get_model(model_id)
        except NotFound:
            return 0
        window = max(0, model.parameters.context_window)
        self._remember("window", model_id, window)
        return window

    async def resolve_embedding_model(self, model_id: str) -> EmbeddingModel:
        """The named embedding model (the tenant's default when empty) with its vector dimension.

        Raises :class:`NoModelConfigured` when none is named and the tenant has no default, and
        :class:`WrongModelType` when the model is not an embedding model.
        """
        if model_id:
            model = await self.get_model(model_id)
        else:
            default = await self.default_model(ModelType.EMBEDDING)
            if default is None:
                raise NoModelConfigured("no embedding model is configured for this tenant")
            model = default
        if ModelType.EMBEDDING.number not in model.types:
            raise WrongModelType(f"model {model.id} is not an embedding model")
        dimension = (
            model.parameters.embedding_dimension if model.parameters.HasField("embedding_dimension") else 0
        )
        if dimension <= 0:
            dimension = len((await self.embed(model.id, ["dimension probe"]))[0])
        return EmbeddingModel(model.id, dimension)

    # --- model calls ------------------------------------------------------------------------------

    async def embed(self, model_id: str, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        """One vector per text (documents, or queries with ``query=True``)."""
        return (await self.embed_counted(model_id, texts, query=query)).vectors

    async def embed_counted(self, model_id: str, texts: Sequence[str], *, query: bool = False) -> Embedded:
        """:meth:`embed` with the number of tokens the model read."""
        input_type = mpb.EMBED_INPUT_TYPE_QUERY if query else mpb.EMBED_INPUT_TYPE_DOCUMENT
        response: mpb.EmbedResponse = await self._call(
            "Embed",
            mpb.EmbedRequest(model_id=model_id, texts=list(texts), input_type=input_type),
            timeout=self._embed_timeout,
        )
        return Embedded([list(e.values) for e in response.embeddings], response.usage.prompt_tokens)

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        """The query vector of one text, from a small per-tenant LRU cache when asked before."""
        key = (self._tenant(), model_id, query)
        cached = self._query_vectors.get(key)
        if cached is not None:
            self._query_vectors.move_to_end(key)
            return cached
        vector = (await self.embed(model_id, [query], query=True))[0]
        if self._query_cache_size:
            self._query_vectors[key] = vector
            if len(self._query_vectors) > self._query_cache_size:
                self._query_vectors.popitem(last=False)
        return vector

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], *, top_n: int = 0
    ) -> list[float]:
        """A relevance score per document, in the order given."""
        response: mpb.RerankResponse = await self._call(
            "Rerank",
            mpb.RerankRequest(model_id=model_id, query=query, documents=list(documents), top_n=top_n),
            timeout=self._call_timeout,
        )
        scores = [0.0] * len(documents)
        for result in response.results:
            scores[result.index] = result.relevance_score
        return scores

    def chat_stream(self, request: mpb.ChatStreamRequest) -> AsyncIterator[mpb.ChatStreamResponse]:
        """The events of one chat completion as they come."""
        return self._stream("ChatStream", request, timeout=self._embed_timeout)

    async def complete(
        self,
        messages: Sequence[ChatInput],
        *,
        purpose: str,
        model_id: str = "",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """The whole text of one chat completion (the tenant's default KnowledgeQA model when no model
        is named)."""
        request = mpb.ChatStreamRequest(model_id=model_id, messages=_messages(messages), purpose=purpose)
        if temperature is not None:
            request.temperature = temperature
        if max_tokens is not None:
            request.max_tokens = max_tokens
        parts = [e.text_delta.text async for e in self.chat_stream(request) if e.HasField("text_delta")]
        return "".join(parts)

    async def decide(self, request: mpb.DecideRequest) -> mpb.DecideResponse:
        response: mpb.DecideResponse = await self._call("Decide", request, timeout=self._call_timeout)
        return response

    async def describe(self, request: mpb.DescribeImageRequest) -> mpb.DescribeImageResponse:
        """A description of an image given by URL or bytes (the tenant's default VLM unless named)."""
        response: mpb.DescribeImageResponse = await self._call(
            "DescribeImage", request, timeout=self._embed_timeout
        )
        return response

    async def describe_image(
        self, data: bytes, mime_type: str, *, language: str = "", purpose: str = "", prompt: str = ""
    ) -> str:
        response: mpb.DescribeImageResponse = await self._call(
            "DescribeImage",
            mpb.DescribeImageRequest(
                image=mpb.ImageInput(data=data, mime_type=mime_type),
                language=language,
                purpose=purpose,
                prompt=prompt,
            ),
            timeout=self._embed_timeout,
        )
        return response.description

    async def transcribe(
        self, data: bytes, mime_type: str, *, file_name: str = "", language: str = ""
    ) -> mpb.TranscribeResponse:
        response: mpb.TranscribeResponse = await self._call(
            "Transcribe",
            mpb.TranscribeRequest(audio=data, mime_type=mime_type, file_name=file_name, language=language),
            timeout=self._embed_timeout,
        )
        return response
