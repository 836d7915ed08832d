"""Model changes on the bus: what another service hears when a tenant's models or defaults change.

modelhub's gRPC API runs in-process with its broker on a real nats-server; a second broker listens
on ``ks.modelhub.model.changed.v1`` as retrieval would, reading the tenant from the message headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_contracts.events import ModelChange, ModelChanged
from knowsphere_contracts.services import CONTRACTS
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.api.bus import build_bus
from knowsphere_modelhub.api.grpc import build_binding
from knowsphere_modelhub.api.models import ModelChanges
from knowsphere_modelhub.domain.providers import PROVIDERS
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.domain.secrets import verify_master_key
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, bound_identity, current_identity
from knowsphere_runtime.rpc.testing import serving
from knowsphere_runtime.secrets import KeyRing
from knowsphere_telemetry.langfuse import NoopLlmObserver

ACME = Identity("acme", "alice")
EVENT_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Heard:
    event: ModelChanged
    tenant_id: str | None


@asynccontextmanager
async def modelhub(tmp_path: Path, changes: ModelChanges | None) -> AsyncIterator[Any]:
    """modelhub's gRPC API (registry on SQLite, no provider adapters) announcing to ``changes``."""
    settings = Settings(
        data_dir=tmp_path,
        master_key="unit-test-master-key-0123456789",  # type: ignore[arg-type]
        local_embedding_enabled=False,
    )
    store = SqlModelStore(settings.sqlalchemy_url())
    await store.open()
    keyring = KeyRing.from_strings(settings.master_key.get_secret_value())
    await verify_master_key(store, keyring)
    registry = Registry(store, keyring, PROVIDERS, {})
    binding = build_binding(registry, {}, settings, NoopLlmObserver(), changes=changes)
    try:
        async with serving("modelhub", binding=binding) as channel:
            yield CONTRACTS["modelhub"].stub(channel)
    finally:
        await store.close()


@pytest.fixture
async def announced(nats_url: str, tmp_path: Path) -> AsyncIterator[tuple[Any, asyncio.Queue[Heard]]]:
    """A modelhub stub whose changes go out on NATS, and the queue of what a listener heard."""
    heard: asyncio.Queue[Heard] = asyncio.Queue()
    listener = build_broker(nats_url, client_name="listener")

    @listener.subscriber(ModelChanged.subject)
    async def on_change(event: ModelChanged) -> None:
        identity = current_identity()
        await heard.put(Heard(event, identity.tenant_id if identity else None))

    bus = build_bus()
    broker = build_broker(nats_url, client_name="modelhub-test")
    broker.include_router(bus.publishers)
    await listener.start()
    await broker.start()
    try:
        async with modelhub(tmp_path, bus) as stub:
            yield stub, heard
    finally:
        await broker.stop()
        await listener.stop()


async def next_heard(heard: asyncio.Queue[Heard]) -> Heard:
    return await asyncio.wait_for(heard.get(), timeout=EVENT_TIMEOUT_SECONDS)


def chat_model(**overrides: Any) -> pb.CreateModelRequest:
    request = pb.CreateModelRequest(
        display_name="vLLM chat",
        provider_id="custom",
        model_name="qwen",
        types=[pb.MODEL_TYPE_KNOWLEDGE_QA],
        base_url="https://llm.example/v1",
    )
    for name, value in overrides.items():
        setattr(request, name, value)
    return request


