"""The gRPC face of modelhub: ``ModelHubService`` bound from its two halves.

- :mod:`~knowsphere_modelhub.api.models`: the registry (models, defaults, usages, providers), which
  announces model changes on the bus;
- :mod:`~knowsphere_modelhub.api.calls`: every model call.

Handlers are thin: they read the caller's tenant, go through the registry or a provider adapter, and
turn a :class:`~knowsphere_modelhub.domain.errors.ModelError` into a gRPC status carrying
``ModelErrorDetail`` (:mod:`~knowsphere_modelhub.api.errors`).
"""

from __future__ import annotations

from collections.abc import Mapping

from knowsphere_contracts.services import CONTRACTS
from knowsphere_modelhub.api.calls import ModelCallsServicer
from knowsphere_modelhub.api.models import ModelChanges, ModelRegistryServicer
from knowsphere_modelhub.domain.ports import ProviderAdapter
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_telemetry import LlmObserver


def build_binding(
    registry: Registry,
    adapters: Mapping[str, ProviderAdapter],
    settings: Settings,
    observer: LlmObserver,
    *,
    changes: ModelChanges | None = None,
) -> ServiceBinding:
    """Every RPC of the service; ``adapters`` by API style; ``changes`` None: no events announced."""
    servicers = [
        ModelRegistryServicer(registry, default_language=settings.default_language, changes=changes),
        ModelCallsServicer(registry, adapters, settings, observer),
    ]
    return bind_service(CONTRACTS["modelhub"].descriptor, servicers, pending="")
