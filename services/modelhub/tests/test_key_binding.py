"""A stored API key belongs to its row: copied into another tenant's model it opens nowhere.

The gRPC API in-process on a real SQLite store and the scripted provider. Tenant A's ciphertext is
copied into tenant B's row (what someone with write access to the database could do to have B's
calls carry A's key, or to read A's key back through B's model): B's model then answers without any
key — its calls fail naming the reason, nothing reaches the provider, no answer or log line holds A's
key — and A's model goes on working.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from sqlalchemy import select, update

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere_contracts.services import CONTRACTS
from knowsphere_modelhub.adapters.http import ProviderHttp
from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
from knowsphere_modelhub.adapters.sql_store import SqlModelStore, models
from knowsphere_modelhub.api.grpc import build_binding
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.providers import PROVIDERS
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.domain.secrets import verify_master_key
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving
from knowsphere_runtime.secrets import KeyRing
from knowsphere_telemetry.langfuse import NoopLlmObserver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_provider import ScriptedProvider, openai_text_stream

TENANT_A = Identity("tenant-a", "alice")
TENANT_B = Identity("tenant-b", "bob")
KEY_A = "sk-tenant-a-0123456789SECRETAAAA"
KEY_B = "sk-tenant-b-9876543210SECRETBBBB"


@pytest.fixture(scope="module")
def provider():  # type: ignore[no-untyped-def]
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def hub(
    tmp_path: Path, provider: ScriptedProvider
) -> AsyncIterator[tuple[Any, SqlModelStore, Registry]]:
    settings = Settings(
        egress=provider.egress(),  # the scripted provider is on loopback
        data_dir=tmp_path,
        master_key="binding-test-master-key-0123456789",  # type: ignore[arg-type]
        provider_max_retries=0,
        provider_timeout_seconds=5,
    )
    store = SqlModelStore(settings.sqlalchemy_url())
    await store.open()
    keyring = KeyRing.from_strings(settings.master_key.get_secret_value())
    await verify_master_key(store, keyring)
    registry = Registry(store, keyring, PROVIDERS, {}, egress=settings.egress)
    http = ProviderHttp.from_settings(settings)
    binding = build_binding(
        registry, {"openai": OpenAICompatibleAdapter(http, PROVIDERS)}, settings, NoopLlmObserver()
    )
    async with serving("modelhub", binding=binding) as channel:
        provider.reset()
        yield CONTRACTS["modelhub"].stub(channel), store, registry
    await http.close()
    await store.close()


async def _create(stub: Any, base_url: str, api_key: str) -> pb.Model:
    response = await stub.CreateModel(
        pb.CreateModelRequest(
            display_name="chat",
            provider_id="custom",
            model_name="scripted-model",
            types=[pb.MODEL_TYPE_KNOWLEDGE_QA],
            base_url=base_url,
            api_key=api_key,
        )
    )
    return response.model


def _chat(model_id: str) -> pb.ChatStreamRequest:
    return pb.ChatStreamRequest(
        model_id=model_id,
        messages=[pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="hello")])],
    )


async def test_a_key_copied_into_another_tenants_row_opens_nowhere(
    hub: tuple[Any, SqlModelStore, Registry], provider: ScriptedProvider
) -> None:
    stub, store, registry = hub
    base_url = f"{provider.url}/v1"
    with bound_identity(TENANT_A):
        model_a = await _create(stub, base_url, KEY_A)
    with bound_identity(TENANT_B):
        model_b = await _create(stub, base_url, KEY_B)

    # Tenant A's ciphertext, copied into tenant B's row of the real database.
    async with store.engine.begin() as conn:
        copied = (
            await conn.execute(select(models.c.api_key_ciphertext).where(models.c.id == model_a.id))
        ).scalar_one()
        await conn.execute(update(models).where(models.c.id == model_b.id).values(api_key_ciphertext=copied))

    with structlog.testing.capture_logs() as logged, bound_identity(TENANT_B):
        # Reading the model shows B's hint and nothing of A's key.
        fetched = (await stub.GetModel(pb.GetModelRequest(model_id=model_b.id))).model
        assert fetched.api_key_hint == "sk-…BBBB"
        assert KEY_A.encode() not in fetched.SerializeToString()
        # A call fails before anything is sent: the provider never sees A's key (nor any request).
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            [event async for event in stub.ChatStream(_chat(model_b.id))]
    assert provider.requests == []
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    answered = f"{refused.value.details()} {refused.value.trailing_metadata()}"
    assert KEY_A not in answered and KEY_A[-8:] not in answered
    # The log says why, and holds no key.
    failed = [line for line in logged if line.get("event") == "model call failed"]
    assert failed and failed[0]["code"] == ModelErrorCode.PROVIDER_ERROR.value
    assert (
        f"was made for another record than record {model_b.id} of tenant 'tenant-b' (copied from another row)"
        in failed[0]["detail"]
    )
    assert all(KEY_A not in str(line) for line in logged)

    # The registry refuses the same way: the key is never decrypted for B's model.
    with pytest.raises(ModelError) as caught:
        registry.call_target(await registry.get("tenant-b", model_b.id))
    assert f"the API key of model {model_b.id} cannot be decrypted" in str(caught.value)

    # Tenant A's model, untouched, goes on working with its own key.
    provider.script("/v1/chat/completions", openai_text_stream(["hi"]))
    with bound_identity(TENANT_A):
        events = [event async for event in stub.ChatStream(_chat(model_a.id))]
    assert any(event.HasField("text_delta") for event in events)
    (sent,) = provider.requests_to("/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY_A}"