async def test_each_change_of_a_model_or_default_is_announced_once_for_the_callers_tenant(announced):
    stub, heard = announced
    with bound_identity(ACME):
        model_id = (await stub.CreateModel(chat_model())).model.id
        created = await next_heard(heard)
        await stub.UpdateModel(
            pb.UpdateModelRequest(
                model_id=model_id,
                display_name="vLLM chat (EU)",
                types=pb.ModelTypeList(types=[pb.MODEL_TYPE_VLM, pb.MODEL_TYPE_KNOWLEDGE_QA]),
            )
        )
        updated = await next_heard(heard)
        await stub.SetDefaultModel(
            pb.SetDefaultModelRequest(type=pb.MODEL_TYPE_KNOWLEDGE_QA, model_id=model_id)
        )
        made_default = await next_heard(heard)
        await stub.SetDefaultModel(pb.SetDefaultModelRequest(type=pb.MODEL_TYPE_KNOWLEDGE_QA))
        cleared = await next_heard(heard)
        await stub.DeleteModel(pb.DeleteModelRequest(model_id=model_id))
        deleted = await next_heard(heard)

    assert [(h.event.change, h.event.model_id) for h in (created, updated, deleted)] == [
        (ModelChange.CREATED, model_id),
        (ModelChange.UPDATED, model_id),
        (ModelChange.DELETED, model_id),
    ]
    assert (made_default.event.change, made_default.event.model_id) == (ModelChange.DEFAULT_CHANGED, model_id)
    # The types the model has (after an update: its new ones), in proto order.
    assert [h.event.model_types for h in (created, updated, deleted)] == [
        ["knowledge_qa"],
        ["knowledge_qa", "vlm"],
        ["knowledge_qa", "vlm"],
    ]
    assert made_default.event.model_types == ["knowledge_qa"]
    assert (cleared.event.change, cleared.event.model_id) == (ModelChange.DEFAULT_CHANGED, "")
    assert cleared.event.model_types == ["knowledge_qa"]
    assert {h.tenant_id for h in (created, updated, made_default, cleared, deleted)} == {"acme"}
    assert heard.empty()  # one event per change


async def test_a_refused_change_announces_nothing(announced):
    stub, heard = announced
    with bound_identity(ACME):
        model_id = (await stub.CreateModel(chat_model())).model.id
        assert (await next_heard(heard)).event.change == ModelChange.CREATED
        await stub.SetDefaultModel(
            pb.SetDefaultModelRequest(type=pb.MODEL_TYPE_KNOWLEDGE_QA, model_id=model_id)
        )
        assert (await next_heard(heard)).event.change == ModelChange.DEFAULT_CHANGED

        refusals = [
            (stub.DeleteModel(pb.DeleteModelRequest(model_id="model-missing")), grpc.StatusCode.NOT_FOUND),
            (stub.DeleteModel(pb.DeleteModelRequest(model_id=model_id)), grpc.StatusCode.FAILED_PRECONDITION),
            (
                stub.UpdateModel(pb.UpdateModelRequest(model_id=model_id, display_name="")),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (
                stub.SetDefaultModel(pb.SetDefaultModelRequest(type=pb.MODEL_TYPE_RERANK, model_id=model_id)),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (stub.CreateModel(chat_model(provider_id="nope")), grpc.StatusCode.INVALID_ARGUMENT),
        ]
        for call, status in refusals:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == status
        # The next change is the next event: none came from the refusals in between.
        await stub.UpdateModel(pb.UpdateModelRequest(model_id=model_id, description="still here"))
        after = await next_heard(heard)
    assert (after.event.change, after.event.model_id) == (ModelChange.UPDATED, model_id)


class BrokenBus:
    """A bus whose every publish fails, as when NATS is gone."""

    def __init__(self) -> None:
        self.attempts: list[ModelChanged] = []

    async def announce(self, event: ModelChanged) -> None:
        self.attempts.append(event)
        raise ConnectionError("nats: connection closed")


async def test_a_failed_announcement_never_fails_the_committed_change(tmp_path):
    bus = BrokenBus()
    async with modelhub(tmp_path, bus) as stub:
        with bound_identity(ACME):
            created = (await stub.CreateModel(chat_model())).model
            fetched = (await stub.GetModel(pb.GetModelRequest(model_id=created.id))).model
            await stub.DeleteModel(pb.DeleteModelRequest(model_id=created.id))
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await stub.GetModel(pb.GetModelRequest(model_id=created.id))
    assert fetched.display_name == "vLLM chat"
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert [e.change for e in bus.attempts] == [ModelChange.CREATED, ModelChange.DELETED]
