"""Contract tests of the provider adapters against each provider's wire format.

Every test talks real HTTP to the scripted provider (``scripted_provider.py``) on loopback, which
replays fixtures modelled on the providers' documented answers (``fixtures/<provider>/``) and records
what the adapter sent. Covered: the request shape per provider (base URL joining, auth header, the
capability differences of the provider table), stream parsing (text, reasoning, tool calls, finish,
usage with cached tokens), rerank and embedding shapes, friendly error mapping with retries, the
per-provider concurrency limit, connection pooling, Anthropic cache breakpoints, and Decide by
logprobs and by JSON.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ImageInputFormat, ModelErrorCode, ModelType
from knowsphere_egress import EgressPolicy
from knowsphere_modelhub.adapters.anthropic import AnthropicAdapter
from knowsphere_modelhub.adapters.http import (
    RETRY_ATTEMPT,
    RETRY_DELAY,
    RETRY_EVENT,
    STATUS_CODE,
    ProviderHttp,
    error_from_response,
)
from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
from knowsphere_modelhub.domain.decide import decide, label_probabilities
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.providers import (
    PROVIDERS,
    ProviderSpec,
    to_proto,
)
from knowsphere_modelhub.domain.records import CallTarget, ModelParams

# The repository runs pytest with --import-mode=importlib (no test folder on sys.path); the scripted
# provider is a helper module beside this file.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from scripted_provider import (  # noqa: E402
    Recorded,
    Reply,
    ScriptedProvider,
    anthropic_text_stream,
    closed_port,
    openai_text_stream,
)

MAX_RETRIES = 2
CONCURRENCY = 2
# A 1×1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
OPENAI_STYLE_CHAT = sorted(
    spec.id for spec in PROVIDERS.values() if spec.api_style == "openai" and spec.chat_path is not None
)


# -- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedProvider]:
    provider = ScriptedProvider()
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def provider(server: ScriptedProvider) -> Iterator[ScriptedProvider]:
    server.reset()
    yield server
    assert not server.unscripted, f"requests without a scripted reply: {server.unscripted}"


def loopback_images(server: ScriptedProvider) -> EgressPolicy:
    """The egress policy that lets image downloads reach the scripted provider on loopback."""
    return EgressPolicy(allow_networks=("127.0.0.1/32",), allowed_ports=frozenset({80, 443, server.port}))


@pytest.fixture
async def http(server: ScriptedProvider) -> AsyncIterator[ProviderHttp]:
    client = ProviderHttp(
        timeout_seconds=5.0,
        max_retries=MAX_RETRIES,
        backoff_seconds=0.01,
        concurrency=CONCURRENCY,
        image_egress=loopback_images(server),  # images are served by the scripted provider on loopback
        egress=server.egress(),  # and so are the provider's answers
    )
    yield client
    await client.close()


@pytest.fixture
def openai_adapter(http: ProviderHttp) -> OpenAICompatibleAdapter:
    return OpenAICompatibleAdapter(http, PROVIDERS)


@pytest.fixture
def anthropic_adapter(http: ProviderHttp) -> AnthropicAdapter:
    return AnthropicAdapter(http, PROVIDERS)


def base_path(spec: ProviderSpec) -> str:
    """The path part of the provider's real base URL, so joining is tested as it will be used."""
    return urlsplit(spec.default_base_url).path.rstrip("/") if spec.default_base_url else "/v1"


def target_for(
    provider: ScriptedProvider,
    provider_id: str,
    *,
    api_key: str | None = "sk-test",
    model: str = "test-model",
    base_url: str | None = None,
    parameters: ModelParams | None = None,
) -> CallTarget:
    spec = PROVIDERS[provider_id]
    return CallTarget(
        model_id=f"model-{provider_id}",
        provider_id=provider_id,
        model_name=model,
        base_url=base_url if base_url is not None else provider.url + base_path(spec),
        api_key=api_key if spec.requires_api_key or api_key else None,
        parameters=parameters or ModelParams(),
        types=frozenset({ModelType.KNOWLEDGE_QA, ModelType.VLM}),
    )


def text(role: pb.ChatRole, value: str, *, breakpoint: bool = False) -> pb.ChatMessage:
    return pb.ChatMessage(role=role, content=[pb.ContentPart(text=value)], cache_breakpoint=breakpoint)


def chat_request(*messages: pb.ChatMessage, **kwargs: Any) -> pb.ChatStreamRequest:
    return pb.ChatStreamRequest(messages=list(messages), **kwargs)


async def collect(events: AsyncIterator[pb.ChatStreamResponse]) -> list[pb.ChatStreamResponse]:
    return [event async for event in events]


def answer_text(events: list[pb.ChatStreamResponse]) -> str:
    return "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")


