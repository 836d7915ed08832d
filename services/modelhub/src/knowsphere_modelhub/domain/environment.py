"""Models configured by environment variables: at most one per type, held in memory only.

``KS_MODELHUB_<TYPE>_PROVIDER`` and ``_MODEL`` (together), optionally ``_BASE_URL``, ``_API_KEY``,
``_EMBEDDING_DIMENSION`` and ``_CONTEXT_WINDOW``. Such a model has the id ``env-<type>``, is used when
a tenant has no default of its own for the type, and cannot be changed or deleted through the API.
The environment is read once, at start-up; a bad value fails it with the variable named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_contracts.vocabulary import MAX_EMBEDDING_DIMENSION
from knowsphere_modelhub.domain.errors import invalid_field
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord
from knowsphere_modelhub.domain.validation import (
    ProviderInfo,
    check_base_url,
    check_key_present,
    check_types,
    provider_of,
)
from knowsphere_runtime.secrets import mask

ENV_PREFIX = "KS_MODELHUB_"
ENV_MODEL_ID_PREFIX = "env-"


@dataclass(frozen=True)
class EnvironmentModels:
    """The environment's models by type, and their API keys by model id (never stored)."""

    by_type: Mapping[ModelType, ModelRecord] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)

    def by_id(self, model_id: str) -> ModelRecord | None:
        if not model_id.startswith(ENV_MODEL_ID_PREFIX):
            return None
        return next((record for record in self.by_type.values() if record.id == model_id), None)

    @staticmethod
    def variables(record: ModelRecord) -> str:
        """``KS_MODELHUB_KNOWLEDGE_QA_*``: the variables that configure an environment model."""
        return f"{ENV_PREFIX}{record.id.removeprefix(ENV_MODEL_ID_PREFIX).upper()}_*"


def load_environment_models(
    env: Mapping[str, str], providers: Mapping[str, ProviderInfo], now: datetime
) -> EnvironmentModels:
    """The models ``env`` configures; INVALID_INPUT naming the variable for a bad one."""
    by_type: dict[ModelType, ModelRecord] = {}
    keys: dict[str, str] = {}
    for model_type in ModelType:
        prefix = f"{ENV_PREFIX}{model_type.name}_"

        def var(suffix: str, prefix: str = prefix) -> str:
            return env.get(prefix + suffix, "").strip()

        provider_id, model_name = var("PROVIDER"), var("MODEL")
        if not provider_id and not model_name:
            continue
        if not provider_id or not model_name:
            missing = prefix + ("PROVIDER" if not provider_id else "MODEL")
            raise invalid_field(
                missing, f"{prefix}PROVIDER and {prefix}MODEL must be set together ({missing} is missing)"
            )
        provider = provider_of(providers, provider_id, prefix + "PROVIDER")
        check_types(provider, frozenset({model_type}), prefix + "PROVIDER")
        base_url = var("BASE_URL").rstrip("/")
        check_base_url(provider, base_url, prefix + "BASE_URL")
        api_key = var("API_KEY")
        check_key_present(provider, bool(api_key), prefix + "API_KEY")
        params = ModelParams(
            embedding_dimension=_env_int(env, prefix + "EMBEDDING_DIMENSION", MAX_EMBEDDING_DIMENSION),
            context_window=_env_int(env, prefix + "CONTEXT_WINDOW"),
        )
        model_id = f"{ENV_MODEL_ID_PREFIX}{model_type.value}"
        by_type[model_type] = ModelRecord(
            id=model_id,
            tenant_id="",
            display_name=f"{model_name} (environment)",
            provider_id=provider.id,
            model_name=model_name,
            types=frozenset({model_type}),
            base_url=base_url,
            parameters=params,
            api_key_ciphertext=None,
            api_key_hint=mask(api_key) if api_key else "",
            builtin=True,
            description=f"Configured by the environment variables {prefix}*.",
            create_time=now,
            update_time=now,
        )
        if api_key:
            keys[model_id] = api_key
    return EnvironmentModels(by_type, keys)


def _env_int(env: Mapping[str, str], variable: str, maximum: int | None = None) -> int | None:
    text = env.get(variable, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or (maximum is not None and value > maximum):
        limit = f"between 1 and {maximum}" if maximum is not None else "a whole number of at least 1"
        raise invalid_field(variable, f"{variable} must be {limit} (got {text!r})")
    return value
