"""modelhub's gRPC API in-process: a real grpc.aio server, SQLite store and the scripted provider.

What a caller notices: errors arrive as gRPC statuses carrying ModelErrorDetail in the caller's
language; each model call is one span with the GenAI attributes and its retries as events; Decide
reports which path it used; a provider's error body reaches logs and traces cut short and without the
API key it may echo.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import structlog
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_modelhub.adapters.http import PROVIDER_TEXT_IN_ERRORS, ProviderHttp
from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.api.grpc import build_binding
from knowsphere_modelhub.domain.providers import PROVIDERS
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.domain.secrets import verify_master_key
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving
from knowsphere_runtime.secrets import KeyRing
from knowsphere_telemetry.langfuse import NoopLlmObserver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_provider import Reply, ScriptedProvider, openai_text_stream

TENANT = Identity("acme", "alice")


@pytest.fixture(scope="module")
def provider():  # type: ignore[no-untyped-def]
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def hub(tmp_path, provider) -> AsyncIterator[tuple[object, ScriptedProvider]]:  # type: ignore[no-untyped-def]
    settings = Settings(
        egress=provider.egress(),  # the scripted provider is on loopback
        data_dir=tmp_path,
        master_key="unit-test-master-key-0123456789",  # type: ignore[arg-type]
        provider_backoff_seconds=0.01,
        provider_timeout_seconds=5,
    )
    store = SqlModelStore(settings.sqlalchemy_url())
    await store.open()
    keyring = KeyRing.from_strings(settings.master_key.get_secret_value())
    await verify_master_key(store, keyring)
    registry = Registry(store, keyring, PROVIDERS, {}, egress=settings.egress)
    http = ProviderHttp.from_settings(settings)
    adapters = {"openai": OpenAICompatibleAdapter(http, PROVIDERS)}
    binding = build_binding(registry, adapters, settings, NoopLlmObserver())
    async with serving("modelhub", binding=binding) as channel:
        provider.reset()
        yield CONTRACTS["modelhub"].stub(channel), provider
    await http.close()
    await store.close()


async def _create(stub, provider_id: str, base_url: str, types: list[int]) -> str:  # type: ignore[no-untyped-def]
    response = await stub.CreateModel(
        pb.CreateModelRequest(
            display_name="scripted",
            provider_id=provider_id,
            model_name="scripted-model",
            types=types,
            base_url=base_url,
            api_key="sk-unit-test-0000001",
        )
    )
    return str(response.model.id)


def _detail(error: grpc.aio.AioRpcError) -> pb.ModelErrorDetail:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    detail = pb.ModelErrorDetail()
    status.details[0].Unpack(detail)
    return detail


async def test_chat_call_is_one_span_with_genai_attributes_and_retry_events(hub, spans):
    stub, provider = hub
    with bound_identity(TENANT):
        model_id = await _create(stub, "custom", f"{provider.url}/v1", [pb.MODEL_TYPE_KNOWLEDGE_QA])
        provider.script(
            "/v1/chat/completions",
            Reply.fixture("openai/error_429_rate_limit.json", status=429),
            Reply.fixture("openai/chat_text.sse"),
        )
        request = pb.ChatStreamRequest(
            model_id=model_id,
            purpose="generate",
            messages=[pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="hello")])],
        )
        events = [e async for e in stub.ChatStream(request)]
    assert events[0].started.model_id == model_id
    assert any(e.HasField("text_delta") for e in events)
    calls = [s for s in spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(calls) == 1
    span = calls[0]
    assert span.attributes["gen_ai.request.model"] == "scripted-model"
    assert span.attributes["gen_ai.provider.name"] == "custom"
    assert span.attributes["ks.model.purpose"] == "generate"
    assert span.attributes["ks.latency_ms"] >= 0
    assert [e.name for e in span.events].count("gen_ai.retry") == 1


async def test_errors_carry_a_code_and_a_message_in_the_callers_language(hub):
    stub, provider = hub
    with bound_identity(TENANT):
        model_id = await _create(
            stub, "custom", f"{provider.url}/v1", [pb.MODEL_TYPE_VLM, pb.MODEL_TYPE_KNOWLEDGE_QA]
        )
        provider.script(
            "/v1/chat/completions", Reply.fixture("openai/error_invalid_image_url.json", status=400)
        )
        request = pb.DescribeImageRequest(
            model_id=model_id, image=pb.ImageInput(url="https://images.example.com/private/cat.png")
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.DescribeImage(request, metadata=(("accept-language", "zh-CN"),))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = _detail(raised.value)
    assert detail.code == pb.MODEL_ERROR_CODE_IMAGE_URL_UNREACHABLE
    assert detail.language == "zh-CN"
    assert "图片链接" in detail.user_message
    assert "Timeout while downloading" not in detail.user_message  # raw detail stays in logs


async def test_decide_uses_logprobs_where_the_provider_has_them_and_json_elsewhere(hub):
    stub, provider = hub
    labels = [pb.DecisionLabel(name="greeting"), pb.DecisionLabel(name="kb_search")]
    with bound_identity(TENANT):
        with_logprobs = await _create(stub, "openai", f"{provider.url}/v1", [pb.MODEL_TYPE_KNOWLEDGE_QA])
        provider.script("/v1/chat/completions", Reply.fixture("openai/logprobs.json"))
        first = await stub.Decide(
            pb.DecideRequest(model_id=with_logprobs, prompt="where is the handbook?", labels=labels)
        )
        without = await _create(stub, "custom", f"{provider.url}/v1", [pb.MODEL_TYPE_KNOWLEDGE_QA])
        provider.script("/v1/chat/completions", openai_text_stream(['{"label": "kb_search"}']))
        second = await stub.Decide(
            pb.DecideRequest(model_id=without, prompt="where is the handbook?", labels=labels)
        )
        assert provider.pending() == {}
    assert first.method == pb.DECISION_METHOD_LOGPROBS
    assert first.label == "kb_search"  # letter B
    assert 0.9 < first.probability <= 1.0
    assert second.method == pb.DECISION_METHOD_JSON
    assert second.label == "kb_search"


async def test_another_tenant_cannot_use_or_see_a_model(hub):
    stub, provider = hub
    with bound_identity(TENANT):
        model_id = await _create(stub, "custom", f"{provider.url}/v1", [pb.MODEL_TYPE_KNOWLEDGE_QA])
    with bound_identity(Identity("other-co", "bob")):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.GetModel(pb.GetModelRequest(model_id=model_id))
        listed = await stub.ListModels(pb.ListModelsRequest())
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert model_id not in {m.id for m in listed.models}


async def test_setting_a_default_answers_the_default_now_in_force(hub):
    stub, provider = hub
    with bound_identity(TENANT):
        model_id = await _create(stub, "custom", f"{provider.url}/v1", [pb.MODEL_TYPE_KNOWLEDGE_QA])
        made = await stub.SetDefaultModel(
            pb.SetDefaultModelRequest(type=pb.MODEL_TYPE_KNOWLEDGE_QA, model_id=model_id)
        )
        fetched = await stub.GetDefaultModel(pb.GetDefaultModelRequest(type=pb.MODEL_TYPE_KNOWLEDGE_QA))
        cleared = await stub.SetDefaultModel(pb.SetDefaultModelRequest(type=pb.MODEL_TYPE_KNOWLEDGE_QA))
        with pytest.raises(grpc.aio.AioRpcError) as untyped:
            await stub.GetDefaultModel(pb.GetDefaultModelRequest())
    assert made.default_model == fetched.default_model
    assert (made.default_model.source, made.default_model.model.id) == (
        pb.DEFAULT_MODEL_SOURCE_TENANT,
        model_id,
    )
    assert list(made.default_model.model.default_for) == [pb.MODEL_TYPE_KNOWLEDGE_QA]
    assert (cleared.default_model.source, cleared.default_model.HasField("model")) == (
        pb.DEFAULT_MODEL_SOURCE_NONE,
        False,
    )
    assert untyped.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _detail(untyped.value).field == "type"


async def test_a_provider_error_echoing_the_key_is_logged_cut_and_without_it(hub, spans):
    stub, provider = hub
    echoed = "sk-unit-test-0000001"  # the key _create stores
    body = {
        "error": {
            "message": f"Incorrect API key provided: {echoed}. Sent: Authorization: Bearer {echoed}, "
            "session: Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "trace": "x" * 3000,  # a provider's long answer: not all of it goes to the log
        }
    }
    with bound_identity(TENANT), structlog.testing.capture_logs() as logged:
        model_id = await _create(stub, "custom", f"{provider.url}/v1", [pb.MODEL_TYPE_KNOWLEDGE_QA])
        provider.script("/v1/chat/completions", Reply(status=401, json=body))
        request = pb.ChatStreamRequest(
            model_id=model_id,
            messages=[pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="hello")])],
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            [e async for e in stub.ChatStream(request)]
    assert _detail(raised.value).code == pb.MODEL_ERROR_CODE_AUTHENTICATION_FAILED
    (line,) = [entry for entry in logged if entry.get("event") == "model call failed"]
    assert line["detail"].startswith("HTTP 401: ") and "Incorrect API key provided: ***" in line["detail"]
    assert "Authorization: ***, session: Bearer ***" in line["detail"] and line["detail"].endswith("…")
    assert len(line["detail"]) <= len("HTTP 401: ") + PROVIDER_TEXT_IN_ERRORS + 1
    recorded = [str(event.attributes) for span in spans.get_finished_spans() for event in span.events]
    assert any("HTTP 401: " in event for event in recorded)  # the span's model_error event
    for where in [str(entry) for entry in logged] + recorded + [str(raised.value.details())]:
        assert echoed not in where and "eyJhbGci" not in where
