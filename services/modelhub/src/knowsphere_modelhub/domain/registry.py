"""The model registry: tenant models (validated, keys encrypted), defaults, usages and resolution.

Resolution of a call's model: the explicit id → the tenant's default for the type → the model
configured by environment variables (``KS_MODELHUB_<TYPE>_PROVIDER`` / ``_MODEL`` / ``_BASE_URL`` /
``_API_KEY`` / ``_EMBEDDING_DIMENSION`` / ``_CONTEXT_WINDOW``, held in memory only, id
``env-<type>``) → the built-in default for the type → ``NO_MODEL_CONFIGURED``.

Errors are :class:`~knowsphere_modelhub.domain.errors.ModelError`. Refusals caused by state rather
than by the request (a built-in or environment model, a model that is a default or still used) are
:class:`ModelInUse`, which the gRPC layer maps to FAILED_PRECONDITION through ``grpc_status``.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import urlsplit

import grpc

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_modelhub.adapters.ports import ModelReferenced, ModelStore, Page, Usage
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.records import (
    EMBEDDING,
    MODEL_TYPES,
    CallTarget,
    ModelParams,
    ModelRecord,
    type_name,
)
from knowsphere_modelhub.domain.secrets import KeyRing, SecretError, mask

INVALID = pb.MODEL_ERROR_CODE_INVALID_INPUT
NOT_FOUND = pb.MODEL_ERROR_CODE_MODEL_NOT_FOUND

MAX_DISPLAY_NAME_CHARS = 200
MAX_MODEL_NAME_CHARS = 256
MAX_DESCRIPTION_CHARS = 2000
MAX_BASE_URL_CHARS = 2048
MAX_API_KEY_CHARS = 4096
MAX_EMBEDDING_DIMENSION = 8192
MAX_TEMPERATURE = 2.0
MAX_CONSUMER_ID_CHARS = 256
MAX_CONSUMER_NAME_CHARS = 500
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200

ENV_PREFIX = "KS_MODELHUB_"
ENV_MODEL_ID_PREFIX = "env-"
MODEL_ID_PREFIX = "model-"

SOURCE_EXPLICIT = pb.DEFAULT_MODEL_SOURCE_UNSPECIFIED  # resolve() with an explicit model id
SOURCE_TENANT = pb.DEFAULT_MODEL_SOURCE_TENANT
SOURCE_ENVIRONMENT = pb.DEFAULT_MODEL_SOURCE_ENVIRONMENT
SOURCE_BUILTIN = pb.DEFAULT_MODEL_SOURCE_BUILTIN
SOURCE_NONE = pb.DEFAULT_MODEL_SOURCE_NONE

CONSUMER_LABELS = {
    pb.MODEL_CONSUMER_KIND_KNOWLEDGE_BASE: "knowledge base",
    pb.MODEL_CONSUMER_KIND_AGENT: "agent",
}


class ProviderInfo(Protocol):
    """What the registry reads from a provider table row (``providers.ProviderSpec`` has these)."""

    @property
    def id(self) -> str: ...

    @property
    def default_base_url(self) -> str: ...

    @property
    def requires_api_key(self) -> bool: ...

    @property
    def model_types(self) -> frozenset[int]: ...

    @property
    def local(self) -> bool: ...


class ModelInUse(ModelError):
    """A model cannot be changed or deleted because of what depends on it.

    The code is INVALID_INPUT (the user message reads "Invalid request: <why>"), but the gRPC status is
    FAILED_PRECONDITION: the request is well-formed and would succeed once the dependency is gone.
    ``defaults`` lists the types it is the tenant's default for, ``usages`` what uses it.
    """

    def __init__(
        self,
        detail: str,
        *,
        model_id: str,
        defaults: Iterable[int] = (),
        usages: Iterable[Usage] = (),
        builtin: bool = False,
    ) -> None:
        super().__init__(INVALID, detail, field="model_id", model_id=model_id)
        self.defaults = list(defaults)
        self.usages = list(usages)
        self.builtin = builtin

    @property
    def grpc_status(self) -> grpc.StatusCode:
        return grpc.StatusCode.FAILED_PRECONDITION


def _invalid(field: str, reason: str) -> ModelError:
    return ModelError(INVALID, reason, field=field)


def _not_found(model_id: str) -> ModelError:
    return ModelError(NOT_FOUND, f"model {model_id} does not exist", field="model_id", model_id=model_id)


def _label(record: ModelRecord) -> str:
    return f"'{record.display_name}' ({record.id})"


def _type_list(types: Iterable[int]) -> str:
    return ", ".join(type_name(t) for t in sorted(types))


def describe_usage(usage: Usage) -> str:
    """``knowledge base 'HR handbook' (kb-1)``."""
    kind = CONSUMER_LABELS.get(usage.consumer_kind, "consumer")
    return (
        f"{kind} '{usage.consumer_name}' ({usage.consumer_id})"
        if usage.consumer_name
        else f"{kind} {usage.consumer_id}"
    )


def _check_url(field: str, url: str) -> None:
    if len(url) > MAX_BASE_URL_CHARS:
        raise _invalid(field, f"{field} is longer than {MAX_BASE_URL_CHARS} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise _invalid(field, f"{field} must be an http:// or https:// URL with a host (got {url!r})")


def _check_type_value(field: str, model_type: int) -> None:
    if model_type not in MODEL_TYPES:
        raise _invalid(field, f"{field} must be one of {_type_list(MODEL_TYPES)} (got {model_type})")


def _check_parameters(params: ModelParams, types: frozenset[int]) -> None:
    dimension = params.embedding_dimension
    field = "parameters.embedding_dimension"
    if dimension is None:
        if EMBEDDING in types:
            raise _invalid(field, f"{field} is required for embedding models (1–{MAX_EMBEDDING_DIMENSION})")
    elif not 0 < dimension <= MAX_EMBEDDING_DIMENSION:
        raise _invalid(field, f"{field} must be between 1 and {MAX_EMBEDDING_DIMENSION} (got {dimension})")
    if params.temperature is not None and not 0 <= params.temperature <= MAX_TEMPERATURE:
        raise _invalid(
            "parameters.temperature",
            f"parameters.temperature must be between 0 and {MAX_TEMPERATURE} (got {params.temperature})",
        )
    for name, value in (("max_tokens", params.max_tokens), ("context_window", params.context_window)):
        if value is not None and value < 1:
            raise _invalid(f"parameters.{name}", f"parameters.{name} must be at least 1 (got {value})")


class Registry:
    """Tenant-scoped registry operations over a :class:`ModelStore`.

    ``providers`` is the provider table (``providers.PROVIDERS``); ``env`` the process environment
    (read once, here; a bad environment model fails construction with the variable named).
    """

    def __init__(
        self,
        store: ModelStore,
        keyring: KeyRing,
        providers: Mapping[str, ProviderInfo],
        env: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_id: Callable[[], str] = lambda: f"{MODEL_ID_PREFIX}{uuid.uuid4().hex}",
    ) -> None:
        self._store = store
        self._keyring = keyring
        self._providers = providers
        self._clock = clock
        self._new_id = new_id
        self._builtin_defaults: dict[int, str] = {}
        self._env_models: dict[int, ModelRecord] = {}
        self._env_keys: dict[str, str] = {}
        self._load_environment(env or {})

    # --- validation ---------------------------------------------------------------------------------

    def _provider(self, provider_id: str, field: str = "provider_id") -> ProviderInfo:
        provider = self._providers.get(provider_id)
        if provider is None:
            known = ", ".join(sorted(pid for pid, p in self._providers.items() if not _in_process(p)))
            raise _invalid(field, f"{field} {provider_id!r} is not a known provider (one of: {known})")
        return provider

    def _check_types(self, provider: ProviderInfo, types: frozenset[int], field: str = "types") -> None:
        if not types:
            raise _invalid(field, f"{field} needs at least one model type")
        for model_type in types:
            _check_type_value(field, model_type)
        missing = types - provider.model_types
        if missing:
            raise _invalid(
                field,
                f"{field}: provider {provider.id!r} does not offer {_type_list(missing)} models "
                f"(it offers {_type_list(provider.model_types)})",
            )

    def _check_base_url(self, provider: ProviderInfo, base_url: str, field: str = "base_url") -> None:
        if base_url:
            _check_url(field, base_url)
        elif not provider.default_base_url and not provider.local:
            raise _invalid(field, f"{field} is required for provider {provider.id!r} (it has no default URL)")

    def _validate(
        self,
        provider: ProviderInfo,
        *,
        display_name: str,
        model_name: str,
        types: frozenset[int],
        base_url: str,
        has_key: bool,
        parameters: ModelParams,
        description: str,
    ) -> None:
        if not 1 <= len(display_name) <= MAX_DISPLAY_NAME_CHARS:
            raise _invalid(
                "display_name",
                f"display_name must be 1–{MAX_DISPLAY_NAME_CHARS} characters (got {len(display_name)})",
            )
        if not model_name:
            raise _invalid("model_name", "model_name is required (the model's name at the provider)")
        if len(model_name) > MAX_MODEL_NAME_CHARS:
            raise _invalid("model_name", f"model_name is longer than {MAX_MODEL_NAME_CHARS} characters")
        self._check_types(provider, types)
        self._check_base_url(provider, base_url)
        if provider.requires_api_key and not has_key:
            raise _invalid("api_key", f"api_key is required for provider {provider.id!r}")
        _check_parameters(parameters, types)
        if len(description) > MAX_DESCRIPTION_CHARS:
            raise _invalid("description", f"description is longer than {MAX_DESCRIPTION_CHARS} characters")

    @staticmethod
    def _require_tenant(tenant_id: str) -> None:
        if not tenant_id:
            raise _invalid("tenant_id", "the caller's tenant is not known (empty tenant id)")

    def _encrypt_key(self, api_key: str) -> tuple[str, str]:
        if len(api_key) > MAX_API_KEY_CHARS:
            raise _invalid("api_key", f"api_key is longer than {MAX_API_KEY_CHARS} characters")
        return self._keyring.encrypt(api_key), mask(api_key)

    # --- CRUD ---------------------------------------------------------------------------------------

    async def create(
        self,
        tenant_id: str,
        *,
        display_name: str,
        provider_id: str,
        model_name: str,
        types: Iterable[int],
        base_url: str = "",
        parameters: ModelParams | None = None,
        api_key: str | None = None,
        description: str = "",
    ) -> ModelRecord:
        """Register a model for the tenant; the API key is stored encrypted and never returned."""
        self._require_tenant(tenant_id)
        provider = self._provider(provider_id)
        if _in_process(provider):
            raise _invalid("provider_id", f"provider {provider_id!r} serves built-in models only")
        display_name, model_name = display_name.strip(), model_name.strip()
        base_url = base_url.strip().rstrip("/")
        key = (api_key or "").strip()
        type_set = frozenset(types)
        params = parameters or ModelParams()
        self._validate(
            provider,
            display_name=display_name,
            model_name=model_name,
            types=type_set,
            base_url=base_url,
            has_key=bool(key),
            parameters=params,
            description=description,
        )
        ciphertext, hint = self._encrypt_key(key) if key else (None, "")
        now = self._clock()
        record = ModelRecord(
            id=self._new_id(),
            tenant_id=tenant_id,
            display_name=display_name,
            provider_id=provider.id,
            model_name=model_name,
            types=type_set,
            base_url=base_url,
            parameters=params,
            api_key_ciphertext=ciphertext,
            api_key_hint=hint,
            builtin=False,
            description=description,
            create_time=now,
            update_time=now,
        )
        await self._store.create(record)
        return record

    async def get(self, tenant_id: str, model_id: str) -> ModelRecord:
        """A model the tenant can see (its own, built-in, or configured by environment)."""
        if not model_id:
            raise _invalid("model_id", "model_id is required")
        env_model = self._env_model_by_id(model_id)
        if env_model is not None:
            return env_model
        record = await self._store.get(tenant_id, model_id)
        if record is None:
            raise _not_found(model_id)
        return record

    async def list(
        self,
        tenant_id: str,
        *,
        model_type: int | None = None,
        provider_id: str | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page:
        """Built-in models first, then the tenant's by creation time. Environment models are not
        listed (they appear through ``get_default`` and ``get``)."""
        if page_size < 0:
            raise _invalid("page_size", f"page_size must not be negative (got {page_size})")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        if model_type:
            _check_type_value("type", model_type)
        try:
            return await self._store.list(
                tenant_id,
                model_type=model_type or None,
                provider_id=provider_id or None,
                page_size=size,
                page_token=page_token,
            )
        except ValueError as exc:
            raise _invalid("page_token", str(exc)) from exc

    async def update(
        self,
        tenant_id: str,
        model_id: str,
        *,
        display_name: str | None = None,
        model_name: str | None = None,
        types: Iterable[int] | None = None,
        base_url: str | None = None,
        parameters: ModelParams | None = None,
        api_key: str | None = None,
        description: str | None = None,
    ) -> ModelRecord:
        """Change the given fields (``None`` keeps a field; ``api_key=""`` removes the stored key)."""
        self._require_tenant(tenant_id)
        current = await self.get(tenant_id, model_id)
        self._refuse_fixed(current, "changed")
        provider = self._provider(current.provider_id)
        new_types = frozenset(types) if types is not None else current.types
        changed = replace(
            current,
            display_name=display_name.strip() if display_name is not None else current.display_name,
            model_name=model_name.strip() if model_name is not None else current.model_name,
            types=new_types,
            base_url=base_url.strip().rstrip("/") if base_url is not None else current.base_url,
            parameters=parameters if parameters is not None else current.parameters,
            description=description if description is not None else current.description,
        )
        key = api_key.strip() if api_key is not None else None
        self._validate(
            provider,
            display_name=changed.display_name,
            model_name=changed.model_name,
            types=changed.types,
            base_url=changed.base_url,
            has_key=bool(key) if key is not None else current.api_key_ciphertext is not None,
            parameters=changed.parameters,
            description=changed.description,
        )
        await self._refuse_breaking_change(tenant_id, current, changed)
        if key is not None:
            ciphertext, hint = self._encrypt_key(key) if key else (None, "")
            changed = replace(changed, api_key_ciphertext=ciphertext, api_key_hint=hint)
        changed = replace(changed, update_time=self._clock())
        try:
            await self._store.update(changed)
        except LookupError:
            raise _not_found(model_id) from None
        return changed

    async def _refuse_breaking_change(
        self, tenant_id: str, current: ModelRecord, changed: ModelRecord
    ) -> None:
        dropped = set(await self._store.defaults_of(tenant_id, current.id)) - changed.types
        if dropped:
            raise ModelInUse(
                f"Model {_label(current)} is this tenant's default {_type_list(dropped)} model, so it must "
                f"keep that type. Set another default model for {_type_list(dropped)} first.",
                model_id=current.id,
                defaults=sorted(dropped),
            )
        vectors_change = (
            current.model_name != changed.model_name
            or current.parameters.embedding_dimension != changed.parameters.embedding_dimension
            or EMBEDDING not in changed.types
        )
        if EMBEDDING in current.types and vectors_change:
            users = [
                u
                for u in await self._store.list_usages(tenant_id, current.id)
                if u.consumer_kind == pb.MODEL_CONSUMER_KIND_KNOWLEDGE_BASE
            ]
            if users:
                raise ModelInUse(
                    f"Model {_label(current)} embeds the vectors of "
                    f"{', '.join(describe_usage(u) for u in users)}; changing its model name, embedding "
                    "dimension or embedding type would make them unusable. Register a new model instead.",
                    model_id=current.id,
                    usages=users,
                )

    async def delete(self, tenant_id: str, model_id: str) -> None:
        """Delete a tenant model; refused (naming why) for built-in models, defaults and used models."""
        self._require_tenant(tenant_id)
        record = await self.get(tenant_id, model_id)
        self._refuse_fixed(record, "deleted")
        await self._refuse_referenced(tenant_id, record)
        try:
            deleted = await self._store.delete(tenant_id, model_id)
        except ModelReferenced:
            # A default or usage appeared since the check above: name it.
            await self._refuse_referenced(tenant_id, record)
            raise ModelInUse(
                f"Model {_label(record)} cannot be deleted: it was just made a default or put in use.",
                model_id=record.id,
            ) from None
        if not deleted:
            raise _not_found(model_id)

    def _refuse_fixed(self, record: ModelRecord, verb: str) -> None:
        if self._env_model_by_id(record.id) is not None:
            variables = f"{ENV_PREFIX}{record.id.removeprefix(ENV_MODEL_ID_PREFIX).upper()}_*"
            raise ModelInUse(
                f"Model {_label(record)} is configured by the environment variables {variables} and "
                f"cannot be {verb} here; change those variables instead.",
                model_id=record.id,
                builtin=True,
            )
        if record.builtin or not record.tenant_id:
            raise ModelInUse(
                f"Model {_label(record)} is built in and cannot be {verb}.", model_id=record.id, builtin=True
            )

    async def _refuse_referenced(self, tenant_id: str, record: ModelRecord) -> None:
        defaults = await self._store.defaults_of(tenant_id, record.id)
        usages = await self._store.list_usages(tenant_id, record.id)
        if not defaults and not usages:
            return
        reasons: list[str] = []
        advice: list[str] = []
        if defaults:
            reasons.append(f"it is this tenant's default {_type_list(defaults).replace(', ', ' and ')} model")
            advice.append("set another default model")
        if usages:
            reasons.append("it is still used by " + ", ".join(describe_usage(u) for u in usages))
            advice.append("move those to another model")
        raise ModelInUse(
            f"Model {_label(record)} cannot be deleted: {'; '.join(reasons)}. First {' and '.join(advice)}.",
            model_id=record.id,
            defaults=defaults,
            usages=usages,
        )

    # --- defaults and resolution --------------------------------------------------------------------

    async def defaults_of(self, tenant_id: str, model_id: str) -> builtins.list[int]:
        """Types for which the model is the tenant's own default."""
        if self._env_model_by_id(model_id) is not None:
            return []
        return await self._store.defaults_of(tenant_id, model_id)

    async def set_default(
        self, tenant_id: str, model_type: int, model_id: str
    ) -> tuple[ModelRecord | None, int]:
        """Make a model the tenant's default for a type (``model_id=""`` clears it); returns the
        default now in force, as :meth:`get_default`."""
        self._require_tenant(tenant_id)
        _check_type_value("type", model_type)
        if not model_id:
            await self._store.set_default(tenant_id, model_type, "")
            return await self.get_default(tenant_id, model_type)
        record = await self.get(tenant_id, model_id)
        if self._env_model_by_id(model_id) is not None:
            raise _invalid(
                "model_id",
                f"model {model_id} comes from environment variables and is used whenever the tenant has no "
                "default; clear the tenant default (empty model_id) instead",
            )
        self._require_type(record, model_type)
        await self._store.set_default(tenant_id, model_type, record.id)
        return record, SOURCE_TENANT

    async def get_default(self, tenant_id: str, model_type: int) -> tuple[ModelRecord | None, int]:
        """The model a call of this type uses without an explicit id, and where it comes from
        (a ``DefaultModelSource`` value)."""
        _check_type_value("type", model_type)
        model_id = await self._store.get_default(tenant_id, model_type) if tenant_id else None
        if model_id:
            record = await self._store.get(tenant_id, model_id)
            if record is not None and model_type in record.types:
                return record, SOURCE_TENANT
        env_model = self._env_models.get(model_type)
        if env_model is not None:
            return env_model, SOURCE_ENVIRONMENT
        builtin_id = self._builtin_defaults.get(model_type)
        if builtin_id:
            record = await self._store.get(tenant_id, builtin_id)
            if record is not None:
                return record, SOURCE_BUILTIN
        return None, SOURCE_NONE

    async def resolve(self, tenant_id: str, model_id: str, needed_type: int) -> tuple[ModelRecord, int]:
        """The model a call uses: the explicit id (source ``SOURCE_EXPLICIT``), else the default chain.

        Raises MODEL_NOT_FOUND, WRONG_MODEL_TYPE, or NO_MODEL_CONFIGURED (with how to add one).
        """
        _check_type_value("type", needed_type)
        if model_id:
            record = await self.get(tenant_id, model_id)
            self._require_type(record, needed_type)
            return record, SOURCE_EXPLICIT
        record_or_none, source = await self.get_default(tenant_id, needed_type)
        if record_or_none is None:
            name = type_name(needed_type)
            raise ModelError(
                pb.MODEL_ERROR_CODE_NO_MODEL_CONFIGURED,
                f"no {name} model is configured for tenant {tenant_id!r}",
                type=name,
                TYPE=name.upper(),
            )
        return record_or_none, source

    @staticmethod
    def _require_type(record: ModelRecord, needed_type: int) -> None:
        if needed_type not in record.types:
            raise ModelError(
                pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE,
                f"model {record.id} has types {_type_list(record.types)}, not {type_name(needed_type)}",
                model_id=record.id,
                provider_id=record.provider_id,
                model=_label(record),
                type=type_name(needed_type),
                types=_type_list(record.types),
            )

    def call_target(self, record: ModelRecord) -> CallTarget:
        """What an adapter needs for one call: the key decrypted, the base URL defaulted."""
        api_key: str | None
        if record.id in self._env_keys:
            api_key = self._env_keys[record.id]
        elif record.api_key_ciphertext:
            try:
                api_key = self._keyring.decrypt(record.api_key_ciphertext)
            except SecretError as exc:
                raise ModelError(
                    pb.MODEL_ERROR_CODE_PROVIDER_ERROR,
                    f"the API key of model {record.id} cannot be decrypted: {exc}",
                    model_id=record.id,
                    provider_id=record.provider_id,
                ) from None
        else:
            api_key = None
        provider = self._providers.get(record.provider_id)
        base_url = record.base_url or (provider.default_base_url if provider is not None else "")
        return CallTarget(
            model_id=record.id,
            provider_id=record.provider_id,
            model_name=record.model_name,
            base_url=base_url,
            api_key=api_key,
            parameters=record.parameters,
            types=record.types,
        )

    # --- usages -------------------------------------------------------------------------------------

    async def put_usage(self, tenant_id: str, usage: Usage) -> Usage:
        """Record that a consumer uses a model (idempotent on model, kind and consumer id).

        Usages of environment models are accepted but not stored: those models cannot be deleted.
        """
        self._require_tenant(tenant_id)
        if usage.consumer_kind not in CONSUMER_LABELS:
            raise _invalid("consumer_kind", "consumer_kind must be KNOWLEDGE_BASE or AGENT")
        if not usage.consumer_id or len(usage.consumer_id) > MAX_CONSUMER_ID_CHARS:
            raise _invalid("consumer_id", f"consumer_id must be 1–{MAX_CONSUMER_ID_CHARS} characters")
        if len(usage.consumer_name) > MAX_CONSUMER_NAME_CHARS:
            raise _invalid(
                "consumer_name", f"consumer_name is longer than {MAX_CONSUMER_NAME_CHARS} characters"
            )
        record = await self.get(tenant_id, usage.model_id)
        if self._env_model_by_id(record.id) is None:
            await self._store.put_usage(tenant_id, usage)
        return usage

    async def delete_usage(self, tenant_id: str, model_id: str, consumer_kind: int, consumer_id: str) -> bool:
        """Remove a usage; removing an unknown one succeeds (returns False)."""
        self._require_tenant(tenant_id)
        return await self._store.delete_usage(tenant_id, model_id, consumer_kind, consumer_id)

    async def list_usages(self, tenant_id: str, model_id: str) -> builtins.list[Usage]:
        record = await self.get(tenant_id, model_id)
        if self._env_model_by_id(record.id) is not None:
            return []
        return await self._store.list_usages(tenant_id, model_id)

    # --- built-in and environment models ------------------------------------------------------------

    async def register_builtin(self, record: ModelRecord, *, default: bool = True) -> ModelRecord:
        """Store (or refresh) a built-in model; with ``default`` it becomes the built-in default for its
        types. Idempotent: an unchanged record is not rewritten and keeps its times."""
        if not record.builtin or record.tenant_id:
            raise ValueError("register_builtin takes records with builtin=True and tenant_id=''")
        existing = await self._store.get("", record.id)
        if (
            existing is not None
            and replace(existing, create_time=record.create_time, update_time=record.update_time) == record
        ):
            stored = existing
        else:
            now = self._clock()
            stored = replace(record, create_time=existing.create_time if existing else now, update_time=now)
            await self._store.upsert_builtin(stored)
        if default:
            for model_type in stored.types:
                self._builtin_defaults[model_type] = stored.id
        return stored

    def environment_models(self) -> builtins.list[ModelRecord]:
        """The models configured by environment variables, one per type at most."""
        return [self._env_models[t] for t in sorted(self._env_models)]

    def _env_model_by_id(self, model_id: str) -> ModelRecord | None:
        if not model_id.startswith(ENV_MODEL_ID_PREFIX):
            return None
        for record in self._env_models.values():
            if record.id == model_id:
                return record
        return None

    def _load_environment(self, env: Mapping[str, str]) -> None:
        now = self._clock()
        for model_type in MODEL_TYPES:
            name = type_name(model_type)
            prefix = f"{ENV_PREFIX}{name.upper()}_"

            def var(suffix: str, prefix: str = prefix) -> str:
                return env.get(prefix + suffix, "").strip()

            provider_id, model_name = var("PROVIDER"), var("MODEL")
            if not provider_id and not model_name:
                continue
            if not provider_id or not model_name:
                missing = prefix + ("PROVIDER" if not provider_id else "MODEL")
                raise _invalid(
                    missing,
                    f"{prefix}PROVIDER and {prefix}MODEL must be set together ({missing} is missing)",
                )
            provider = self._provider(provider_id, prefix + "PROVIDER")
            self._check_types(provider, frozenset({model_type}), prefix + "PROVIDER")
            base_url = var("BASE_URL").rstrip("/")
            self._check_base_url(provider, base_url, prefix + "BASE_URL")
            api_key = var("API_KEY")
            if provider.requires_api_key and not api_key:
                raise _invalid(
                    prefix + "API_KEY", f"{prefix}API_KEY is required for provider {provider_id!r}"
                )
            params = ModelParams(
                embedding_dimension=_env_int(env, prefix + "EMBEDDING_DIMENSION", MAX_EMBEDDING_DIMENSION),
                context_window=_env_int(env, prefix + "CONTEXT_WINDOW"),
            )
            model_id = f"{ENV_MODEL_ID_PREFIX}{name}"
            self._env_models[model_type] = ModelRecord(
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
                self._env_keys[model_id] = api_key


def _in_process(provider: ProviderInfo) -> bool:
    """A provider that runs inside modelhub (local, no URL) serves only the built-in models."""
    return provider.local and not provider.default_base_url


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
        raise _invalid(variable, f"{variable} must be {limit} (got {text!r})")
    return value
