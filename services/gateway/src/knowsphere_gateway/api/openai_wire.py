"""OpenAI's wire format as the ``/v1`` routes speak it: request and response bodies, and the error
shape ``{"error": {"message", "type", "code", "param"}}`` (:class:`Refusal`).

The response bodies are documented in the OpenAPI document and build the answers, so the two agree.
KnowSphere's additions are marked as such: ``knowledge_base_ids``, ``web_search`` and
``knowledge_graph`` in a request, ``citations`` beside the choices, and the keys of a ``url_citation``
beyond OpenAI's own.
"""

from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from knowsphere_contracts.events import (
    MAX_IMAGE_REF_CHARS,
    MAX_KNOWLEDGE_BASES_PER_TURN,
    Citation,
)

DEFAULT_MODEL = "knowsphere"
"""The model name of the tenant's default agent."""
DEFAULT_EMBEDDING_MODELS = frozenset({"default", DEFAULT_MODEL})
"""Embedding model names meaning the tenant's default embedding model."""
MAX_REQUEST_MESSAGES = 1000
"""Messages a chat completion request may carry (the history sent on is the newest that fit)."""
MAX_EMBEDDING_INPUTS = 2048
"""Texts one embeddings request may carry (OpenAI's limit)."""
MAX_EMBEDDING_CHARS = 1_000_000
"""Characters of one embeddings request in all (it travels to modelhub as one call)."""
OWNER = "knowsphere"

# --- errors in OpenAI's shape ---------------------------------------------------------------------


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, …")
    code: str | None = Field(description="stable machine code, e.g. model_not_found")
    param: str | None = Field(description="the request field at fault, when there is one")


class OpenAIError(BaseModel):
    """An error of the ``/v1`` routes, in OpenAI's shape."""

    error: OpenAIErrorDetail


ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


class Refusal(Exception):
    """A ``/v1`` request refused, rendered in OpenAI's shape."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        detail = OpenAIErrorDetail(
            message=self.message, type=error_type(self.status), code=self.code, param=self.param
        )
        return {"error": detail.model_dump()}

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": OpenAIError, "description": "a request field is missing or wrong (`param` names it)"},
    401: {"model": OpenAIError, "description": "no usable credentials"},
    403: {"model": OpenAIError, "description": "the caller's role may not use this route"},
    404: {"model": OpenAIError, "description": "no such model (or knowledge base) of the caller's tenant"},
    "default": {"model": OpenAIError, "description": "any other failure, in the same shape"},
}

# --- request and response bodies ------------------------------------------------------------------


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="ignore")
    url: str = Field(min_length=1, max_length=MAX_IMAGE_REF_CHARS)
    detail: str | None = None


class OpenAIImagePart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["image_url"]
    image_url: ImageUrl


ContentPart = Annotated[TextPart | OpenAIImagePart, Field(discriminator="type")]


class OpenAIChatMessage(BaseModel):
    """A message of the conversation. Keys OpenAI's clients add to messages they send back (``refusal``,
    ``annotations`` …) are ignored."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"] = Field(
        description="tool and function messages are not taken: agents run their own tools"
    )
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion request. Sampling and output options are accepted and not used: the
    agent's settings apply. ``knowledge_base_ids``, ``web_search`` and ``knowledge_graph`` are
    KnowSphere's own (``extra_body`` in the ``openai`` client)."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        min_length=1, max_length=200, description=f"an agent's name or id, or {DEFAULT_MODEL!r}"
    )
    messages: list[OpenAIChatMessage] = Field(min_length=1, max_length=MAX_REQUEST_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1, description="one choice only")
    knowledge_base_ids: list[str] = Field(
        default_factory=list,
        max_length=MAX_KNOWLEDGE_BASES_PER_TURN,
        description="knowledge bases to search besides the agent's",
    )
    web_search: bool = Field(default=False, description="let the answer use web search")
    knowledge_graph: bool = Field(default=False, description="let the answer query the knowledge graph")
    tools: list[Any] | None = Field(default=None, description="not supported: agents run their own tools")
    response_format: dict[str, Any] | None = Field(default=None, description="only {'type': 'text'}")
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    user: str | None = None
    seed: int | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    reasoning_effort: str | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    prediction: Any = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    verbosity: str | None = None


class CitedSource(Citation):
    """A source the answer cites, as the turn's events carry it (named apart from the public API's
    own ``Citation`` schema)."""


class UrlCitation(BaseModel):
    url: str
    title: str
    start_index: int = Field(description="where the source's first [[cN]] marker starts in the content")
    end_index: int
    handle: str = Field(description="cN as in the marker")
    document_id: str
    chunk_id: str
    knowledge_base_id: str
    page: int = Field(description="1-based page; 0 when the format has none")
    file_name: str


class Annotation(BaseModel):
    type: Literal["url_citation"]
    url_citation: UrlCitation


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    refusal: None = None
    annotations: list[Annotation]


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    citations: list[CitedSource] = Field(description="the sources the answer cites")


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    annotations: list[Annotation] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: Literal["stop"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed completion; the stream ends with ``data: [DONE]``."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    citations: list[CitedSource] | None = Field(default=None, description="on the final chunk(s)")


class ModelCard(BaseModel):
    id: str = Field(description="the agent's or application's name; the value to send as model")
    object: Literal["model"]
    created: int
    owned_by: str
    agent_id: str | None = Field(default=None, description="the agent's id (also accepted as model)")
    application_id: str | None = Field(default=None, description="the application's id, for an application")
    display_name: str
    description: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


EmbeddingText = Annotated[str, Field(min_length=1, pattern=r"\S", description="not only spaces")]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        min_length=1, max_length=300, description="an embedding model's id or name, or 'default'"
    )
    input: (
        EmbeddingText | Annotated[list[EmbeddingText], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
    ) = Field(
        description="a text or a list of texts (token arrays are not taken)",
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1, description="must be the model's own dimension")
    user: str | None = None


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 of little-endian float32")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"]
    data: list[OpenAIEmbedding]
    model: str
    usage: EmbeddingUsage


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` written in place (the models here are not recursive), so it can
    stand in the OpenAPI document on its own."""
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref", "")
            if reference.startswith("#/$defs/"):
                return resolve(definitions[reference.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


CHUNK_SCHEMA = _inlined(ChatCompletionChunk.model_json_schema())
"""The schema of one ``data:`` event of a streamed completion, for the OpenAPI document."""


__all__ = [
    "CHUNK_SCHEMA",
    "DEFAULT_EMBEDDING_MODELS",
    "DEFAULT_MODEL",
    "ERROR_RESPONSES",
    "MAX_EMBEDDING_CHARS",
    "MAX_EMBEDDING_INPUTS",
    "MAX_REQUEST_MESSAGES",
    "OWNER",
    "Annotation",
    "AssistantMessage",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "Choice",
    "EmbeddingList",
    "EmbeddingRequest",
    "EmbeddingUsage",
    "ModelCard",
    "ModelList",
    "OpenAIChatMessage",
    "OpenAIEmbedding",
    "OpenAIError",
    "OpenAIImagePart",
    "Refusal",
    "TextPart",
    "Usage",
]
