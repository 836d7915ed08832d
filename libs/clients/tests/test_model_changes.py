"""Cached model facts, and the model-change events that drop them (``knowsphere_clients.model_changes``).

What a user notices: once a tenant adds a rerank model (or changes what an embedding model reads),
the next request uses it, not one a cache timeout later. A scripted modelhub answers the real
``ModelHubClient`` over gRPC on loopback; the event reaches :func:`model_changes_router`'s subscriber
through FastStream's in-memory broker, and once through a real nats-server, with the tenant in the
identity headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from faststream.nats import NatsBroker, TestNatsBroker
from google.protobuf.struct_pb2 import Struct

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients import ModelHubClient
from knowsphere_clients.model_changes import MODELHUB, model_changes_router
from knowsphere_contracts.events import ModelChange, ModelChanged
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, IdentityError, bound_identity, require_identity
from knowsphere_runtime.rpc.testing import serving

ACME = Identity("acme", "admin")
GLOBEX = Identity("globex", "admin")


class ScriptedModelHub:
    """Default rerank models and embedding-model languages per tenant; counts what it is asked."""

    def __init__(self) -> None:
        self.rerank_defaults: dict[str, str] = {}
        self.languages: dict[tuple[str, str], list[str]] = {}
        self.windows: dict[str, int] = {}  # model id -> context window
        self.asked: list[tuple[str, str]] = []  # (tenant, method)

    async def GetDefaultModel(self, request: mpb.GetDefaultModelRequest, context: Any) -> Any:
        tenant = require_identity().tenant_id
        self.asked.append((tenant, "GetDefaultModel"))
        model_id = self.rerank_defaults.get(tenant) if request.type == mpb.MODEL_TYPE_RERANK else None
        resolved = mpb.ResolvedDefault(type=request.type)
        if model_id:
            resolved.model.CopyFrom(mpb.Model(id=model_id, types=[mpb.MODEL_TYPE_RERANK]))
        return mpb.GetDefaultModelResponse(default_model=resolved)

    async def GetModel(self, request: mpb.GetModelRequest, context: Any) -> Any:
        tenant = require_identity().tenant_id
        self.asked.append((tenant, "GetModel"))
        if request.model_id == "deleted":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.model_id} not found")
        extra = Struct()
        extra.update({"languages": self.languages.get((tenant, request.model_id), [])})
        model = mpb.Model(id=request.model_id, types=[mpb.MODEL_TYPE_EMBEDDING])
        model.parameters.extra.CopyFrom(extra)
        model.parameters.context_window = self.windows.get(request.model_id, 0)
        return mpb.GetModelResponse(model=model)


class WatchedClient(ModelHubClient):
    """The real client, telling the test when an event has reached it."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(channel, cache_seconds=600)
        self.invalidated = asyncio.Event()

    def invalidate(self, tenant_id: str, model_id: str = "") -> None:
        super().invalidate(tenant_id, model_id)
        self.invalidated.set()


@pytest.fixture
async def modelhub() -> AsyncIterator[tuple[ScriptedModelHub, WatchedClient]]:
    hub = ScriptedModelHub()
    async with serving("modelhub", hub) as channel:
        yield hub, WatchedClient(channel)


def subscribed(url: str, client: ModelHubClient) -> NatsBroker:
    """A broker of a service that keeps ``client``'s facts fresh, wired as a service's main does."""
    broker = build_broker(url, client_name="caching-service-test")
    broker.include_router(model_changes_router("caching-service"))
    broker.context.set_global(MODELHUB, client)
    return broker


def changed(model_id: str, change: ModelChange, *types: str) -> dict[str, Any]:
    return ModelChanged(model_id=model_id, change=change, model_types=list(types)).model_dump(mode="json")


async def facts(client: ModelHubClient, identity: Identity) -> tuple[bool, tuple[str, ...]]:
    with bound_identity(identity):
        return await client.has_default(ModelType.RERANK), await client.model_languages("embedder")


async def test_a_model_change_is_seen_at_the_next_request_not_after_the_cache_expires(modelhub):
    hub, client = modelhub
    hub.languages[("acme", "embedder")] = ["en"]
    broker = subscribed("nats://127.0.0.1:4222", client)
    assert await facts(client, ACME) == (False, ("en",))
    assert await facts(client, GLOBEX) == (False, ())
    asked = len(hub.asked)
    assert await facts(client, ACME) == (False, ("en",))  # cached: modelhub is not asked again
    assert len(hub.asked) == asked

    hub.rerank_defaults["acme"] = "bge-reranker"
    hub.languages[("acme", "embedder")] = ["en", "zh"]
    async with TestNatsBroker(broker) as bus:
        with bound_identity(ACME):
            await bus.publish(
                changed("bge-reranker", ModelChange.DEFAULT_CHANGED, "rerank"), ModelChanged.subject
            )
            await bus.publish(changed("embedder", ModelChange.UPDATED), ModelChanged.subject)

    assert await facts(client, ACME) == (True, ("en", "zh"))
    assert hub.asked[asked:] == [("acme", "GetDefaultModel"), ("acme", "GetModel")]
    assert await facts(client, GLOBEX) == (False, ())  # another tenant's facts stay cached
    assert len(hub.asked) == asked + 2


async def test_the_window_an_embedding_model_reads_is_read_once_and_a_missing_model_reads_nothing(modelhub):
    hub, client = modelhub
    hub.windows["embedder"] = 256
    with bound_identity(ACME):
        assert await client.model_window("embedder") == 256
        assert await client.model_window("deleted") == 0
        asked = len(hub.asked)
        assert await client.model_window("embedder") == 256  # cached
        assert len(hub.asked) == asked
        hub.windows["embedder"] = 512
        client.invalidate("acme", "embedder")
        assert await client.model_window("embedder") == 512


async def test_an_event_without_a_tenant_drops_nothing(modelhub):
    _, client = modelhub
    broker = subscribed("nats://127.0.0.1:4222", client)
    await facts(client, ACME)
    async with TestNatsBroker(broker) as bus:
        with pytest.raises(IdentityError):  # no identity headers: the handler refuses the message
            await bus.publish(changed("embedder", ModelChange.UPDATED), ModelChanged.subject)
    assert not client.invalidated.is_set()


async def test_the_event_travels_through_a_real_nats_server(modelhub, nats_url: str):
    hub, client = modelhub
    service = subscribed(nats_url, client)
    publisher = build_broker(nats_url, client_name="modelhub-test")
    assert await facts(client, ACME) == (False, ())
    hub.rerank_defaults["acme"] = "bge-reranker"
    await service.start()
    await publisher.start()
    try:
        with bound_identity(ACME):
            await publisher.publish(
                changed("bge-reranker", ModelChange.CREATED, "rerank"), ModelChanged.subject
            )
        await asyncio.wait_for(client.invalidated.wait(), timeout=10)
    finally:
        await publisher.stop()
        await service.stop()
    assert (await facts(client, ACME))[0] is True
