"""Retrieval's bus keeps its cached model facts fresh.

What a user notices: once a tenant changes what an embedding model reads, the next search uses it,
not one a cache timeout later. How the client caches and how the subscriber drops facts is
``knowsphere_clients``' (tested in ``libs/clients/tests/test_model_changes.py``); here, that what
retrieval's :func:`build_bus` returns listens on ``ks.modelhub.model.changed.v1`` and reaches the
client the wiring puts in the context. The event goes through FastStream's in-memory broker.
"""

from __future__ import annotations

from typing import Any

from faststream.nats import TestNatsBroker
from google.protobuf.struct_pb2 import Struct

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere_clients import ModelHubClient
from knowsphere_clients.model_changes import MODELHUB
from knowsphere_contracts.events import ModelChange, ModelChanged
from knowsphere_retrieval.api.bus import build_bus
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, bound_identity, require_identity
from knowsphere_runtime.rpc.testing import serving

ACME = Identity("acme", "admin")


class ScriptedModelHub:
    """The languages of each tenant's embedding models; counts how often it is asked."""

    def __init__(self) -> None:
        self.languages: dict[tuple[str, str], list[str]] = {}
        self.asked = 0

    async def GetModel(self, request: mpb.GetModelRequest, context: Any) -> Any:
        self.asked += 1
        extra = Struct()
        extra.update({"languages": self.languages.get((require_identity().tenant_id, request.model_id), [])})
        model = mpb.Model(id=request.model_id, types=[mpb.MODEL_TYPE_EMBEDDING])
        model.parameters.extra.CopyFrom(extra)
        return mpb.GetModelResponse(model=model)


async def test_build_bus_subscribes_to_model_changes_and_drops_cached_facts():
    bus = build_bus()
    hub = ScriptedModelHub()
    hub.languages[("acme", "embedder")] = ["en"]
    async with serving("modelhub", hub) as channel:
        client = ModelHubClient(channel, cache_seconds=600)
        broker = build_broker("nats://127.0.0.1:4222", client_name="retrieval-test")
        broker.include_router(bus.subscribers)
        broker.context.set_global(MODELHUB, client)
        with bound_identity(ACME):
            assert await client.model_languages("embedder") == ("en",)
            hub.languages[("acme", "embedder")] = ["en", "zh"]
            assert await client.model_languages("embedder") == ("en",)  # cached
            async with TestNatsBroker(broker) as test_bus:
                event = ModelChanged(model_id="embedder", change=ModelChange.UPDATED)
                await test_bus.publish(event.model_dump(mode="json"), ModelChanged.subject)
            assert await client.model_languages("embedder") == ("en", "zh")
    assert hub.asked == 2
