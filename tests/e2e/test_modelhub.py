"""ModelHub in the running stack: the registry through the gateway, model calls over gRPC.

The chat provider is the scripted OpenAI-compatible server from modelhub's tests (real HTTP on
loopback, replaying fixtures) registered as a "custom" model: no hosted LLM is reachable here.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_contracts.events import ModelChange, ModelChanged
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.identity import Identity, bound_identity, current_identity
from knowsphere_runtime.rpc import open_channel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "modelhub" / "tests"))
from scripted_provider import Reply, ScriptedProvider, openai_text_stream

pytestmark = pytest.mark.e2e
LOCAL = Identity("local", "local")


@pytest.fixture
def provider(model_server: ScriptedProvider) -> ScriptedProvider:
    """The session's scripted provider (the stack's modelhub may call it), fresh for each test."""
    model_server.reset()
    return model_server


def _detail(error: grpc.aio.AioRpcError) -> pb.ModelErrorDetail:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, error
    detail = pb.ModelErrorDetail()
    status.details[0].Unpack(detail)
    return detail


def _modelhub(stack, work):  # type: ignore[no-untyped-def]
    async def run():  # type: ignore[no-untyped-def]
        contract = CONTRACTS["modelhub"]
        async with open_channel(stack.grpc_addr("modelhub"), services=[contract.descriptor]) as channel:
            with bound_identity(LOCAL):
                return await work(contract.stub(channel))

    return asyncio.run(run())


def test_api_key_is_write_only_through_the_gateway(stack):
    created = httpx.post(
        f"{stack.gateway_url}/api/v1/models",
        json={
            "display_name": "DeepSeek chat",
            "provider_id": "deepseek",
            "model_name": "deepseek-chat",
            "types": ["knowledge_qa"],
            "api_key": "sk-e2e-secret-value-1234",
        },
        timeout=10,
    )
    assert created.status_code == 201, created.text
    model = created.json()
    assert model["api_key_hint"].endswith("1234")
    assert "sk-e2e-secret-value-1234" not in created.text
    for response in (
        httpx.get(f"{stack.gateway_url}/api/v1/models/{model['id']}", timeout=10),
        httpx.get(f"{stack.gateway_url}/api/v1/models", timeout=10),
    ):
        assert response.status_code == 200
        assert "sk-e2e-secret-value-1234" not in response.text
    assert httpx.delete(f"{stack.gateway_url}/api/v1/models/{model['id']}", timeout=10).status_code == 204


def test_bad_model_input_is_a_clear_http_error(stack):
    response = httpx.post(
        f"{stack.gateway_url}/api/v1/models",
        json={
            "display_name": "x",
            "provider_id": "no-such-provider",
            "model_name": "m",
            "types": ["knowledge_qa"],
        },
        timeout=10,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["field"] == "provider_id"
    providers = httpx.get(f"{stack.gateway_url}/api/v1/providers", timeout=10).json()["providers"]
    assert {"openai", "siliconflow", "dashscope", "anthropic", "ollama", "custom"} <= {
        p["id"] for p in providers
    }


def test_builtin_embedding_model_is_the_default_and_embeds(stack):
    default = httpx.get(f"{stack.gateway_url}/api/v1/models/defaults/embedding", timeout=10).json()
    assert default["source"] == "builtin"
    assert default["model"]["id"] == "builtin-minilm-l6-v2"

    async def embed(stub):  # type: ignore[no-untyped-def]
        return await stub.Embed(
            pb.EmbedRequest(texts=["annual leave policy", "holiday entitlement"]), timeout=120
        )

    response = _modelhub(stack, embed)
    assert response.model_id == "builtin-minilm-l6-v2"
    assert response.dimension == 384
    assert len(response.embeddings) == 2


def test_calls_fail_with_clear_codes(stack):
    async def calls(stub):  # type: ignore[no-untyped-def]
        errors = {}
        chat = pb.ChatStreamRequest(
            messages=[pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="hi")])]
        )
        for name, call in {
            "no_chat_model": lambda: _drain(stub.ChatStream(chat)),
            "chat_on_embedding_model": lambda: _drain(
                stub.ChatStream(pb.ChatStreamRequest(model_id="builtin-minilm-l6-v2", messages=chat.messages))
            ),
            "unknown_model": lambda: stub.Embed(pb.EmbedRequest(model_id="nope", texts=["x"])),
            "oversized_batch": lambda: stub.Embed(pb.EmbedRequest(texts=["x"] * 10_000)),
            "no_reranker": lambda: stub.Rerank(pb.RerankRequest(query="q", documents=["d"])),
        }.items():
            try:
                await call()
            except grpc.aio.AioRpcError as error:
                errors[name] = (error.code(), _detail(error))
        return errors

    errors = _modelhub(stack, calls)
    code, detail = errors["no_chat_model"]
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert detail.code == pb.MODEL_ERROR_CODE_NO_MODEL_CONFIGURED
    assert "POST /api/v1/models" in detail.user_message
    assert errors["chat_on_embedding_model"][1].code == pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE
    assert errors["unknown_model"][0] == grpc.StatusCode.NOT_FOUND
    code, detail = errors["oversized_batch"]
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert detail.field == "texts" and "256" in detail.user_message
    assert errors["no_reranker"][1].code == pb.MODEL_ERROR_CODE_NO_MODEL_CONFIGURED


def test_chat_streams_from_a_registered_provider(stack, provider):
    created = httpx.post(
        f"{stack.gateway_url}/api/v1/models",
        json={
            "display_name": "Scripted",
            "provider_id": "custom",
            "model_name": "scripted-chat",
            "types": ["knowledge_qa"],
            "base_url": f"{provider.url}/v1",
            "api_key": "sk-scripted-000000000",
        },
        timeout=10,
    ).json()
    provider.script("/v1/chat/completions", openai_text_stream(["Leave is ", "25 days."]))

    async def chat(stub):  # type: ignore[no-untyped-def]
        request = pb.ChatStreamRequest(
            model_id=created["id"],
            messages=[
                pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="How much leave?")])
            ],
        )
        return [event async for event in stub.ChatStream(request)]

    events = _modelhub(stack, chat)
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and events[0].started.model_id == created["id"]
    assert "".join(e.text_delta.text for e in events if e.HasField("text_delta")) == "Leave is 25 days."
    assert "finish" in kinds
    sent = provider.requests_to("/v1/chat/completions")[-1]
    assert sent.headers["authorization"] == "Bearer sk-scripted-000000000"
    assert sent.json["messages"][0]["content"] in (
        "How much leave?",
        [{"type": "text", "text": "How much leave?"}],
    )
    httpx.delete(f"{stack.gateway_url}/api/v1/models/{created['id']}", timeout=10)


def test_model_changes_are_announced_on_the_bus_for_the_tenant(stack):
    async def run():  # type: ignore[no-untyped-def]
        heard: asyncio.Queue[tuple[ModelChanged, str | None]] = asyncio.Queue()
        listener = build_broker(stack.nats_url, client_name="e2e-listener", auth=stack.nats_auth())

        @listener.subscriber(ModelChanged.subject)
        async def on_change(event: ModelChanged) -> None:
            identity = current_identity()
            await heard.put((event, identity.tenant_id if identity else None))

        async def next_about(model_id: str) -> tuple[ModelChanged, str | None]:
            while True:
                event, tenant = await asyncio.wait_for(heard.get(), timeout=10)
                if event.model_id == model_id:
                    return event, tenant

        await listener.start()
        try:
            contract = CONTRACTS["modelhub"]
            async with open_channel(stack.grpc_addr("modelhub"), services=[contract.descriptor]) as channel:
                stub = contract.stub(channel)
                with bound_identity(LOCAL):
                    created = await stub.CreateModel(
                        pb.CreateModelRequest(
                            display_name="announced",
                            provider_id="custom",
                            model_name="m",
                            types=[pb.MODEL_TYPE_KNOWLEDGE_QA],
                            base_url="https://llm.example/v1",
                        )
                    )
                    model_id = created.model.id
                    first = await next_about(model_id)
                    await stub.DeleteModel(pb.DeleteModelRequest(model_id=model_id))
                    second = await next_about(model_id)
        finally:
            await listener.stop()
        return first, second

    (created, tenant), (deleted, _) = asyncio.run(run())
    assert created.change == ModelChange.CREATED and tenant == LOCAL.tenant_id
    assert deleted.change == ModelChange.DELETED and deleted.model_id == created.model_id


async def _drain(stream):  # type: ignore[no-untyped-def]
    return [item async for item in stream]


__all__ = ["Reply"]
