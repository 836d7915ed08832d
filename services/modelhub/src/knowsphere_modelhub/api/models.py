"""The registry half of ``ModelHubService``: models, defaults, usages and the provider table.

Handlers read the caller's tenant, call the :class:`~knowsphere_modelhub.domain.registry.Registry` and
convert its records (:mod:`~knowsphere_modelhub.api.convert`). Every committed change of a model or a
default is announced as :class:`~knowsphere_contracts.events.ModelChanged` (when the service has a
bus): after the change, while the caller's identity is bound, so the event carries the tenant. A
publish that fails is logged and never fails the call — the change is committed, and the caches the
event would have cleared expire by themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import grpc
import structlog

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import DefaultModelSource, ModelConsumerKind, ModelType
from knowsphere_contracts.events import ModelChange, ModelChanged
from knowsphere_modelhub.api.convert import (
    model_types_of,
    params_from_proto,
    record_to_proto,
    usage_from_proto,
    usage_to_proto,
)
from knowsphere_modelhub.api.errors import answer
from knowsphere_modelhub.domain.providers import PROVIDERS, to_proto
from knowsphere_modelhub.domain.records import ModelRecord, in_proto_order
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.domain.validation import model_type_of
from knowsphere_runtime.identity import require_identity

log = structlog.get_logger(__name__)


class ModelChanges(Protocol):
    """Where model changes are announced (``api.bus.ModelHubBus``)."""

    async def announce(self, event: ModelChanged) -> None: ...


class ModelRegistryServicer:
    """The registry RPCs of ``knowsphere.modelhub.v1.ModelHubService``.

    ``changes`` is None when the service runs without a bus: nothing is announced.
    """

    def __init__(self, registry: Registry, *, default_language: str, changes: ModelChanges | None) -> None:
        self._registry = registry
        self._default_language = default_language
        self._changes = changes

    async def _announce(self, change: ModelChange, model_id: str, model_types: Iterable[ModelType]) -> None:
        if self._changes is None:
            return
        event = ModelChanged(model_id=model_id, change=change, model_types=in_proto_order(model_types))
        try:
            await self._changes.announce(event)
        except Exception:
            log.exception("model change not announced", change=change.value, model_id=model_id)

    async def _model(self, tenant: str, record: ModelRecord) -> pb.Model:
        return record_to_proto(record, await self._registry.defaults_of(tenant, record.id))

    # --- models --------------------------------------------------------------------------------

    async def CreateModel(
        self, request: pb.CreateModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateModelResponse:
        async def work() -> pb.CreateModelResponse:
            record = await self._registry.create(
                require_identity().tenant_id,
                display_name=request.display_name,
                provider_id=request.provider_id,
                model_name=request.model_name,
                types=model_types_of(request.types),
                base_url=request.base_url,
                parameters=params_from_proto(request.parameters),
                api_key=request.api_key or None,
                description=request.description,
            )
            await self._announce(ModelChange.CREATED, record.id, record.types)
            return pb.CreateModelResponse(model=record_to_proto(record))

        return await answer(context, self._default_language, work)

    async def GetModel(
        self, request: pb.GetModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetModelResponse:
        async def work() -> pb.GetModelResponse:
            tenant = require_identity().tenant_id
            record = await self._registry.get(tenant, request.model_id)
            return pb.GetModelResponse(model=await self._model(tenant, record))

        return await answer(context, self._default_language, work)

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        async def work() -> pb.ListModelsResponse:
            tenant = require_identity().tenant_id
            page = await self._registry.list(
                tenant,
                model_type=model_type_of("type", request.type) if request.type else None,
                provider_id=request.provider_id or None,
                page_size=request.page_size,
                page_token=request.page_token,
            )
            models = [await self._model(tenant, record) for record in page.records]
            return pb.ListModelsResponse(models=models, next_page_token=page.next_page_token)

        return await answer(context, self._default_language, work)

    async def UpdateModel(
        self, request: pb.UpdateModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateModelResponse:
        async def work() -> pb.UpdateModelResponse:
            changes: dict[str, Any] = {}
            for name in ("display_name", "model_name", "base_url", "api_key", "description"):
                if request.HasField(name):
                    changes[name] = getattr(request, name)
            if request.HasField("types"):
                changes["types"] = model_types_of(request.types.types)
            if request.HasField("parameters"):
                changes["parameters"] = params_from_proto(request.parameters)
            tenant = require_identity().tenant_id
            record = await self._registry.update(tenant, request.model_id, **changes)
            await self._announce(ModelChange.UPDATED, record.id, record.types)
            return pb.UpdateModelResponse(model=await self._model(tenant, record))

        return await answer(context, self._default_language, work)

    async def DeleteModel(
        self, request: pb.DeleteModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteModelResponse:
        async def work() -> pb.DeleteModelResponse:
            record = await self._registry.delete(require_identity().tenant_id, request.model_id)
            await self._announce(ModelChange.DELETED, record.id, record.types)
            return pb.DeleteModelResponse()

        return await answer(context, self._default_language, work)

    # --- defaults ------------------------------------------------------------------------------

    async def SetDefaultModel(
        self, request: pb.SetDefaultModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetDefaultModelResponse:
        async def work() -> pb.SetDefaultModelResponse:
            tenant = require_identity().tenant_id
            model_type = model_type_of("type", request.type)
            record, source = await self._registry.set_default(tenant, model_type, request.model_id)
            await self._announce(ModelChange.DEFAULT_CHANGED, request.model_id, [model_type])
            return pb.SetDefaultModelResponse(
                default_model=await self._resolved_default(tenant, model_type, record, source)
            )

        return await answer(context, self._default_language, work)

    async def GetDefaultModel(
        self, request: pb.GetDefaultModelRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDefaultModelResponse:
        async def work() -> pb.GetDefaultModelResponse:
            model_type = model_type_of("type", request.type)
            tenant = require_identity().tenant_id
            record, source = await self._registry.get_default(tenant, model_type)
            return pb.GetDefaultModelResponse(
                default_model=await self._resolved_default(tenant, model_type, record, source)
            )

        return await answer(context, self._default_language, work)

    async def _resolved_default(
        self, tenant: str, model_type: ModelType, record: ModelRecord | None, source: DefaultModelSource
    ) -> pb.ResolvedDefault:
        """The message of the default in force for a type: ``record`` (None: none) from ``source``."""
        resolved = pb.ResolvedDefault(type=model_type.to_proto(), source=source.to_proto())
        if record is not None:
            resolved.model.CopyFrom(await self._model(tenant, record))
        return resolved

    # --- usages --------------------------------------------------------------------------------

    async def PutModelUsage(
        self, request: pb.PutModelUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutModelUsageResponse:
        async def work() -> pb.PutModelUsageResponse:
            usage = await self._registry.put_usage(require_identity().tenant_id, usage_from_proto(request))
            return pb.PutModelUsageResponse(usage=usage_to_proto(usage))

        return await answer(context, self._default_language, work)

    async def DeleteModelUsage(
        self, request: pb.DeleteModelUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteModelUsageResponse:
        async def work() -> pb.DeleteModelUsageResponse:
            await self._registry.delete_usage(
                require_identity().tenant_id,
                request.model_id,
                ModelConsumerKind.from_number(request.consumer_kind),
                request.consumer_id,
            )
            return pb.DeleteModelUsageResponse()

        return await answer(context, self._default_language, work)

    async def ListModelUsages(
        self, request: pb.ListModelUsagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelUsagesResponse:
        async def work() -> pb.ListModelUsagesResponse:
            usages = await self._registry.list_usages(require_identity().tenant_id, request.model_id)
            return pb.ListModelUsagesResponse(usages=[usage_to_proto(u) for u in usages])

        return await answer(context, self._default_language, work)

    # --- providers -----------------------------------------------------------------------------

    async def ListProviders(
        self, request: pb.ListProvidersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListProvidersResponse:
        return pb.ListProvidersResponse(providers=[to_proto(spec) for spec in PROVIDERS.values()])
