"""What a model record must satisfy before the registry stores it: limits, provider, types, URL, parameters.

Every refusal is INVALID_INPUT naming the field and the limit it broke. The same checks serve the
records a tenant creates and the models configured by environment variables (there the "field" is
the variable's name).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from knowsphere.modelhub.v1.modelhub_enums import ModelConsumerKind, ModelType
from knowsphere_contracts.vocabulary import MAX_EMBEDDING_DIMENSION
from knowsphere_egress import EgressError, check_base_url_form
from knowsphere_modelhub.domain.errors import ModelError, invalid_field
from knowsphere_modelhub.domain.ports import Usage
from knowsphere_modelhub.domain.records import ModelParams, in_proto_order

MAX_DISPLAY_NAME_CHARS = 200
MAX_MODEL_NAME_CHARS = 256
MAX_DESCRIPTION_CHARS = 2000
MAX_BASE_URL_CHARS = 2048
MAX_API_KEY_CHARS = 4096
MAX_TEMPERATURE = 2.0
MAX_CONSUMER_ID_CHARS = 256
MAX_CONSUMER_NAME_CHARS = 500
EXTRA_PARAMETERS = frozenset(
    {
        # Sampling and length, by the names OpenAI-compatible providers share.
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "seed",
        "stop",
        "max_completion_tokens",
        # Reasoning switches of the providers that have them (Qwen, DeepSeek, OpenAI, Anthropic).
        "enable_thinking",
        "thinking_budget",
        "reasoning_effort",
        "thinking",
        # Provider features that stay inside the provider (DashScope's web search, embeddings' size).
        "enable_search",
        "dimensions",
        "encoding_format",
    }
)
"""The only ``parameters.extra`` keys a tenant may store: fields that shape one answer, never where
it goes, what it may do or how many are made (no ``n``, tools, callbacks, ``user`` or headers)."""
MAX_EXTRA_JSON_CHARS = 4096


class ProviderInfo(Protocol):
    """What the registry reads from a provider table row (``providers.ProviderSpec`` has these)."""

    @property
    def id(self) -> str: ...

    @property
    def default_base_url(self) -> str: ...

    @property
    def requires_api_key(self) -> bool: ...

    @property
    def model_types(self) -> frozenset[ModelType]: ...

    @property
    def local(self) -> bool: ...


def in_process(provider: ProviderInfo) -> bool:
    """A provider that runs inside modelhub (local, no URL) serves only the built-in models."""
    return provider.local and not provider.default_base_url


def type_list(types: Iterable[ModelType]) -> str:
    """``embedding, knowledge_qa``: types for a message, in proto order."""
    return ", ".join(in_proto_order(types))


def _not_a_type(field: str, value: object) -> ModelError:
    return invalid_field(field, f"{field} must be one of {type_list(ModelType)} (got {value})")


def check_type(field: str, model_type: object) -> None:
    """Refuses anything that is not a :class:`ModelType` member."""
    if not isinstance(model_type, ModelType):
        raise _not_a_type(field, model_type)


def model_type_of(field: str, number: int) -> ModelType:
    """The model type of a proto number; INVALID_INPUT naming ``field`` for 0 or an unknown number."""
    model_type = ModelType.from_number(number)
    if model_type is None:
        raise _not_a_type(field, number)
    return model_type


def provider_of(
    providers: Mapping[str, ProviderInfo], provider_id: str, field: str = "provider_id"
) -> ProviderInfo:
    provider = providers.get(provider_id)
    if provider is None:
        known = ", ".join(sorted(pid for pid, p in providers.items() if not in_process(p)))
        raise invalid_field(field, f"{field} {provider_id!r} is not a known provider (one of: {known})")
    return provider


def check_types(provider: ProviderInfo, types: frozenset[ModelType], field: str = "types") -> None:
    if not types:
        raise invalid_field(field, f"{field} needs at least one model type")
    for model_type in types:
        check_type(field, model_type)
    missing = types - provider.model_types
    if missing:
        raise invalid_field(
            field,
            f"{field}: provider {provider.id!r} does not offer {type_list(missing)} models "
            f"(it offers {type_list(provider.model_types)})",
        )


def _check_url(field: str, url: str) -> None:
    if len(url) > MAX_BASE_URL_CHARS:
        raise invalid_field(field, f"{field} is longer than {MAX_BASE_URL_CHARS} characters")
    try:
        check_base_url_form(url)
    except EgressError as error:
        raise invalid_field(
            field,
            # The value is not echoed: it may carry credentials.
            f"{field} must be an http:// or https:// URL with a host and without credentials, query, "
            "fragment or spaces",
        ) from error


def check_base_url(provider: ProviderInfo, base_url: str, field: str = "base_url") -> None:
    if base_url:
        _check_url(field, base_url)
    elif not provider.default_base_url and not provider.local:
        raise invalid_field(
            field, f"{field} is required for provider {provider.id!r} (it has no default URL)"
        )


def check_key_present(provider: ProviderInfo, has_key: bool, field: str = "api_key") -> None:
    if provider.requires_api_key and not has_key:
        raise invalid_field(field, f"{field} is required for provider {provider.id!r}")


def check_api_key_length(api_key: str) -> None:
    if len(api_key) > MAX_API_KEY_CHARS:
        raise invalid_field("api_key", f"api_key is longer than {MAX_API_KEY_CHARS} characters")


def _check_extra(extra: dict[str, Any]) -> None:
    for key in extra:
        if key not in EXTRA_PARAMETERS:
            raise invalid_field(
                f"parameters.extra.{key}",
                f"parameters.extra.{key} is not a parameter a model may carry; allowed: "
                f"{', '.join(sorted(EXTRA_PARAMETERS))}",
            )
    size = len(json.dumps(extra, default=str))
    if size > MAX_EXTRA_JSON_CHARS:
        raise invalid_field(
            "parameters.extra",
            f"parameters.extra is {size} characters of JSON; the limit is {MAX_EXTRA_JSON_CHARS}",
        )


def _check_parameters(params: ModelParams, types: frozenset[ModelType]) -> None:
    _check_extra(params.extra)
    dimension = params.embedding_dimension
    field = "parameters.embedding_dimension"
    if dimension is None:
        if ModelType.EMBEDDING in types:
            raise invalid_field(
                field, f"{field} is required for embedding models (1–{MAX_EMBEDDING_DIMENSION})"
            )
    elif not 0 < dimension <= MAX_EMBEDDING_DIMENSION:
        raise invalid_field(
            field, f"{field} must be between 1 and {MAX_EMBEDDING_DIMENSION} (got {dimension})"
        )
    if params.temperature is not None and not 0 <= params.temperature <= MAX_TEMPERATURE:
        raise invalid_field(
            "parameters.temperature",
            f"parameters.temperature must be between 0 and {MAX_TEMPERATURE} (got {params.temperature})",
        )
    for name, value in (("max_tokens", params.max_tokens), ("context_window", params.context_window)):
        if value is not None and value < 1:
            raise invalid_field(f"parameters.{name}", f"parameters.{name} must be at least 1 (got {value})")


def validate_record(
    provider: ProviderInfo,
    *,
    display_name: str,
    model_name: str,
    types: frozenset[ModelType],
    base_url: str,
    has_key: bool,
    parameters: ModelParams,
    description: str,
) -> None:
    """Every field of a tenant's model, as it would be stored."""
    if not 1 <= len(display_name) <= MAX_DISPLAY_NAME_CHARS:
        raise invalid_field(
            "display_name",
            f"display_name must be 1–{MAX_DISPLAY_NAME_CHARS} characters (got {len(display_name)})",
        )
    if not model_name:
        raise invalid_field("model_name", "model_name is required (the model's name at the provider)")
    if len(model_name) > MAX_MODEL_NAME_CHARS:
        raise invalid_field("model_name", f"model_name is longer than {MAX_MODEL_NAME_CHARS} characters")
    check_types(provider, types)
    check_base_url(provider, base_url)
    check_key_present(provider, has_key)
    _check_parameters(parameters, types)
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise invalid_field("description", f"description is longer than {MAX_DESCRIPTION_CHARS} characters")


def check_usage(usage: Usage) -> None:
    if usage.consumer_kind is None:
        kinds = " or ".join(kind.name for kind in ModelConsumerKind)
        raise invalid_field("consumer_kind", f"consumer_kind must be {kinds}")
    if not usage.consumer_id or len(usage.consumer_id) > MAX_CONSUMER_ID_CHARS:
        raise invalid_field("consumer_id", f"consumer_id must be 1–{MAX_CONSUMER_ID_CHARS} characters")
    if len(usage.consumer_name) > MAX_CONSUMER_NAME_CHARS:
        raise invalid_field(
            "consumer_name", f"consumer_name is longer than {MAX_CONSUMER_NAME_CHARS} characters"
        )
