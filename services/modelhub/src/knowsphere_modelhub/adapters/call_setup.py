"""What every HTTP provider adapter sets up the same way before a call.

:class:`HttpProviderAdapter` (the base of the OpenAI-compatible and Anthropic adapters): the pooled
HTTP client, the provider table, the image limit and the chat endpoint of a call. Around it: the
provider table row of the call's model, the base URL and auth headers, the call's parameters (model
defaults overridden by the request, provider-specific ``extra`` merged), and the errors for a
capability the provider does not have.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere_modelhub.adapters.http import Endpoint, ProviderHttp, join_url
from knowsphere_modelhub.domain.errors import ModelError, invalid_input
from knowsphere_modelhub.domain.providers import PROVIDERS, ProviderSpec
from knowsphere_modelhub.domain.records import CallTarget
from knowsphere_modelhub.domain.validation import EXTRA_PARAMETERS, type_list
from knowsphere_modelhub.settings import Settings

# Fields of the request body that the adapter owns; ``extra`` parameters never replace them.
PROTECTED_FIELDS = frozenset({"model", "messages", "stream", "input", "query", "documents", "system"})

DEFAULT_MAX_IMAGE_BYTES: int = Settings.model_fields["max_image_bytes"].default


class HttpProviderAdapter:
    """What the HTTP adapters share: the pooled client, the provider table, the image size limit.

    ``close()`` closes the shared :class:`ProviderHttp` (idempotent; its clients are recreated on
    next use).
    """

    def __init__(
        self,
        http: ProviderHttp,
        providers: Mapping[str, ProviderSpec] = PROVIDERS,
        *,
        max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    ) -> None:
        self._http = http
        self._providers = providers
        self._max_image_bytes = max_image_bytes

    async def close(self) -> None:
        await self._http.close()

    def _chat_call(self, target: CallTarget, **headers: str) -> tuple[ProviderSpec, Endpoint, str]:
        """The provider row, endpoint and chat URL of a chat call; WRONG_MODEL_TYPE without chat."""
        spec = spec_for(self._providers, target)
        if not spec.chat_path:
            raise unsupported(target, spec, ModelType.KNOWLEDGE_QA)
        endpoint, base_url = endpoint_for(spec, target, **headers)
        return spec, endpoint, join_url(base_url, spec.chat_path)


def spec_for(providers: Mapping[str, ProviderSpec], target: CallTarget) -> ProviderSpec:
    spec = providers.get(target.provider_id)
    if spec is None:
        raise ModelError(
            ModelErrorCode.MODEL_UNAVAILABLE,
            f"provider {target.provider_id!r} is not in the provider table",
            model_id=target.model_id,
            provider_id=target.provider_id,
        )
    return spec


def endpoint_for(spec: ProviderSpec, target: CallTarget, **headers: str) -> tuple[Endpoint, str]:
    """The endpoint (pool key, auth headers) and base URL of a call."""
    base_url = (target.base_url or spec.default_base_url).rstrip("/")
    if not base_url:
        raise ModelError(
            ModelErrorCode.MODEL_UNAVAILABLE,
            f"model {target.model_id} of provider {spec.id} has no base URL",
            model_id=target.model_id,
            provider_id=spec.id,
        )
    all_headers = dict(headers)
    if target.api_key:
        if spec.auth_style == "bearer":
            all_headers["Authorization"] = f"Bearer {target.api_key}"
        elif spec.auth_style == "x-api-key":
            all_headers["x-api-key"] = target.api_key
    elif spec.requires_api_key:
        raise ModelError(
            ModelErrorCode.AUTHENTICATION_FAILED,
            f"no API key is stored for model {target.model_id} ({spec.id} requires one)",
            model_id=target.model_id,
            provider_id=spec.id,
        )
    return Endpoint(spec.id, base_url, all_headers, guarded=not target.operator_configured), base_url


def unsupported(target: CallTarget, spec: ProviderSpec, model_type: ModelType) -> ModelError:
    """WRONG_MODEL_TYPE for a call the provider does not offer (e.g. rerank on OpenAI)."""
    offered = type_list(spec.model_types) or "nothing"
    return ModelError(
        ModelErrorCode.WRONG_MODEL_TYPE,
        f"provider {spec.id} offers no {model_type} endpoint",
        model_id=target.model_id,
        provider_id=spec.id,
        type=model_type,
        types=offered,
    )


def no_images(spec: ProviderSpec, field: str) -> ModelError:
    """WRONG_MODEL_TYPE for an image sent to a provider that takes none."""
    return ModelError(
        ModelErrorCode.WRONG_MODEL_TYPE,
        f"provider {spec.id} takes no images",
        field=field,
        type=ModelType.VLM,
        types="text chat",
    )


def _plain(value: Any) -> Any:
    """Struct numbers are floats; providers want ``top_k: 20``, not ``20.0``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {k: _plain(v) for k, v in json_format.MessageToDict(struct).items()}


def merged_extras(target: CallTarget, provider_params: struct_pb2.Struct | None = None) -> dict[str, Any]:
    """The model's ``extra`` parameters (those of :data:`EXTRA_PARAMETERS`: a record stored before the
    allow-list may hold others) with the request's ``provider_params`` (the platform's) over them."""
    extras = {k: _plain(v) for k, v in target.parameters.extra.items() if k in EXTRA_PARAMETERS}
    if provider_params is not None:
        extras.update(struct_to_dict(provider_params))
    return {k: v for k, v in extras.items() if k not in PROTECTED_FIELDS}


def temperature_of(target: CallTarget, request: pb.ChatStreamRequest) -> float | None:
    return request.temperature if request.HasField("temperature") else target.parameters.temperature


def max_tokens_of(target: CallTarget, request: pb.ChatStreamRequest) -> int | None:
    return request.max_tokens if request.HasField("max_tokens") else target.parameters.max_tokens


def parse_json_object(text: str, field: str) -> dict[str, Any]:
    """A JSON object given as JSON text (tool schemas and arguments, response formats); empty is ``{}``."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise invalid_input(field, f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise invalid_input(field, "must be a JSON object")
    return value


def stamped(error: ModelError, target: CallTarget) -> ModelError:
    """The error stamped with the call's model, and without the call's API key in its detail
    (whichever path made it: an answer the provider echoed the key in, a message quoting a header)."""
    return error.with_target(target.model_id, target.provider_id).without(target.api_key)