def kinds(events: list[pb.ChatStreamResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


def assembled_tool_calls(events: list[pb.ChatStreamResponse]) -> dict[int, dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for event in events:
        if event.WhichOneof("event") != "tool_call_delta":
            continue
        delta = event.tool_call_delta
        call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
        if delta.id:
            assert not call["id"], "the id of a call arrives once"
            call["id"] = delta.id
        if delta.name:
            assert not call["name"], "the name of a call arrives once"
            call["name"] = delta.name
        call["arguments"] += delta.arguments_delta
    return calls


def only(requests: list[Recorded]) -> Recorded:
    assert len(requests) == 1, f"expected one request, got {len(requests)}"
    return requests[0]


async def raises_model_error(awaitable: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        await awaitable
    return caught.value


# -- the provider table -------------------------------------------------------------------------------


def test_table_has_every_provider_of_the_issue() -> None:
    expected = {
        "siliconflow", "openai", "dashscope", "zhipu", "deepseek", "moonshot", "volcengine", "hunyuan",
        "qianfan", "openrouter", "jina", "anthropic", "ollama", "custom", "local",
    }  # fmt: skip
    assert set(PROVIDERS) == expected
    for spec in PROVIDERS.values():
        if spec.id not in ("custom", "local"):
            assert spec.default_base_url.startswith(("https://", "http://127.0.0.1")), spec.id
        if spec.rerank_path:
            assert spec.rerank_shape in ("jina", "dashscope"), spec.id
        if spec.logprobs:
            assert spec.max_top_logprobs > 0, spec.id
        if spec.cache_breakpoints:
            assert spec.max_cache_breakpoints > 0, spec.id
    assert PROVIDERS["local"].api_style == "local" and PROVIDERS["local"].default_base_url == ""
    assert PROVIDERS["ollama"].default_base_url == "http://127.0.0.1:11434/v1"
    assert not PROVIDERS["ollama"].requires_api_key and PROVIDERS["ollama"].local
    assert PROVIDERS["dashscope"].default_base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"


def test_to_proto_carries_the_capabilities() -> None:
    proto = to_proto(PROVIDERS["openai"])
    assert proto.id == "openai" and proto.default_base_url == "https://api.openai.com/v1"
    caps = proto.capabilities
    assert caps.logprobs and caps.json_schema_output and caps.openai_compatible and caps.requires_api_key
    assert caps.image_input == pb.IMAGE_INPUT_FORMAT_URL_OR_DATA_URL
    assert {ModelType.from_number(n) for n in caps.model_types} == set(PROVIDERS["openai"].model_types)
    anthropic = to_proto(PROVIDERS["anthropic"]).capabilities
    assert anthropic.cache_breakpoints and not anthropic.logprobs and not anthropic.openai_compatible
    assert anthropic.image_input == pb.IMAGE_INPUT_FORMAT_BASE64_ONLY
    assert to_proto(PROVIDERS["ollama"]).capabilities.local


def test_adapters_never_branch_on_provider_ids() -> None:
    adapters = Path(__file__).resolve().parents[1] / "src" / "knowsphere_modelhub" / "adapters"
    branch = re.compile(r"(\bid|provider_id)\s*(==|!=|\bin\b|\bnot in\b)")
    for name in ("openai_compat.py", "anthropic.py", "http.py", "images.py", "call_setup.py"):
        for number, line in enumerate((adapters / name).read_text().splitlines(), 1):
            assert not branch.search(line), f"{name}:{number} branches on a provider id: {line.strip()}"


# -- chat: the request shape of every OpenAI-compatible provider ---------------------------------------


@pytest.mark.parametrize("provider_id", OPENAI_STYLE_CHAT)
async def test_chat_request_shape_per_provider(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, provider_id: str
) -> None:
    spec = PROVIDERS[provider_id]
    api_key = "sk-test" if spec.requires_api_key else None
    target = target_for(
        provider, provider_id, api_key=api_key, parameters=ModelParams(temperature=0.3, max_tokens=256)
    )
    path = base_path(spec) + "/chat/completions"
    provider.script(path, Reply.fixture("openai/chat_text.sse"))
    request = chat_request(
        text(pb.CHAT_ROLE_SYSTEM, "You answer from the knowledge base.\n\n"),
        text(pb.CHAT_ROLE_USER, "  Hello?  "),
        temperature=0.0,
        stop=["\n\nUser:"],
        provider_params={"enable_thinking": False, "top_k": 20},
    )

    events = await collect(openai_adapter.chat_stream(target, request))

    sent = only(provider.requests_to(path))
    assert sent.method == "POST"
    if spec.requires_api_key:
        assert sent.headers["authorization"] == "Bearer sk-test"
    else:
        assert "authorization" not in sent.headers
    body = sent.json
    assert body["model"] == "test-model" and body["stream"] is True
    assert ("stream_options" in body) == spec.stream_usage_option
    if spec.stream_usage_option:
        assert body["stream_options"] == {"include_usage": True}
    assert body[spec.max_tokens_field] == 256
    assert ("max_tokens" in body) == (spec.max_tokens_field == "max_tokens")
    assert body["temperature"] == 0.0  # the request overrides the model's 0.3
    assert body["stop"] == ["\n\nUser:"]
    assert body["enable_thinking"] is False and body["top_k"] == 20 and isinstance(body["top_k"], int)
    # Prompt bytes pass through unchanged, in order.
    assert body["messages"] == [
        {"role": "system", "content": "You answer from the knowledge base.\n\n"},
        {"role": "user", "content": "  Hello?  "},
    ]
    assert answer_text(events) == "Hello, 世界!"
    assert kinds(events)[-2:] == ["finish", "usage"]
    assert events[-2].finish.reason == pb.FINISH_REASON_STOP
    usage = events[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (2006, 5, 2011)
    assert usage.cached_prompt_tokens == 1920


@pytest.mark.parametrize("provider_id", OPENAI_STYLE_CHAT)
async def test_image_format_per_provider(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, provider_id: str
) -> None:
    spec = PROVIDERS[provider_id]
    target = target_for(provider, provider_id, api_key="sk-test")
    path = base_path(spec) + "/chat/completions"
    image_url = f"{provider.url}/img/cat.png"
    request = chat_request(
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[
                pb.ContentPart(text="What is this?"),
                pb.ContentPart(image=pb.ImageInput(url=image_url, detail=pb.IMAGE_DETAIL_LOW)),
            ],
        )
    )
    if spec.image_input is None:
        error = await raises_model_error(collect(openai_adapter.chat_stream(target, request)))
        assert error.code == ModelErrorCode.WRONG_MODEL_TYPE
        assert error.field == "messages[0].content[1]"
        assert provider.requests == []
        return
    if spec.image_input == ImageInputFormat.BASE64_ONLY:
        provider.script("/img/cat.png", Reply(body=PNG, content_type="image/png"))
    provider.script(path, Reply.fixture("openai/chat_text.sse"))

    await collect(openai_adapter.chat_stream(target, request))

    content = only(provider.requests_to(path)).json["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "What is this?"}
    sent_image = content[1]["image_url"]
    assert sent_image["detail"] == "low"
    if spec.image_input == ImageInputFormat.URL_OR_DATA_URL:
        assert sent_image["url"] == image_url
        assert provider.requests_to("/img/cat.png") == []
    else:
        assert sent_image["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()


@pytest.mark.parametrize("provider_id", OPENAI_STYLE_CHAT)
async def test_tool_choice_per_provider(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, provider_id: str
) -> None:
    spec = PROVIDERS[provider_id]
    path = base_path(spec) + "/chat/completions"
    provider.script(path, Reply.fixture("openai/chat_tool_calls.sse"))
    request = chat_request(
        text(pb.CHAT_ROLE_USER, "退货政策?"),
        tools=[
            pb.ToolDefinition(
                name="kb_search", description="Search", parameters_json_schema='{"type":"object"}'
            )
        ],
        tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
    )
    await collect(openai_adapter.chat_stream(target_for(provider, provider_id), request))
    sent = only(provider.requests_to(path)).json
    assert sent["tool_choice"] == ("required" if spec.tool_choice_required else "auto")


# -- chat: stream parsing -----------------------------------------------------------------------------


async def test_openai_tool_calls_are_assembled_and_history_is_mapped(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/chat_tool_calls.sse"))
    schema = '{"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}'
    request = chat_request(
        text(pb.CHAT_ROLE_USER, "Find the order"),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_ASSISTANT,
            tool_calls=[pb.ToolCall(id="call_prev", name="kb_search", arguments_json='{"query": "order"}')],
        ),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_TOOL,
            tool_call_id="call_prev",
            name="kb_search",
            content=[pb.ContentPart(text="[]")],
        ),
        tools=[
            pb.ToolDefinition(
                name="kb_search", description="Search the KB", parameters_json_schema=schema, strict=True
            )
        ],
        tool_choice=pb.ToolChoice(tool_name="kb_search"),
    )

    events = await collect(openai_adapter.chat_stream(target_for(provider, "openai"), request))

    body = only(provider.requests_to("/v1/chat/completions")).json
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "kb_search",
                "description": "Search the KB",
                "parameters": json.loads(schema),
                "strict": True,
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "kb_search"}}
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_prev",
                "type": "function",
                "function": {"name": "kb_search", "arguments": '{"query": "order"}'},
            }
        ],
    }
    assert body["messages"][2] == {"role": "tool", "content": "[]", "tool_call_id": "call_prev"}
    calls = assembled_tool_calls(events)
    assert calls == {
        0: {"id": "call_9sT4YcDx1vQ2", "name": "kb_search", "arguments": '{"query": "退货政策"}'},
        1: {"id": "call_Zx81bq0LmM4e", "name": "get_order", "arguments": '{"order_id": "A-1001"}'},
    }
    assert kinds(events)[-2:] == ["finish", "usage"]
    assert events[-2].finish.reason == pb.FINISH_REASON_TOOL_CALLS
    assert events[-1].usage.cached_prompt_tokens == 0


