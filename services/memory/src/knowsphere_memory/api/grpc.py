"""The gRPC face of the memory service, bound from its parts: sessions, long-term items, affinity.

Identity comes from the call's signed identity token; every part reads and
writes only the calling user's memory, so another user's ids behave as unknown. With a modelhub client,
``CompactSession`` has the handoff document written by a chat model; without one it uses the
deterministic extract and says so.
"""

from __future__ import annotations

from knowsphere_clients import ModelHubClient
from knowsphere_contracts.services import CONTRACTS
from knowsphere_memory.adapters.modelhub import ModelHubHandoffModel
from knowsphere_memory.api.affinity import AffinityServicer
from knowsphere_memory.api.items import ItemsServicer
from knowsphere_memory.api.requests import Clock, utc_now
from knowsphere_memory.api.sessions import HandoffModels, SessionsServicer, no_handoff_model
from knowsphere_memory.domain.handoff import HandoffModel
from knowsphere_memory.domain.ports import MemoryStore
from knowsphere_memory.settings import Settings
from knowsphere_runtime.rpc import ServiceBinding, bind_service


def modelhub_handoff_models(client: ModelHubClient) -> HandoffModels:
    """Handoff models on modelhub: the named model, or the tenant's default for an empty id."""

    def model(model_id: str) -> HandoffModel | None:
        return ModelHubHandoffModel(client, model_id=model_id)

    return model


def build_binding(
    *,
    settings: Settings,
    store: MemoryStore,
    clock: Clock = utc_now,
    modelhub: ModelHubClient | None = None,
) -> ServiceBinding:
    """MemoryService, every method implemented by exactly one of its parts."""
    handoff_models = modelhub_handoff_models(modelhub) if modelhub is not None else no_handoff_model
    return bind_service(
        CONTRACTS["memory"].descriptor,
        [
            SessionsServicer(settings=settings, store=store, clock=clock, handoff_models=handoff_models),
            ItemsServicer(settings=settings, store=store, clock=clock),
            AffinityServicer(settings=settings, store=store, clock=clock),
        ],
        pending="",
    )
