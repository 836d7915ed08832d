"""The provider table: every provider modelhub can talk to, its default base URL and its wire quirks.

This is the one place where providers differ. Adapters read fields of :class:`ProviderSpec` (which
path reranks, whether ``stream_options`` is accepted, how images are sent …) and never branch on a
provider id, so adding an OpenAI-compatible provider is one entry here.

Capabilities are what the provider's public API documents for its current models. Where a provider's
documentation was unclear or differs between models, the entry is conservative (the capability is off)
and a comment says so: a capability that is off costs a fallback (Decide uses JSON instead of
logprobs, usage arrives without ``stream_options``), a capability that is wrongly on costs a failed
call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ImageInputFormat, ModelType
from knowsphere_contracts.convert import message_from
from knowsphere_modelhub.domain.records import in_proto_order

ApiStyle = Literal["openai", "anthropic", "local"]
RerankShape = Literal["jina", "dashscope"]
AuthStyle = Literal["bearer", "x-api-key", "none"]


@dataclass(frozen=True)
class EmbedInputHint:
    """How a provider wants to hear whether texts are queries or passages (e.g. Jina's ``task``)."""

    field: str
    query: str
    document: str


@dataclass(frozen=True)
class ProviderSpec:
    """One row of the provider table.

    Paths are appended to the model's base URL (or :attr:`default_base_url`), except
    :attr:`rerank_path` when :attr:`rerank_from_origin` is set: then it is appended to the scheme and
    host of the base URL (DashScope serves rerank on its native API, beside the compatible mode).
    The defaults describe the common row: an OpenAI-compatible API that takes a key.
    """

    id: str
    display_name: str
    default_base_url: str
    docs_url: str
    model_types: frozenset[ModelType]
    api_style: ApiStyle = "openai"
    requires_api_key: bool = True
    local: bool = False
    auth_style: AuthStyle = "bearer"
    # Chat
    chat_path: str | None = "/chat/completions"
    logprobs: bool = False
    max_top_logprobs: int = 0
    tool_calls: bool = True
    tool_choice_required: bool = True  # "required" / a named tool accepted; else sent as "auto"
    json_object_output: bool = True
    json_schema_output: bool = False
    cache_breakpoints: bool = False
    max_cache_breakpoints: int = 0
    cached_token_usage: bool = False
    image_input: ImageInputFormat | None = None  # None: takes no images
    content_arrays: bool = True  # accepts ``content`` as a list of parts (DeepSeek takes strings only)
    stream_usage_option: bool = False  # accepts ``stream_options: {include_usage: true}``
    max_tokens_field: str = "max_tokens"
    default_max_tokens: int | None = None  # the API requires max_tokens (Anthropic)
    # Other endpoints
    embeddings_path: str | None = None
    embed_input_hint: EmbedInputHint | None = None
    rerank_path: str | None = None
    rerank_shape: RerankShape | None = None
    rerank_from_origin: bool = False
    transcription_path: str | None = None

    @property
    def openai_compatible(self) -> bool:
        return self.api_style == "openai"


_CHAT = frozenset({ModelType.KNOWLEDGE_QA})
_CHAT_VISION = frozenset({ModelType.KNOWLEDGE_QA, ModelType.VLM})

_SPECS: tuple[ProviderSpec, ...] = (
    ProviderSpec(
        id="siliconflow",
        display_name="SiliconFlow",
        default_base_url="https://api.siliconflow.cn/v1",
        docs_url="https://docs.siliconflow.cn/",
        model_types=frozenset(ModelType),
        # Logprobs and json_schema are not documented for the chat endpoint; stream_options is not
        # documented either (usage arrives in the stream chunks anyway).
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        embeddings_path="/embeddings",
        rerank_path="/rerank",
        rerank_shape="jina",
        transcription_path="/audio/transcriptions",
    ),
    ProviderSpec(
        id="openai",
        display_name="OpenAI",
        default_base_url="https://api.openai.com/v1",
        docs_url="https://platform.openai.com/docs/api-reference",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM, ModelType.ASR}),
        logprobs=True,
        max_top_logprobs=20,
        json_schema_output=True,
        cached_token_usage=True,
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        stream_usage_option=True,
        # max_tokens is deprecated and rejected by reasoning models.
        max_tokens_field="max_completion_tokens",
        embeddings_path="/embeddings",
        transcription_path="/audio/transcriptions",
    ),
    ProviderSpec(
        id="dashscope",
        display_name="Alibaba Cloud Model Studio (DashScope)",
        default_base_url="https://dashscope.aliyuncs.com/compatible-mode/v1",
        docs_url="https://help.aliyun.com/zh/model-studio/",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.RERANK, ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        # Logprobs are documented for some Qwen models only, and explicit cache_control for a few
        # recent ones: both conservative (off). Speech recognition (Paraformer) is a native async
        # API, not /audio/transcriptions, so ASR is not offered here.
        cached_token_usage=True,
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        stream_usage_option=True,
        embeddings_path="/embeddings",
        rerank_path="/api/v1/services/rerank/text-rerank/text-rerank",
        rerank_shape="dashscope",
        rerank_from_origin=True,
    ),
    ProviderSpec(
        id="zhipu",
        display_name="Zhipu AI (BigModel)",
        default_base_url="https://open.bigmodel.cn/api/paas/v4",
        docs_url="https://docs.bigmodel.cn/",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        # tool_choice documents "auto" only; stream_options is not documented (usage comes in the
        # last chunk). Its rerank endpoint is newer and not verified here, so it is not offered.
        tool_choice_required=False,
        cached_token_usage=True,
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        embeddings_path="/embeddings",
    ),
    ProviderSpec(
        id="deepseek",
        display_name="DeepSeek",
        default_base_url="https://api.deepseek.com",
        docs_url="https://api-docs.deepseek.com/",
        model_types=_CHAT,
        # deepseek-chat returns logprobs (top_logprobs ≤ 20); deepseek-reasoner rejects the parameter
        # with 400, which the adapter reports as "no logprobs" and Decide answers by JSON instead.
        logprobs=True,
        max_top_logprobs=20,
        cached_token_usage=True,  # prompt_cache_hit_tokens
        content_arrays=False,
        stream_usage_option=True,
    ),
    ProviderSpec(
        id="moonshot",
        display_name="Moonshot AI (Kimi)",
        default_base_url="https://api.moonshot.cn/v1",
        docs_url="https://platform.moonshot.cn/docs",
        model_types=_CHAT_VISION,
        # Kimi rejects "required" tool choice and image URLs (base64 data URLs only); usage comes
        # inside the last choice, so stream_options is not sent. Logprobs are not documented.
        tool_choice_required=False,
        cached_token_usage=True,
        image_input=ImageInputFormat.BASE64_ONLY,
    ),
    ProviderSpec(
        id="volcengine",
        display_name="Volcengine Ark (Doubao)",
        default_base_url="https://ark.cn-beijing.volces.com/api/v3",
        docs_url="https://www.volcengine.com/docs/82379",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        # Logprobs and json_schema are documented for some Doubao models only: conservative (off).
        cached_token_usage=True,
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        stream_usage_option=True,
        embeddings_path="/embeddings",
    ),
    ProviderSpec(
        id="hunyuan",
        display_name="Tencent Hunyuan",
        default_base_url="https://api.hunyuan.cloud.tencent.com/v1",
        docs_url="https://cloud.tencent.com/document/product/1729/111007",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        # stream_options, logprobs and json_schema are not documented for the compatible API.
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        embeddings_path="/embeddings",
    ),
    ProviderSpec(
        id="qianfan",
        display_name="Baidu Qianfan",
        default_base_url="https://qianfan.baidubce.com/v2",
        docs_url="https://cloud.baidu.com/doc/qianfan-api/index.html",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        # The v2 rerank endpoint's shape was not verified here, so rerank is not offered;
        # stream_options and logprobs are conservative (off).
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        embeddings_path="/embeddings",
    ),
    ProviderSpec(
        id="openrouter",
        display_name="OpenRouter",
        default_base_url="https://openrouter.ai/api/v1",
        docs_url="https://openrouter.ai/docs",
        model_types=_CHAT_VISION,
        # Logprobs and json_schema depend on the routed model: conservative (off). cache_control on
        # content parts is documented (used by Anthropic and Gemini models, ignored by others).
        cache_breakpoints=True,
        max_cache_breakpoints=4,
        cached_token_usage=True,
        image_input=ImageInputFormat.URL_OR_DATA_URL,
    ),
    ProviderSpec(
        id="jina",
        display_name="Jina AI",
        default_base_url="https://api.jina.ai/v1",
        docs_url="https://jina.ai/embeddings/",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.RERANK}),
        chat_path=None,
        tool_calls=False,
        json_object_output=False,
        # ``task`` is required by jina-embeddings-v3 and later; v2 models are not known to need it.
        embeddings_path="/embeddings",
        embed_input_hint=EmbedInputHint("task", "retrieval.query", "retrieval.passage"),
        rerank_path="/rerank",
        rerank_shape="jina",
    ),
    ProviderSpec(
        id="anthropic",
        display_name="Anthropic",
        default_base_url="https://api.anthropic.com",
        docs_url="https://docs.anthropic.com/en/api/messages",
        api_style="anthropic",
        model_types=_CHAT_VISION,
        auth_style="x-api-key",
        chat_path="/v1/messages",
        json_object_output=False,  # no response_format; Decide's JSON path asks in the prompt
        cache_breakpoints=True,
        max_cache_breakpoints=4,
        cached_token_usage=True,
        image_input=ImageInputFormat.BASE64_ONLY,  # sent as base64 source blocks; URLs are downloaded first
        default_max_tokens=4096,
    ),
    ProviderSpec(
        id="ollama",
        display_name="Ollama",
        default_base_url="http://127.0.0.1:11434/v1",
        docs_url="https://docs.ollama.com/api/openai-compatibility",
        model_types=frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        requires_api_key=False,
        local=True,
        auth_style="none",
        # Older Ollama versions take base64 images only and return no logprobs: conservative.
        image_input=ImageInputFormat.BASE64_ONLY,
        stream_usage_option=True,
        embeddings_path="/embeddings",
    ),
    ProviderSpec(
        id="custom",
        display_name="Custom OpenAI-compatible endpoint",
        default_base_url="",
        docs_url="https://platform.openai.com/docs/api-reference/chat",
        model_types=frozenset(ModelType),
        requires_api_key=False,
        # Unknown server (vLLM, llama.cpp, Xinference, a gateway …): only the common core is
        # assumed; rerank in the Jina shape that vLLM and Xinference serve.
        image_input=ImageInputFormat.URL_OR_DATA_URL,
        embeddings_path="/embeddings",
        rerank_path="/rerank",
        rerank_shape="jina",
        transcription_path="/audio/transcriptions",
    ),
    ProviderSpec(
        id="local",
        display_name="Built-in (runs in modelhub on CPU)",
        default_base_url="",
        docs_url="",
        api_style="local",
        model_types=frozenset({ModelType.EMBEDDING}),
        requires_api_key=False,
        local=True,
        auth_style="none",
        chat_path=None,
        tool_calls=False,
        json_object_output=False,
    ),
)

PROVIDERS: dict[str, ProviderSpec] = {spec.id: spec for spec in _SPECS}


def to_proto(spec: ProviderSpec) -> pb.Provider:
    """The table row as the ``ListProviders`` API shows it."""
    capabilities = message_from(pb.ProviderCapabilities, spec, model_types=in_proto_order(spec.model_types))
    return message_from(pb.Provider, spec, capabilities=capabilities)