async def test_tool_call_deltas_without_index_repeating_id_are_normalised(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    def chunk(tool_call: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        delta = {"tool_calls": [tool_call]} if tool_call else {}
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    provider.script(
        "/v1/chat/completions",
        Reply.sse_data(
            [
                chunk({"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"x":'}}),
                chunk({"id": "c1", "type": "function", "function": {"name": "a", "arguments": "1}"}}),
                chunk({"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}}),
                chunk(None, "tool_calls"),
            ]
        ),
    )
    events = await collect(
        openai_adapter.chat_stream(
            target_for(provider, "custom"), chat_request(text(pb.CHAT_ROLE_USER, "go"))
        )
    )
    assert assembled_tool_calls(events) == {
        0: {"id": "c1", "name": "a", "arguments": '{"x":1}'},
        1: {"id": "c2", "name": "b", "arguments": "{}"},
    }


async def test_deepseek_reasoning_and_cache_hit_usage(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/chat/completions",
        Reply.fixture("deepseek/chat_reasoning_cache_hit.sse"),
        Reply.fixture("deepseek/chat_reasoning_cache_hit.sse"),
    )
    target = target_for(provider, "deepseek", model="deepseek-reasoner")
    two_parts = pb.ChatMessage(
        role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="退货"), pb.ContentPart(text="政策？")]
    )

    with_reasoning = await collect(
        openai_adapter.chat_stream(target, chat_request(two_parts, include_reasoning=True))
    )
    without = await collect(openai_adapter.chat_stream(target, chat_request(two_parts)))

    reasoning = "".join(
        e.reasoning_delta.text for e in with_reasoning if e.WhichOneof("event") == "reasoning_delta"
    )
    assert reasoning == "用户问的是退货政策。"
    assert "reasoning_delta" not in kinds(without)
    assert answer_text(with_reasoning) == answer_text(without) == "七天内可退货。"
    usage = with_reasoning[-1].usage
    assert usage.prompt_tokens == 1350 and usage.cached_prompt_tokens == 1280 and usage.reasoning_tokens == 30
    # DeepSeek takes string content only: the parts are concatenated in order, nothing added.
    first = provider.requests_to("/chat/completions")[0].json
    assert first["messages"] == [{"role": "user", "content": "退货政策？"}]
    assert first["stream_options"] == {"include_usage": True}


async def test_moonshot_usage_inside_the_last_choice(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("moonshot/chat_usage_in_choice.sse"))
    events = await collect(
        openai_adapter.chat_stream(
            target_for(provider, "moonshot"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
        )
    )
    assert answer_text(events) == "你好！"
    assert kinds(events)[-2:] == ["finish", "usage"]
    assert events[-1].usage.total_tokens == 32 and events[-1].usage.cached_prompt_tokens == 16
    assert "stream_options" not in only(provider.requests_to("/v1/chat/completions")).json


async def test_dashscope_stream_with_cached_tokens(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    path = "/compatible-mode/v1/chat/completions"
    provider.script(path, Reply.fixture("dashscope/chat_stream.sse"))
    events = await collect(
        openai_adapter.chat_stream(
            target_for(provider, "dashscope"), chat_request(text(pb.CHAT_ROLE_USER, "你是谁"))
        )
    )
    assert answer_text(events) == "我是通义千问。"
    assert events[-1].usage.cached_prompt_tokens == 2048


async def test_ollama_needs_no_key(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("ollama/chat_stream.sse"))
    target = target_for(provider, "ollama", api_key=None, model="qwen2.5:7b")
    events = await collect(openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    sent = only(provider.requests_to("/v1/chat/completions"))
    assert "authorization" not in sent.headers
    assert answer_text(events) == "Hi there"
    assert events[-1].usage.prompt_tokens == 26 and not events[-1].usage.HasField("cached_prompt_tokens")


async def test_stream_cut_at_arbitrary_bytes_is_reassembled(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    # 7-byte chunks split lines, JSON and the UTF-8 bytes of 世界.
    provider.script("/v1/chat/completions", Reply.fixture("openai/chat_text.sse", split_bytes=7))
    events = await collect(
        openai_adapter.chat_stream(
            target_for(provider, "openai"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
        )
    )
    assert answer_text(events) == "Hello, 世界!"
    assert events[-1].usage.cached_prompt_tokens == 1920


async def test_a_stream_that_stops_early_is_an_error(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/v1/chat/completions",
        Reply.sse_data(
            [{"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}], done=False
        ),
    )
    target = target_for(provider, "openai")
    received: list[pb.ChatStreamResponse] = []
    with pytest.raises(ModelError) as caught:
        async for event in openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))):
            received.append(event)
    assert answer_text(received) == "Hel"
    assert caught.value.code == ModelErrorCode.PROVIDER_ERROR
    assert caught.value.model_id == target.model_id


async def test_openrouter_places_cache_control_on_marked_messages(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/api/v1/chat/completions", Reply.fixture("openai/chat_text.sse"))
    request = chat_request(
        text(pb.CHAT_ROLE_SYSTEM, "Long stable instructions", breakpoint=True), text(pb.CHAT_ROLE_USER, "hi")
    )
    await collect(openai_adapter.chat_stream(target_for(provider, "openrouter"), request))
    messages = only(provider.requests_to("/api/v1/chat/completions")).json["messages"]
    assert messages[0]["content"] == [
        {"type": "text", "text": "Long stable instructions", "cache_control": {"type": "ephemeral"}}
    ]
    assert messages[1]["content"] == "hi"


async def test_cache_breakpoints_are_ignored_where_the_table_has_none(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/chat_text.sse"))
    request = chat_request(
        text(pb.CHAT_ROLE_SYSTEM, "Stable", breakpoint=True), text(pb.CHAT_ROLE_USER, "hi")
    )
    await collect(openai_adapter.chat_stream(target_for(provider, "openai"), request))
    assert only(provider.requests_to("/v1/chat/completions")).json["messages"][0] == {
        "role": "system",
        "content": "Stable",
    }


async def test_json_schema_response_format_follows_the_table(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    schema = '{"type":"object","properties":{"a":{"type":"string"}}}'
    fmt = pb.ResponseFormat(
        type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, schema_name="answer", json_schema=schema, strict=True
    )
    provider.script("/v1/chat/completions", Reply.fixture("openai/chat_text.sse"))
    provider.script("/v1/chat/completions", Reply.fixture("moonshot/chat_usage_in_choice.sse"))
    await collect(
        openai_adapter.chat_stream(
            target_for(provider, "openai"), chat_request(text(pb.CHAT_ROLE_USER, "x"), response_format=fmt)
        )
    )
    await collect(
        openai_adapter.chat_stream(
            target_for(provider, "moonshot"), chat_request(text(pb.CHAT_ROLE_USER, "x"), response_format=fmt)
        )
    )
    openai_body, moonshot_body = (r.json for r in provider.requests_to("/v1/chat/completions"))
    assert openai_body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": json.loads(schema), "strict": True},
    }
    assert moonshot_body["response_format"] == {"type": "json_object"}


async def test_bad_tool_schema_names_the_field(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    request = chat_request(
        text(pb.CHAT_ROLE_USER, "x"), tools=[pb.ToolDefinition(name="t", parameters_json_schema="{not json")]
    )
    error = await raises_model_error(
        collect(openai_adapter.chat_stream(target_for(provider, "openai"), request))
    )
    assert error.code == ModelErrorCode.INVALID_INPUT and error.field == "tools[0].parameters_json_schema"
    assert provider.requests == []


# -- errors -------------------------------------------------------------------------------------------


async def test_401_is_authentication_failed_without_retry(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/error_401.json", status=401))
    target = target_for(provider, "openai")
    error = await raises_model_error(
        collect(openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    )
    assert error.code == ModelErrorCode.AUTHENTICATION_FAILED
    assert "invalid_api_key" in error.detail  # raw body kept for logs
    message = error.user_message("en")
    assert "invalid_api_key" not in message and "sk-test" not in message and target.model_id in message
    assert (error.model_id, error.provider_id) == (target.model_id, "openai")
    assert len(provider.requests_to("/v1/chat/completions")) == 1


async def test_missing_key_fails_before_calling(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    target = target_for(provider, "siliconflow", api_key=None)
    error = await raises_model_error(
        collect(openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    )
    assert error.code == ModelErrorCode.AUTHENTICATION_FAILED
    assert provider.requests == []


async def test_429_then_success_is_retried_and_recorded_on_the_span(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, spans: InMemorySpanExporter
) -> None:
    provider.script(
        "/v1/chat/completions",
        Reply.fixture("openai/error_429_rate_limit.json", status=429, headers={"retry-after": "0.2"}),
        Reply.fixture("openai/chat_text.sse"),
    )
    with trace.get_tracer("test").start_as_current_span("chat"):
        events = await collect(
            openai_adapter.chat_stream(
                target_for(provider, "openai"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
            )
        )
    assert answer_text(events) == "Hello, 世界!"
    assert len(provider.requests_to("/v1/chat/completions")) == 2
    (span,) = spans.get_finished_spans()
    retries = [event for event in span.events if event.name == RETRY_EVENT]
    assert len(retries) == 1
    attributes = retries[0].attributes or {}
    assert attributes[RETRY_ATTEMPT] == 1 and attributes[STATUS_CODE] == 429
    delay = attributes[RETRY_DELAY]
    assert isinstance(delay, float) and delay >= 0.2  # Retry-After honoured over the 10 ms backoff


async def test_429_insufficient_quota_is_quota_exhausted_without_retry(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/embeddings", Reply.fixture("openai/error_429_insufficient_quota.json", status=429))
    error = await raises_model_error(openai_adapter.embed(target_for(provider, "openai"), ["a"], 0))
    assert error.code == ModelErrorCode.QUOTA_EXHAUSTED
    assert len(provider.requests_to("/v1/embeddings")) == 1


async def test_429_every_time_is_rate_limited_after_the_retries(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/compatible-mode/v1/embeddings",
        *[Reply.fixture("dashscope/error_throttling.json", status=429)] * (MAX_RETRIES + 1),
    )
    error = await raises_model_error(openai_adapter.embed(target_for(provider, "dashscope"), ["a"], 0))
    assert error.code == ModelErrorCode.RATE_LIMITED  # "Throttling.RateQuota" is not out of quota
    assert len(provider.requests_to("/compatible-mode/v1/embeddings")) == MAX_RETRIES + 1


async def test_500_every_time_is_provider_error_after_the_retries(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/v1/chat/completions", *[Reply.fixture("openai/error_500.json", status=500)] * (MAX_RETRIES + 1)
    )
    error = await raises_model_error(
        collect(
            openai_adapter.chat_stream(
                target_for(provider, "openai"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
            )
        )
    )
    assert error.code == ModelErrorCode.PROVIDER_ERROR
    assert len(provider.requests_to("/v1/chat/completions")) == MAX_RETRIES + 1
    assert "server_error" in error.detail


async def test_503_before_the_first_byte_is_retried_for_streams(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/v1/chat/completions",
        Reply.fixture("openai/error_503.json", status=503),
        Reply.fixture("openai/chat_text.sse"),
    )
    events = await collect(
        openai_adapter.chat_stream(
            target_for(provider, "openai"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
        )
    )
    assert answer_text(events) == "Hello, 世界!"
    assert len(provider.requests_to("/v1/chat/completions")) == 2


async def test_404_model_is_model_unavailable(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/error_404_model.json", status=404))
    error = await raises_model_error(
        collect(
            openai_adapter.chat_stream(
                target_for(provider, "openai", model="gpt-9"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
            )
        )
    )
    assert error.code == ModelErrorCode.MODEL_UNAVAILABLE
    assert len(provider.requests_to("/v1/chat/completions")) == 1


def _ollama_at(base_url: str) -> CallTarget:
    return CallTarget(
        model_id="m",
        provider_id="ollama",
        model_name="qwen2.5",
        base_url=base_url,
        api_key=None,
        parameters=ModelParams(),
        types=frozenset({ModelType.KNOWLEDGE_QA}),
    )


async def test_a_closed_port_and_a_forbidden_address_read_the_same_to_the_tenant(
    provider: ScriptedProvider,
) -> None:
    closed = closed_port()
    # The operator allow-lists loopback on that one port: nothing listens there.
    policy = EgressPolicy(allow_networks=("127.0.0.1/32",), allowed_ports=frozenset({closed}))  # type: ignore[arg-type]
    http = ProviderHttp(timeout_seconds=2, max_retries=0, backoff_seconds=0.01, concurrency=2, egress=policy)
    adapter = OpenAICompatibleAdapter(http, PROVIDERS)
    request = chat_request(text(pb.CHAT_ROLE_USER, "hi"))
    try:
        refused = await raises_model_error(
            collect(adapter.chat_stream(_ollama_at(f"http://127.0.0.1:{closed}/v1"), request))
        )
        forbidden = await raises_model_error(
            collect(adapter.chat_stream(_ollama_at(f"http://10.0.0.7:{closed}/v1"), request))
        )
    finally:
        await http.close()
    assert refused.code == forbidden.code == ModelErrorCode.MODEL_UNAVAILABLE
    assert refused.user_message() == forbidden.user_message()
    # The logs keep the difference.
    assert "unreachable" in refused.detail and "blocked_address" in forbidden.detail


async def test_a_tenants_base_url_cannot_reach_internal_addresses_and_the_listener_hears_nothing(
    provider: ScriptedProvider,
) -> None:
    """The scripted provider listens on 127.0.0.1; a tenant's model aimed at it — by address, as an
    IPv4-mapped IPv6 address, by a name that resolves to it, or through a redirect from an allowed
    server — and one at cloud metadata are all refused, and the listener receives no request."""

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        location = f"{provider.url}/v1/chat/completions"
        writer.write(
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()

    redirector = await asyncio.start_server(redirect, "127.0.0.2", 0)
    redirector_port = redirector.sockets[0].getsockname()[1]
    # Only the redirector (another loopback address) is allow-listed, as a public server would be.
    policy = EgressPolicy(
        allow_networks=("127.0.0.2/32",),  # type: ignore[arg-type]
        allowed_ports=frozenset({80, 443, provider.port, redirector_port}),
    )
    http = ProviderHttp(timeout_seconds=5, max_retries=0, backoff_seconds=0.01, concurrency=2, egress=policy)
    adapter = OpenAICompatibleAdapter(http, PROVIDERS)
    request = chat_request(text(pb.CHAT_ROLE_USER, "hi"))
    targets = [
        f"http://127.0.0.1:{provider.port}/v1",
        f"http://[::ffff:127.0.0.1]:{provider.port}/v1",
        f"http://localhost:{provider.port}/v1",
        "http://169.254.169.254/v1",
        f"http://127.0.0.2:{redirector_port}/v1",
    ]
    errors = []
    try:
        async with redirector:
            for base_url in targets:
                errors.append(
                    await raises_model_error(collect(adapter.chat_stream(_ollama_at(base_url), request)))
                )
    finally:
        await http.close()
    assert provider.requests == []  # not one request reached the listener
    assert [e.code for e in errors[:4]] == [ModelErrorCode.MODEL_UNAVAILABLE] * 4
    assert all("blocked_address" in e.detail for e in errors[:4]), [e.detail for e in errors]
    # The redirect is the allowed server's own answer, an error of its own: it is never followed.
    assert errors[4].code == ModelErrorCode.PROVIDER_ERROR and "HTTP 307" in errors[4].detail


async def test_timeout_is_retried_then_reported(provider: ScriptedProvider) -> None:
    http = ProviderHttp(
        timeout_seconds=0.3, max_retries=1, backoff_seconds=0.01, concurrency=2, egress=provider.egress()
    )
    adapter = OpenAICompatibleAdapter(http, PROVIDERS)
    provider.script("/v1/embeddings", Reply(json={}, delay=1.0), Reply(json={}, delay=1.0))
    try:
        error = await raises_model_error(adapter.embed(target_for(provider, "openai"), ["a"], 0))
    finally:
        await adapter.close()
    assert error.code == ModelErrorCode.TIMEOUT
    assert len(provider.requests_to("/v1/embeddings")) == 2


@pytest.mark.parametrize(
    ("provider_id", "fixture", "status", "code"),
    [
        ("openai", "openai/error_content_filter.json", 400, ModelErrorCode.CONTENT_FILTERED),
        (
            "dashscope",
            "dashscope/error_data_inspection_failed.json",
            400,
            ModelErrorCode.CONTENT_FILTERED,
        ),
        ("dashscope", "dashscope/error_arrearage.json", 400, ModelErrorCode.QUOTA_EXHAUSTED),
        ("zhipu", "zhipu/error_sensitive.json", 400, ModelErrorCode.CONTENT_FILTERED),
        ("zhipu", "zhipu/error_arrears.json", 429, ModelErrorCode.QUOTA_EXHAUSTED),
    ],
)
async def test_provider_error_bodies_map_to_friendly_codes(
    provider: ScriptedProvider,
    openai_adapter: OpenAICompatibleAdapter,
    provider_id: str,
    fixture: str,
    status: int,
    code: ModelErrorCode,
) -> None:
    path = base_path(PROVIDERS[provider_id]) + "/chat/completions"
    provider.script(path, Reply.fixture(fixture, status=status))
    error = await raises_model_error(
        collect(
            openai_adapter.chat_stream(
                target_for(provider, provider_id), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
            )
        )
    )
    assert error.code == code
    assert len(provider.requests_to(path)) == 1  # none of these gets better by asking again


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (401, '{"error":{"code":"InvalidApiKey","message":"Invalid API-key provided."}}', 4),
        (402, '{"error":{"message":"Insufficient Balance","type":"unknown_error"}}', 3),
        (403, '{"code":30001,"message":"Sorry, your account balance is insufficient"}', 3),
        (429, '{"error":{"message":"Your account is suspended, exceeded_current_quota_error"}}', 3),
        (429, '{"code":"Throttling.AllocationQuota","message":"Allocated quota exceeded"}', 2),
        (
            400,
            '{"type":"error","error":{"type":"invalid_request_error",'
            '"message":"Your credit balance is too low"}}',
            3,
        ),
        (529, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', 6),
        (503, "<html>Service Unavailable</html>", 6),
        (504, "upstream timed out", 5),
        (400, '{"error":{"message":"This model\'s maximum context length is 8192 tokens"}}', 12),
    ],
)
def test_error_body_mapping(status: int, body: str, code: int) -> None:
    error = error_from_response(status, body)
    assert error.code is ModelErrorCode.from_number(code)
    assert body[:50] in error.detail
    assert body[:50] not in error.user_message("en")


async def test_provider_side_image_failure_names_the_field(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/error_invalid_image_url.json", status=400))
    request = chat_request(
        text(pb.CHAT_ROLE_SYSTEM, "Describe images."),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[
                pb.ContentPart(image=pb.ImageInput(url="https://images.example.com/public/dog.png")),
                pb.ContentPart(image=pb.ImageInput(url="https://images.example.com/private/cat.png")),
            ],
        ),
    )
    error = await raises_model_error(
        collect(openai_adapter.chat_stream(target_for(provider, "openai"), request))
    )
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE
    assert error.field == "messages[1].content[1]"  # the URL the provider named


async def test_dashscope_image_download_failure(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    path = "/compatible-mode/v1/chat/completions"
    provider.script(path, Reply.fixture("dashscope/error_image_download.json", status=400))
    request = chat_request(
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[
                pb.ContentPart(text="这是什么？"),
                pb.ContentPart(image=pb.ImageInput(url="https://x.test/a.jpg")),
            ],
        )
    )
    error = await raises_model_error(
        collect(openai_adapter.chat_stream(target_for(provider, "dashscope"), request))
    )
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE
    assert error.field == "messages[0].content[1]"


async def test_unreachable_image_url_for_a_base64_only_provider(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/img/missing.png", Reply(status=404, body=b"not found", content_type="text/plain"))
    request = chat_request(
        text(pb.CHAT_ROLE_USER, "first"),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[pb.ContentPart(image=pb.ImageInput(url=f"{provider.url}/img/missing.png"))],
        ),
    )
    error = await raises_model_error(
        collect(openai_adapter.chat_stream(target_for(provider, "moonshot"), request))
    )
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE
    assert error.field == "messages[1].content[0]"
    assert provider.requests_to("/v1/chat/completions") == []  # the provider was never called


async def image_download_error(provider: ScriptedProvider, url: str, policy: EgressPolicy) -> ModelError:
    """The error of a chat with one image URL, sent to a base64-only provider (modelhub downloads it)."""
    http = ProviderHttp(
        timeout_seconds=5,
        max_retries=0,
        backoff_seconds=0.01,
        concurrency=2,
        image_egress=policy,
        egress=provider.egress(),
    )
    adapter = OpenAICompatibleAdapter(http, PROVIDERS)
    request = chat_request(
        pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(image=pb.ImageInput(url=url))])
    )
    try:
        return await raises_model_error(
            collect(adapter.chat_stream(target_for(provider, "moonshot"), request))
        )
    finally:
        await adapter.close()


async def test_private_image_hosts_are_refused_by_default(provider: ScriptedProvider) -> None:
    # The port is allowed, the loopback address is not: refused before any connection.
    policy = EgressPolicy(allowed_ports=frozenset({80, 443, provider.port}))
    error = await image_download_error(provider, f"{provider.url}/img/cat.png", policy)
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE and "non-public" in error.detail
    assert error.field == "messages[0].content[0]"
    assert provider.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://2130706433/cat.png",  # 127.0.0.1 spelled as one number
        "http://[::ffff:127.0.0.1]/cat.png",
        "http://10.0.0.7/cat.png",
    ],
)
async def test_image_urls_at_metadata_and_internal_addresses_are_refused(
    provider: ScriptedProvider, url: str
) -> None:
    error = await image_download_error(provider, url, EgressPolicy())
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE
    assert "non-public" in error.detail
    assert "metadata" not in error.user_message("en").lower()  # the user reads the friendly message


async def test_an_image_port_outside_the_policy_is_refused(provider: ScriptedProvider) -> None:
    # Loopback allow-listed but its port not: allow-listing a network opens no other port.
    policy = EgressPolicy(allow_networks=("127.0.0.1/32",))
    error = await image_download_error(provider, f"{provider.url}/img/cat.png", policy)
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE and "allowed_ports" in error.detail
    assert provider.requests == []


@pytest.mark.parametrize(
    "target",
    ["http://169.254.169.254/latest/meta-data/", "http://192.168.1.1/admin.png", "http://[fd00:ec2::254]/"],
)
async def test_an_image_redirect_to_a_private_address_is_refused(
    provider: ScriptedProvider, target: str
) -> None:
    provider.script("/img/moved.png", Reply(status=302, headers={"location": target}, body=b""))
    error = await image_download_error(provider, f"{provider.url}/img/moved.png", loopback_images(provider))
    assert error.code == ModelErrorCode.IMAGE_URL_UNREACHABLE and "non-public" in error.detail
    assert [r.path for r in provider.requests] == ["/img/moved.png"]  # the redirect was not followed


async def test_an_image_redirect_within_the_policy_is_followed(provider: ScriptedProvider) -> None:
    provider.script("/img/moved.png", Reply(status=302, headers={"location": "/img/cat.png"}, body=b""))
    provider.script("/img/cat.png", Reply(body=PNG, content_type="image/png"))
    provider.script("/v1/chat/completions", openai_text_stream(["a cat"], model="moonshot-v1-8k"))
    http = ProviderHttp(
        timeout_seconds=5,
        max_retries=0,
        backoff_seconds=0.01,
        concurrency=2,
        image_egress=loopback_images(provider),
        egress=provider.egress(),
    )
    adapter = OpenAICompatibleAdapter(http, PROVIDERS)
    request = chat_request(
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[pb.ContentPart(image=pb.ImageInput(url=f"{provider.url}/img/moved.png"))],
        )
    )
    try:
        await collect(adapter.chat_stream(target_for(provider, "moonshot"), request))
    finally:
        await adapter.close()
    sent = json.dumps(provider.requests_to("/v1/chat/completions")[0].json)
    assert base64.b64encode(PNG).decode() in sent  # the image reached the provider inline


async def test_oversized_image_download_is_invalid_input(
    provider: ScriptedProvider, http: ProviderHttp
) -> None:
    adapter = OpenAICompatibleAdapter(http, PROVIDERS, max_image_bytes=50)
    provider.script("/img/big.png", Reply(body=PNG + b"\0" * 100, content_type="image/png"))
    request = chat_request(
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[pb.ContentPart(image=pb.ImageInput(url=f"{provider.url}/img/big.png"))],
        )
    )
    error = await raises_model_error(
        collect(adapter.chat_stream(target_for(provider, "ollama", api_key=None), request))
    )
    assert error.code == ModelErrorCode.INVALID_INPUT
    assert error.field == "messages[0].content[0]" and "50 bytes" in error.user_message("en")


# -- concurrency and pooling --------------------------------------------------------------------------


async def test_concurrency_limit_per_provider(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    # Two base URLs of one provider: two pools, one limit.
    paths = ["/v1/embeddings", "/eu/v1/embeddings"]
    targets = [
        target_for(provider, "openai"),
        target_for(provider, "openai", base_url=provider.url + "/eu/v1"),
    ]
    for path in paths:
        provider.script(path, *[Reply.fixture("openai/embeddings.json", delay=0.3)] * CONCURRENCY)
    calls = [openai_adapter.embed(target, ["a", "b"], 0) for target in targets for _ in range(CONCURRENCY)]
    results = await asyncio.gather(*calls)
    assert len(results) == 2 * CONCURRENCY
    assert provider.max_in_flight == CONCURRENCY
    assert [len(provider.requests_to(path)) for path in paths] == [CONCURRENCY, CONCURRENCY]


async def test_the_limit_is_per_provider(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/embeddings", *[Reply.fixture("openai/embeddings.json", delay=0.3)] * CONCURRENCY)
    provider.script("/v1/rerank", Reply.fixture("jina/rerank.json", delay=0.3))
    openai_target, jina_target = target_for(provider, "openai"), target_for(provider, "jina")
    await asyncio.gather(
        *(openai_adapter.embed(openai_target, ["a", "b"], 0) for _ in range(CONCURRENCY)),
        openai_adapter.rerank(jina_target, "q", ["a", "b", "c"], 0),
    )
    assert provider.max_in_flight == CONCURRENCY + 1  # Jina did not wait for OpenAI's slots


async def test_streams_hold_their_slot_until_they_end(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    paths = ["/v1/chat/completions", "/eu/v1/chat/completions"]
    targets = [
        target_for(provider, "openai"),
        target_for(provider, "openai", base_url=provider.url + "/eu/v1"),
    ]
    for path in paths:
        provider.script(path, *[Reply.fixture("openai/chat_text.sse", chunk_delay=0.05)] * CONCURRENCY)
    answers = await asyncio.gather(
        *(
            collect(openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
            for target in targets
            for _ in range(CONCURRENCY)
        )
    )
    assert [answer_text(a) for a in answers] == ["Hello, 世界!"] * (2 * CONCURRENCY)
    assert provider.max_in_flight == CONCURRENCY


async def test_one_pooled_client_per_provider_and_base_url(
    provider: ScriptedProvider, http: ProviderHttp, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/embeddings", *[Reply.fixture("openai/embeddings.json")] * 3)
    provider.script("/v1/chat/completions", Reply.fixture("openai/chat_text.sse"))
    target = target_for(provider, "openai")
    await openai_adapter.embed(target, ["a", "b"], 0)
    client = http.client("openai", target.base_url)
    await openai_adapter.embed(target, ["a", "b"], 0)
    await collect(openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    await openai_adapter.embed(target, ["a", "b"], 0)
    assert http.client("openai", target.base_url) is client
    assert len(provider.connections) == 1  # four calls, one TCP connection
    assert http.client("siliconflow", target.base_url) is not client


# -- embeddings, rerank, transcription ---------------------------------------------------------------


async def test_embeddings_are_ordered_and_normalised(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/embeddings", Reply.fixture("siliconflow/embeddings.json"))
    result = await openai_adapter.embed(
        target_for(provider, "siliconflow", model="BAAI/bge-m3"),
        ["退货", "policy"],
        pb.EMBED_INPUT_TYPE_QUERY,
    )
    sent = only(provider.requests_to("/v1/embeddings")).json
    assert sent == {"model": "BAAI/bge-m3", "input": ["退货", "policy"]}  # no input-type hint for SiliconFlow
    assert result.vectors == [pytest.approx([0.6, 0.0, 0.8]), pytest.approx([0.0, -1.0, 0.0])]
    assert result.prompt_tokens == 14


async def test_openai_embeddings_follow_the_index_field(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/embeddings", Reply.fixture("openai/embeddings.json"))
    result = await openai_adapter.embed(target_for(provider, "openai"), ["first", "second"], 0)
    assert result.vectors[0] == pytest.approx([0.6, 0.0, 0.8, 0.0])  # index 0 came second on the wire
    assert result.vectors[1] == pytest.approx([0.0, 1.0, 0.0, 0.0])
    assert all(math.isclose(sum(v * v for v in vec), 1.0) for vec in result.vectors)


@pytest.mark.parametrize(
    ("input_type", "task"),
    [(pb.EMBED_INPUT_TYPE_QUERY, "retrieval.query"), (pb.EMBED_INPUT_TYPE_DOCUMENT, "retrieval.passage")],
)
async def test_jina_embeddings_carry_the_task(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, input_type: int, task: str
) -> None:
    provider.script("/v1/embeddings", Reply.fixture("jina/embeddings.json"))
    result = await openai_adapter.embed(
        target_for(provider, "jina", model="jina-embeddings-v3"), ["q"], input_type
    )
    sent = only(provider.requests_to("/v1/embeddings"))
    assert sent.json == {"model": "jina-embeddings-v3", "input": ["q"], "task": task}
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert result.vectors == [pytest.approx([0.5, 0.5, 0.5, 0.5])]


@pytest.mark.parametrize("provider_id", ["jina", "siliconflow"])
async def test_jina_shaped_rerank(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, provider_id: str
) -> None:
    provider.script("/v1/rerank", Reply.fixture(f"{provider_id}/rerank.json"))
    documents = ["退货政策", "Return policy: 7 days", "Shipping"]
    scored = await openai_adapter.rerank(
        target_for(provider, provider_id, model="reranker"), "退货", documents, 2
    )
    sent = only(provider.requests_to("/v1/rerank")).json
    assert sent == {
        "model": "reranker",
        "query": "退货",
        "documents": documents,
        "top_n": 2,
        "return_documents": False,
    }
    fixture = json.loads((Path(__file__).parent / "fixtures" / provider_id / "rerank.json").read_text())
    expected = sorted(((r["index"], r["relevance_score"]) for r in fixture["results"]), key=lambda p: -p[1])[
        :2
    ]
    assert scored == expected


async def test_dashscope_rerank_shape_and_path(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    path = "/api/v1/services/rerank/text-rerank/text-rerank"
    provider.script(path, Reply.fixture("dashscope/rerank.json"))
    documents = ["a", "b", "c"]
    scored = await openai_adapter.rerank(
        target_for(provider, "dashscope", model="gte-rerank-v2"), "q", documents, 0
    )
    sent = only(provider.requests_to(path))  # on the native API, beside /compatible-mode/v1
    assert sent.json == {
        "model": "gte-rerank-v2",
        "input": {"query": "q", "documents": documents},
        "parameters": {"top_n": 3, "return_documents": False},
    }
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert scored == [(2, 0.9334521), (0, 0.3416891), (1, 0.0214523)]


async def test_missing_capabilities_are_wrong_model_type(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, anthropic_adapter: AnthropicAdapter
) -> None:
    checks = [
        openai_adapter.rerank(target_for(provider, "openai"), "q", ["d"], 0),
        openai_adapter.embed(target_for(provider, "deepseek"), ["t"], 0),
        openai_adapter.transcribe(target_for(provider, "moonshot"), pb.TranscribeRequest(audio=b"x")),
        collect(
            openai_adapter.chat_stream(
                target_for(provider, "jina"), chat_request(text(pb.CHAT_ROLE_USER, "hi"))
            )
        ),
        anthropic_adapter.embed(target_for(provider, "anthropic"), ["t"], 0),
        anthropic_adapter.rerank(target_for(provider, "anthropic"), "q", ["d"], 0),
        anthropic_adapter.transcribe(target_for(provider, "anthropic"), pb.TranscribeRequest(audio=b"x")),
    ]
    for check in checks:
        error = await raises_model_error(check)
        assert error.code == ModelErrorCode.WRONG_MODEL_TYPE
    assert provider.requests == []


async def test_transcription_multipart(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/audio/transcriptions", Reply.fixture("openai/transcription_verbose.json"))
    request = pb.TranscribeRequest(
        audio=b"ID3fake-mp3-bytes",
        mime_type="audio/mpeg",
        file_name="q.mp3",
        language="zh-CN",
        include_segments=True,
    )
    response = await openai_adapter.transcribe(target_for(provider, "openai", model="whisper-1"), request)
    sent = only(provider.requests_to("/v1/audio/transcriptions"))
    assert sent.headers["content-type"].startswith("multipart/form-data")
    for part in (
        b'name="model"\r\n\r\nwhisper-1',
        b'name="response_format"\r\n\r\nverbose_json',
        b'name="language"\r\n\r\nzh',
    ):
        assert part in sent.body
    assert b'filename="q.mp3"' in sent.body and b"ID3fake-mp3-bytes" in sent.body
    assert response.text == "你好，请问退货政策是什么？"
    assert response.duration.ToMilliseconds() == 4260
    assert [s.text for s in response.segments] == ["你好，", "请问退货政策是什么？"]
    assert response.segments[1].start.ToMilliseconds() == 1520


# -- Anthropic ----------------------------------------------------------------------------------------


async def test_anthropic_request_shape_and_cache_breakpoints(
    provider: ScriptedProvider, anthropic_adapter: AnthropicAdapter
) -> None:
    provider.script("/img/cat.png", Reply(body=PNG, content_type="image/png"))
    provider.script("/v1/messages", Reply.fixture("anthropic/messages_text.sse"))
    request = chat_request(
        text(pb.CHAT_ROLE_SYSTEM, "You are KnowSphere.", breakpoint=True),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_USER,
            content=[
                pb.ContentPart(text="Long stable context …"),
                pb.ContentPart(image=pb.ImageInput(url=f"{provider.url}/img/cat.png")),
            ],
            cache_breakpoint=True,
        ),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_ASSISTANT,
            content=[pb.ContentPart(text="Searching.")],
            tool_calls=[pb.ToolCall(id="toolu_1", name="kb_search", arguments_json='{"query": "cat"}')],
        ),
        pb.ChatMessage(
            role=pb.CHAT_ROLE_TOOL, tool_call_id="toolu_1", content=[pb.ContentPart(text="[doc 1]")]
        ),
        text(pb.CHAT_ROLE_USER, "And now?"),
        tools=[
            pb.ToolDefinition(
                name="kb_search", description="Search", parameters_json_schema='{"type":"object"}'
            )
        ],
        tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
        stop=["\n\nHuman:"],
    )

    events = await collect(anthropic_adapter.chat_stream(target_for(provider, "anthropic"), request))

    sent = only(provider.requests_to("/v1/messages"))
    assert sent.headers["x-api-key"] == "sk-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    body = sent.json
    assert body["max_tokens"] == PROVIDERS["anthropic"].default_max_tokens
    assert body["stream"] is True and body["stop_sequences"] == ["\n\nHuman:"]
    assert body["system"] == [
        {"type": "text", "text": "You are KnowSphere.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"] == [
        {"name": "kb_search", "description": "Search", "input_schema": {"type": "object"}}
    ]
    assert body["tool_choice"] == {"type": "any"}
    image_block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()},
    }
    assert body["messages"] == [
        {
            "role": "user",
            # cache_control on the last block of the marked message only
            "content": [
                {"type": "text", "text": "Long stable context …"},
                {**image_block, "cache_control": {"type": "ephemeral"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "toolu_1", "name": "kb_search", "input": {"query": "cat"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[doc 1]"},
                {"type": "text", "text": "And now?"},
            ],
        },
    ]
    assert answer_text(events) == "Hello! 你好。"
    assert kinds(events)[-2:] == ["finish", "usage"]
    assert events[-2].finish.reason == pb.FINISH_REASON_STOP
    usage = events[-1].usage
    assert usage.prompt_tokens == 25 + 1800 and usage.cached_prompt_tokens == 1800
    assert usage.completion_tokens == 15 and usage.total_tokens == 1840


async def test_anthropic_keeps_the_last_breakpoints_within_the_limit(
    provider: ScriptedProvider, anthropic_adapter: AnthropicAdapter
) -> None:
    provider.script("/v1/messages", Reply.fixture("anthropic/messages_text.sse"))
    limit = PROVIDERS["anthropic"].max_cache_breakpoints
    roles = [pb.CHAT_ROLE_USER, pb.CHAT_ROLE_ASSISTANT] * 3
    messages = [text(role, f"turn {i}", breakpoint=True) for i, role in enumerate(roles)]
    await collect(anthropic_adapter.chat_stream(target_for(provider, "anthropic"), chat_request(*messages)))
    sent = only(provider.requests_to("/v1/messages")).json["messages"]
    marked = [i for i, m in enumerate(sent) if "cache_control" in m["content"][-1]]
    assert marked == list(range(len(roles) - limit, len(roles)))


async def test_anthropic_tool_use_stream(
    provider: ScriptedProvider, anthropic_adapter: AnthropicAdapter
) -> None:
    provider.script("/v1/messages", Reply.fixture("anthropic/messages_tool_use.sse"))
    events = await collect(
        anthropic_adapter.chat_stream(
            target_for(provider, "anthropic"), chat_request(text(pb.CHAT_ROLE_USER, "policy?"))
        )
    )
    assert answer_text(events) == "Let me search the knowledge base."
    assert assembled_tool_calls(events) == {
        0: {
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "name": "kb_search",
            "arguments": '{"query": "return policy"}',
        }
    }
    assert events[-2].finish.reason == pb.FINISH_REASON_TOOL_CALLS
    usage = events[-1].usage
    assert (
        usage.prompt_tokens == 472 + 1024
        and usage.cached_prompt_tokens == 0
        and usage.completion_tokens == 89
    )


async def test_anthropic_errors(provider: ScriptedProvider, anthropic_adapter: AnthropicAdapter) -> None:
    target = target_for(provider, "anthropic")
    provider.script("/v1/messages", Reply.fixture("anthropic/error_401.json", status=401))
    error = await raises_model_error(
        collect(anthropic_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    )
    assert error.code == ModelErrorCode.AUTHENTICATION_FAILED

    provider.script(
        "/v1/messages", *[Reply.fixture("anthropic/error_overloaded.json", status=529)] * (MAX_RETRIES + 1)
    )
    error = await raises_model_error(
        collect(anthropic_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    )
    assert error.code == ModelErrorCode.MODEL_UNAVAILABLE

    # An error event after the stream started is reported, not retried.
    provider.script("/v1/messages", Reply.fixture("anthropic/stream_error_overloaded.sse"))
    error = await raises_model_error(
        collect(anthropic_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    )
    assert error.code == ModelErrorCode.MODEL_UNAVAILABLE and error.model_id == target.model_id
    assert len(provider.requests_to("/v1/messages")) == 1 + MAX_RETRIES + 1 + 1


async def test_anthropic_has_no_logprobs(
    provider: ScriptedProvider, anthropic_adapter: AnthropicAdapter
) -> None:
    error = await raises_model_error(
        anthropic_adapter.next_token_logprobs(
            target_for(provider, "anthropic"), [text(pb.CHAT_ROLE_USER, "hi")], 5
        )
    )
    assert error.code == ModelErrorCode.WRONG_MODEL_TYPE


# -- Decide -------------------------------------------------------------------------------------------


def decide_request(**kwargs: Any) -> pb.DecideRequest:
    return pb.DecideRequest(
        messages=[text(pb.CHAT_ROLE_SYSTEM, "Route the user's message.")],
        prompt="我想退货",
        labels=[
            pb.DecisionLabel(name="chitchat", description="small talk"),
            pb.DecisionLabel(name="kb_search", description="needs the knowledge base"),
            pb.DecisionLabel(name="handoff", description="needs a human"),
        ],
        **kwargs,
    )


async def test_decide_by_logprobs(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/logprobs.json"))
    target = target_for(provider, "openai")
    response = await decide(openai_adapter, target, PROVIDERS["openai"], decide_request(), max_labels=26)

    sent = only(provider.requests_to("/v1/chat/completions")).json
    assert sent["logprobs"] is True and sent["top_logprobs"] == 20 and sent["max_completion_tokens"] == 1
    assert "stream" not in sent
    assert sent["messages"][0] == {"role": "system", "content": "Route the user's message."}
    final = sent["messages"][-1]["content"]
    assert final.startswith("我想退货\n\n")
    assert "A. chitchat: small talk" in final and "B. kb_search: needs the knowledge base" in final
    assert "C. handoff: needs a human" in final

    assert response.method == pb.DECISION_METHOD_LOGPROBS
    assert response.label == "kb_search" and response.model_id == target.model_id
    p_b = math.exp(-0.0487) + math.exp(-5.2987)  # "B" and " B" both name option B
    p_a, p_c = math.exp(-3.1737), math.exp(-7.9237)
    assert response.probability == pytest.approx(p_b / (p_a + p_b + p_c))
    assert [s.label for s in response.scores] == ["kb_search", "chitchat", "handoff"]
    assert sum(s.probability for s in response.scores) == pytest.approx(1.0)


async def test_decide_falls_back_to_json_when_no_label_token_appears(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/v1/chat/completions",
        Reply.fixture("openai/logprobs_no_label.json"),
        openai_text_stream(['{"label": ', '"handoff"}']),
    )
    response = await decide(
        openai_adapter, target_for(provider, "openai"), PROVIDERS["openai"], decide_request(), max_labels=26
    )
    logprobs_call, json_call = (r.json for r in provider.requests_to("/v1/chat/completions"))
    assert logprobs_call["logprobs"] is True
    assert json_call["stream"] is True
    assert json_call["response_format"]["type"] == "json_schema"
    schema = json_call["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["label"]["enum"] == ["chitchat", "kb_search", "handoff"]
    assert response.method == pb.DECISION_METHOD_JSON
    assert response.label == "handoff" and response.probability == 1.0


async def test_decide_by_json_where_the_provider_has_no_logprobs(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, anthropic_adapter: AnthropicAdapter
) -> None:
    provider.script("/v1/chat/completions", openai_text_stream(['```json\n{"label": "kb_search"}\n```']))
    provider.script("/v1/messages", anthropic_text_stream('{"label": "chitchat"}'))
    request = decide_request(method=pb.DECISION_METHOD_LOGPROBS)  # falls back: no logprobs there

    moonshot = await decide(
        openai_adapter, target_for(provider, "moonshot"), PROVIDERS["moonshot"], request, max_labels=26
    )
    anthropic = await decide(
        anthropic_adapter, target_for(provider, "anthropic"), PROVIDERS["anthropic"], request, max_labels=26
    )

    assert (moonshot.label, moonshot.method) == ("kb_search", pb.DECISION_METHOD_JSON)
    assert (anthropic.label, anthropic.method) == ("chitchat", pb.DECISION_METHOD_JSON)
    assert anthropic.usage.prompt_tokens == 40
    moonshot_body = only(provider.requests_to("/v1/chat/completions")).json
    assert moonshot_body["response_format"] == {"type": "json_object"}
    assert '"kb_search"' in moonshot_body["messages"][-1]["content"]
    anthropic_body = only(provider.requests_to("/v1/messages")).json
    assert "response_format" not in anthropic_body
    assert "JSON" in anthropic_body["messages"][-1]["content"][-1]["text"]


async def test_decide_json_method_is_honoured_and_answers_are_validated(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", openai_text_stream(['{"label": "refund"}']))
    request = decide_request(method=pb.DECISION_METHOD_JSON)
    error = await raises_model_error(
        decide(openai_adapter, target_for(provider, "openai"), PROVIDERS["openai"], request, max_labels=26)
    )
    assert error.code == ModelErrorCode.PROVIDER_ERROR and "refund" in error.detail
    sent = only(provider.requests_to("/v1/chat/completions")).json
    assert "logprobs" not in sent  # JSON asked for: no logprobs call first


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        (["only"], "at least 2"),
        (["a", "b", "a"], "repeated: a"),
        ([f"l{i}" for i in range(5)], "at most 4"),
        (["a", " "], "needs a name"),
    ],
)
async def test_decide_validates_labels(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter, labels: list[str], reason: str
) -> None:
    request = pb.DecideRequest(prompt="x", labels=[pb.DecisionLabel(name=n) for n in labels])
    error = await raises_model_error(
        decide(openai_adapter, target_for(provider, "openai"), PROVIDERS["openai"], request, max_labels=4)
    )
    assert error.code == ModelErrorCode.INVALID_INPUT and error.field == "labels"
    assert reason in error.user_message("en")
    assert provider.requests == []


def test_label_probabilities_ignore_other_tokens() -> None:
    from knowsphere_modelhub.domain.ports import TokenLogprob

    probabilities = label_probabilities(
        ["x", "y"],
        [TokenLogprob("a", math.log(0.2)), TokenLogprob("B.", math.log(0.6)), TokenLogprob("Z", -0.1)],
    )
    assert probabilities == {"x": pytest.approx(0.25), "y": pytest.approx(0.75)}
    assert label_probabilities(["x", "y"], [TokenLogprob("No", -0.1)]) == {}


async def test_decide_falls_back_when_the_model_rejects_logprobs(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script(
        "/chat/completions",
        Reply.fixture("deepseek/error_reasoner_logprobs.json", status=400),
        openai_text_stream(['{"label": "kb_search"}'], model="deepseek-reasoner"),
    )
    target = target_for(provider, "deepseek", model="deepseek-reasoner")
    response = await decide(openai_adapter, target, PROVIDERS["deepseek"], decide_request(), max_labels=26)
    assert (response.label, response.method) == ("kb_search", pb.DECISION_METHOD_JSON)
    assert len(provider.requests_to("/chat/completions")) == 2


async def test_error_event_inside_a_stream(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    path = "/compatible-mode/v1/chat/completions"
    provider.script(path, Reply.fixture("dashscope/stream_error_output_inspection.sse"))
    received: list[pb.ChatStreamResponse] = []
    with pytest.raises(ModelError) as caught:
        async for event in openai_adapter.chat_stream(
            target_for(provider, "dashscope"), chat_request(text(pb.CHAT_ROLE_USER, "x"))
        ):
            received.append(event)
    assert answer_text(received) == "关于这个"
    assert caught.value.code == ModelErrorCode.CONTENT_FILTERED
    assert len(provider.requests_to(path)) == 1  # output already sent: not retried


async def test_a_server_that_ignores_stream_true_still_works(
    provider: ScriptedProvider, openai_adapter: OpenAICompatibleAdapter
) -> None:
    provider.script("/v1/chat/completions", Reply.fixture("openai/chat_completion_not_streamed.json"))
    events = await collect(
        openai_adapter.chat_stream(
            target_for(provider, "custom"), chat_request(text(pb.CHAT_ROLE_USER, "refund?"))
        )
    )
    assert answer_text(events) == "Checking."
    assert assembled_tool_calls(events) == {
        0: {"id": "call_a1", "name": "kb_search", "arguments": '{"query": "refund"}'}
    }
    assert kinds(events)[-2:] == ["finish", "usage"]
    assert events[-2].finish.reason == pb.FINISH_REASON_TOOL_CALLS and events[-1].usage.total_tokens == 78


@pytest.mark.parametrize("base_url", ["http://[bad", "ftp://127.0.0.1/v1"])
async def test_a_bad_base_url_is_a_clear_error(
    openai_adapter: OpenAICompatibleAdapter, base_url: str
) -> None:
    target = CallTarget(
        model_id="m",
        provider_id="custom",
        model_name="x",
        base_url=base_url,
        api_key=None,
        parameters=ModelParams(),
        types=frozenset({ModelType.KNOWLEDGE_QA}),
    )
    chat = await raises_model_error(
        collect(openai_adapter.chat_stream(target, chat_request(text(pb.CHAT_ROLE_USER, "hi"))))
    )
    embed = await raises_model_error(openai_adapter.embed(target, ["a"], 0))
    assert chat.code == embed.code == ModelErrorCode.MODEL_UNAVAILABLE
    assert chat.model_id == "m"
