"""The model registry: tenant models (validated, keys encrypted), defaults, usages and resolution.

Resolution of a call's model: the explicit id → the tenant's default for the type → the model
configured by environment variables (:mod:`~knowsphere_modelhub.domain.environment`, id
``env-<type>``) → the built-in default for the type → ``NO_MODEL_CONFIGURED``.

What a record must satisfy is in :mod:`~knowsphere_modelhub.domain.validation`; why a model cannot
be changed or deleted in :mod:`~knowsphere_modelhub.domain.in_use`. Errors are
:class:`~knowsphere_modelhub.domain.errors.ModelError`; refusals caused by state rather than by the
request are :class:`~knowsphere_modelhub.domain.in_use.ModelInUse` (FAILED_PRECONDITION).
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from knowsphere.modelhub.v1.modelhub_enums import (
    DefaultModelSource,
    ModelConsumerKind,
    ModelErrorCode,
    ModelType,
)
from knowsphere_egress import EgressError, EgressPolicy, check_url
from knowsphere_modelhub.domain import in_use
from knowsphere_modelhub.domain.environment import load_environment_models
from knowsphere_modelhub.domain.errors import ModelError, invalid_field
from knowsphere_modelhub.domain.ports import ModelReferenced, ModelStore, Page, Usage
from knowsphere_modelhub.domain.records import CallTarget, ModelParams, ModelRecord
from knowsphere_modelhub.domain.validation import (
    ProviderInfo,
    check_api_key_length,
    check_type,
    check_usage,
    in_process,
    provider_of,
    type_list,
    validate_record,
)
from knowsphere_runtime.secrets import KeyRing, SecretError, SecretScope, mask

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MODEL_ID_PREFIX = "model-"


def _not_found(model_id: str) -> ModelError:
    return ModelError(
        ModelErrorCode.MODEL_NOT_FOUND,
        f"model {model_id} does not exist",
        field="model_id",
        model_id=model_id,
    )


def _require_tenant(tenant_id: str) -> None:
    if not tenant_id:
        raise invalid_field("tenant_id", "the caller's tenant is not known (empty tenant id)")


def _require_type(record: ModelRecord, needed_type: ModelType) -> None:
    if needed_type not in record.types:
        raise ModelError(
            ModelErrorCode.WRONG_MODEL_TYPE,
            f"model {record.id} has types {type_list(record.types)}, not {needed_type}",
            model_id=record.id,
            provider_id=record.provider_id,
            model=in_use.label(record),
            type=needed_type,
            types=type_list(record.types),
        )


class Registry:
    """Tenant-scoped registry operations over a :class:`ModelStore`.

    ``providers`` is the provider table (``providers.PROVIDERS``); ``env`` the process environment
    (read once, here; a bad environment model fails construction with the variable named);
    ``egress`` the policy a tenant's base URL must pass (its calls go through the same guard).
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
        egress: EgressPolicy | None = None,
    ) -> None:
        self._store = store
        self._egress = egress or EgressPolicy()
        self._keyring = keyring
        self._providers = providers
        self._clock = clock
        self._new_id = new_id
        self._builtin_defaults: dict[ModelType, str] = {}
        self._environment = load_environment_models(env or {}, providers, clock())

    def _encrypt_key(self, api_key: str, tenant_id: str, model_id: str) -> tuple[str, str]:
        """The key's ciphertext, bound to its record (tenant and model), and its masked hint."""
        check_api_key_length(api_key)
        return self._keyring.encrypt(api_key, SecretScope(tenant_id, model_id)), mask(api_key)

    def _check_destination(self, base_url: str) -> None:
        """Refuses a base URL the egress guard would refuse whatever it resolves to (an internal
        address, a metadata host, a port outside the policy); names are checked again at every call."""
        if not base_url:
            return
        try:
            check_url(base_url, self._egress)
        except EgressError:
            raise invalid_field(
                "base_url",
                "base_url points at an address or port models may not be called at (private, loopback, "
                "link-local and metadata addresses, and ports outside the egress policy, unless the "
                "operator allow-lists them)",
            ) from None

    # --- CRUD ---------------------------------------------------------------------------------------

    async def create(
        self,
        tenant_id: str,
        *,
        display_name: str,
        provider_id: str,
        model_name: str,
        types: Iterable[ModelType],
        base_url: str = "",
        parameters: ModelParams | None = None,
        api_key: str | None = None,
        description: str = "",
    ) -> ModelRecord:
        """Register a model for the tenant; the API key is stored encrypted and never returned."""
        _require_tenant(tenant_id)
        provider = provider_of(self._providers, provider_id)
        if in_process(provider):
            raise invalid_field("provider_id", f"provider {provider_id!r} serves built-in models only")
        display_name, model_name = display_name.strip(), model_name.strip()
        base_url = base_url.strip().rstrip("/")
        key = (api_key or "").strip()
        type_set = frozenset(types)
        params = parameters or ModelParams()
        validate_record(
            provider,
            display_name=display_name,
            model_name=model_name,
            types=type_set,
            base_url=base_url,
            has_key=bool(key),
            parameters=params,
            description=description,
        )
        self._check_destination(base_url)
        model_id = self._new_id()
        ciphertext, hint = self._encrypt_key(key, tenant_id, model_id) if key else (None, "")
        now = self._clock()
        record = ModelRecord(
            id=model_id,
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
            raise invalid_field("model_id", "model_id is required")
        env_model = self._environment.by_id(model_id)
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
        model_type: ModelType | None = None,
        provider_id: str | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page:
        """Built-in models first, then the tenant's by creation time. Environment models are not
        listed (they appear through ``get_default`` and ``get``)."""
        if page_size < 0:
            raise invalid_field("page_size", f"page_size must not be negative (got {page_size})")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        if model_type is not None:
            check_type("type", model_type)
        try:
            return await self._store.list(
                tenant_id,
                model_type=model_type,
                provider_id=provider_id or None,
                page_size=size,
                page_token=page_token,
            )
        except ValueError as exc:
            raise invalid_field("page_token", str(exc)) from exc

    async def update(
        self,
        tenant_id: str,
        model_id: str,
        *,
        display_name: str | None = None,
        model_name: str | None = None,
        types: Iterable[ModelType] | None = None,
        base_url: str | None = None,
        parameters: ModelParams | None = None,
        api_key: str | None = None,
        description: str | None = None,
    ) -> ModelRecord:
        """Change the given fields (``None`` keeps a field; ``api_key=""`` removes the stored key)."""
        _require_tenant(tenant_id)
        current = await self.get(tenant_id, model_id)
        self._refuse_fixed(current, "changed")
        provider = provider_of(self._providers, current.provider_id)
        changed = replace(
            current,
            display_name=display_name.strip() if display_name is not None else current.display_name,
            model_name=model_name.strip() if model_name is not None else current.model_name,
            types=frozenset(types) if types is not None else current.types,
            base_url=base_url.strip().rstrip("/") if base_url is not None else current.base_url,
            parameters=parameters if parameters is not None else current.parameters,
            description=description if description is not None else current.description,
        )
        key = api_key.strip() if api_key is not None else None
        if changed.base_url != current.base_url and current.api_key_ciphertext is not None and key is None:
            # The stored key was given for the old host: it is never sent to a new one unasked.
            raise invalid_field(
                "api_key",
                "changing base_url requires the API key again (the stored key was given for "
                f"{current.base_url or 'the provider default'}); send api_key, or an empty one to drop it",
            )
        validate_record(
            provider,
            display_name=changed.display_name,
            model_name=changed.model_name,
            types=changed.types,
            base_url=changed.base_url,
            has_key=bool(key) if key is not None else current.api_key_ciphertext is not None,
            parameters=changed.parameters,
            description=changed.description,
        )
        if changed.base_url != current.base_url:
            self._check_destination(changed.base_url)
        await self._refuse_breaking_change(tenant_id, current, changed)
        if key is not None:
            ciphertext, hint = self._encrypt_key(key, current.tenant_id, current.id) if key else (None, "")
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
            raise in_use.default_type_dropped(current, dropped)
        vectors_change = (
            current.model_name != changed.model_name
            or current.parameters.embedding_dimension != changed.parameters.embedding_dimension
            or ModelType.EMBEDDING not in changed.types
        )
        if ModelType.EMBEDDING in current.types and vectors_change:
            users = [
                u
                for u in await self._store.list_usages(tenant_id, current.id)
                if u.consumer_kind is ModelConsumerKind.KNOWLEDGE_BASE
            ]
            if users:
                raise in_use.vectors_in_use(current, users)

    async def delete(self, tenant_id: str, model_id: str) -> ModelRecord:
        """Delete a tenant model and return what it was; refused (naming why) for built-in models,
        defaults and used models."""
        _require_tenant(tenant_id)
        record = await self.get(tenant_id, model_id)
        self._refuse_fixed(record, "deleted")
        await self._refuse_referenced(tenant_id, record)
        try:
            deleted = await self._store.delete(tenant_id, model_id)
        except ModelReferenced:
            # A default or usage appeared since the check above: name it.
            await self._refuse_referenced(tenant_id, record)
            raise in_use.referenced_meanwhile(record) from None
        if not deleted:
            raise _not_found(model_id)
        return record

    def _refuse_fixed(self, record: ModelRecord, verb: str) -> None:
        if self._environment.by_id(record.id) is not None:
            raise in_use.configured_by_environment(record, self._environment.variables(record), verb)
        if record.builtin or not record.tenant_id:
            raise in_use.built_in(record, verb)

    async def _refuse_referenced(self, tenant_id: str, record: ModelRecord) -> None:
        defaults = await self._store.defaults_of(tenant_id, record.id)
        usages = await self._store.list_usages(tenant_id, record.id)
        if defaults or usages:
            raise in_use.still_referenced(record, defaults, usages)

    # --- defaults and resolution --------------------------------------------------------------------

    async def defaults_of(self, tenant_id: str, model_id: str) -> builtins.list[ModelType]:
        """Types for which the model is the tenant's own default."""
        if self._environment.by_id(model_id) is not None:
            return []
        return await self._store.defaults_of(tenant_id, model_id)

    async def set_default(
        self, tenant_id: str, model_type: ModelType, model_id: str
    ) -> tuple[ModelRecord | None, DefaultModelSource]:
        """Make a model the tenant's default for a type (``model_id=""`` clears it); returns the
        default now in force, as :meth:`get_default`."""
        _require_tenant(tenant_id)
        check_type("type", model_type)
        if not model_id:
            await self._store.set_default(tenant_id, model_type, "")
            return await self.get_default(tenant_id, model_type)
        record = await self.get(tenant_id, model_id)
        if self._environment.by_id(model_id) is not None:
            raise invalid_field(
                "model_id",
                f"model {model_id} comes from environment variables and is used whenever the tenant has no "
                "default; clear the tenant default (empty model_id) instead",
            )
        _require_type(record, model_type)
        await self._store.set_default(tenant_id, model_type, record.id)
        return record, DefaultModelSource.TENANT

    async def get_default(
        self, tenant_id: str, model_type: ModelType
    ) -> tuple[ModelRecord | None, DefaultModelSource]:
        """The model a call of this type uses without an explicit id, and where it comes from."""
        check_type("type", model_type)
        model_id = await self._store.get_default(tenant_id, model_type) if tenant_id else None
        if model_id:
            record = await self._store.get(tenant_id, model_id)
            if record is not None and model_type in record.types:
                return record, DefaultModelSource.TENANT
        env_model = self._environment.by_type.get(model_type)
        if env_model is not None:
            return env_model, DefaultModelSource.ENVIRONMENT
        builtin_id = self._builtin_defaults.get(model_type)
        if builtin_id:
            record = await self._store.get(tenant_id, builtin_id)
            if record is not None:
                return record, DefaultModelSource.BUILTIN
        return None, DefaultModelSource.NONE

    async def resolve(
        self, tenant_id: str, model_id: str, needed_type: ModelType
    ) -> tuple[ModelRecord, DefaultModelSource | None]:
        """The model a call uses: the explicit id (source None), else the default chain.

        Raises MODEL_NOT_FOUND, WRONG_MODEL_TYPE, or NO_MODEL_CONFIGURED (with how to add one).
        """
        check_type("type", needed_type)
        if model_id:
            record = await self.get(tenant_id, model_id)
            _require_type(record, needed_type)
            return record, None
        record_or_none, source = await self.get_default(tenant_id, needed_type)
        if record_or_none is None:
            raise ModelError(
                ModelErrorCode.NO_MODEL_CONFIGURED,
                f"no {needed_type} model is configured for tenant {tenant_id!r}",
                type=needed_type,
                TYPE=needed_type.name,
            )
        return record_or_none, source

    def call_target(self, record: ModelRecord) -> CallTarget:
        """What an adapter needs for one call: the key decrypted, the base URL defaulted."""
        api_key: str | None
        if record.id in self._environment.keys:
            api_key = self._environment.keys[record.id]
        elif record.api_key_ciphertext:
            try:
                api_key = self._keyring.decrypt(
                    record.api_key_ciphertext, SecretScope(record.tenant_id, record.id)
                )
            except SecretError as exc:
                raise ModelError(
                    ModelErrorCode.PROVIDER_ERROR,
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
            operator_configured=self._environment.by_id(record.id) is not None,
        )

    # --- usages -------------------------------------------------------------------------------------

    async def put_usage(self, tenant_id: str, usage: Usage) -> Usage:
        """Record that a consumer uses a model (idempotent on model, kind and consumer id).

        Usages of environment models are accepted but not stored: those models cannot be deleted.
        """
        _require_tenant(tenant_id)
        check_usage(usage)
        record = await self.get(tenant_id, usage.model_id)
        if self._environment.by_id(record.id) is None:
            await self._store.put_usage(tenant_id, usage)
        return usage

    async def delete_usage(
        self, tenant_id: str, model_id: str, consumer_kind: ModelConsumerKind | None, consumer_id: str
    ) -> bool:
        """Remove a usage; removing an unknown one succeeds (returns False)."""
        _require_tenant(tenant_id)
        if consumer_kind is None:  # no usage has no kind
            return False
        return await self._store.delete_usage(tenant_id, model_id, consumer_kind, consumer_id)

    async def list_usages(self, tenant_id: str, model_id: str) -> builtins.list[Usage]:
        record = await self.get(tenant_id, model_id)
        if self._environment.by_id(record.id) is not None:
            return []
        return await self._store.list_usages(tenant_id, model_id)

    # --- built-in models ----------------------------------------------------------------------------

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
