"""What a provider answers in an error reaches ModelError.detail (and so logs and traces) cut to
PROVIDER_TEXT_IN_ERRORS characters and without the API key the call sent, however the provider echoes
it: in a 401 body, in an error event of a stream, in an answer that is not JSON, at the cut itself.

Real HTTP against the scripted provider (tests/scripted_provider.py); the bodies are hand-written in
the shape of OpenAI's and Anthropic's errors, with the key put in where a careless provider might.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere_modelhub.adapters.anthropic import AnthropicAdapter
from knowsphere_modelhub.adapters.http import PROVIDER_TEXT_IN_ERRORS, ProviderHttp, provider_text
from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.providers import PROVIDERS
from knowsphere_modelhub.domain.records import CallTarget, ModelParams

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from scripted_provider import Reply, ScriptedProvider  # noqa: E402

KEY = "sk-proj-Echoed0123456789abcdefKEY9"


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


@pytest.fixture
async def http(server: ScriptedProvider) -> AsyncIterator[ProviderHttp]:
    client = ProviderHttp(
        timeout_seconds=5.0, max_retries=0, backoff_seconds=0.01, concurrency=2, egress=server.egress()
    )
    yield client
    await client.close()


def target(provider: ScriptedProvider, provider_id: str) -> CallTarget:
    # The path part of the provider's real base URL, so the scripted paths are the real ones.
    base_path = urlsplit(PROVIDERS[provider_id].default_base_url).path.rstrip("/")
    return CallTarget(
        model_id=f"model-{provider_id}",
        provider_id=provider_id,
        model_name="test-model",
        base_url=provider.url + base_path,
        api_key=KEY,
        parameters=ModelParams(),
        types=frozenset({ModelType.KNOWLEDGE_QA, ModelType.EMBEDDING}),
    )


def hello() -> pb.ChatStreamRequest:
    return pb.ChatStreamRequest(
        messages=[pb.ChatMessage(role=pb.CHAT_ROLE_USER, content=[pb.ContentPart(text="hello")])]
    )


async def chat_error(adapter: OpenAICompatibleAdapter | AnthropicAdapter, call: CallTarget) -> ModelError:
    with pytest.raises(ModelError) as caught:
        [event async for event in adapter.chat_stream(call, hello())]
    return caught.value


def assert_clean(error: ModelError) -> None:
    for text in (error.detail, str(error), error.user_message("en")):
        assert KEY not in text
        # Not even a piece of it: any 8 characters in a row.
        assert all(KEY[i : i + 8] not in text for i in range(len(KEY) - 7)), text
    # What the provider said, after the detail's own prefix ("HTTP 401: " …), is cut at the limit.
    assert len(error.detail.split(": ", 1)[1]) <= PROVIDER_TEXT_IN_ERRORS + len("…")


async def test_a_401_whose_body_echoes_the_key_is_cut_and_scrubbed(
    provider: ScriptedProvider, http: ProviderHttp
) -> None:
    body = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "request": {"headers": {"Authorization": f"Bearer {KEY}"}, "padding": "p" * 2000},
        }
    }
    provider.script("/v1/chat/completions", Reply(status=401, json=body))
    error = await chat_error(OpenAICompatibleAdapter(http, PROVIDERS), target(provider, "openai"))
    assert error.code == ModelErrorCode.AUTHENTICATION_FAILED
    assert_clean(error)
    assert "Incorrect API key provided: ***." in error.detail and '"code":"invalid_api_key"' in error.detail
    assert error.detail.endswith("…")
    # The key did reach the provider: the scrubbing is of what came back.
    (sent,) = provider.requests_to("/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"


async def test_a_key_that_straddles_the_cut_leaves_no_piece_behind(
    provider: ScriptedProvider, http: ProviderHttp
) -> None:
    # The echoed key begins 10 characters before the limit: cut first, those 10 would survive.
    lead = "e" * (PROVIDER_TEXT_IN_ERRORS - len('{"error":"') - 10)
    body = {"error": f"{lead}{KEY} rejected at the gateway{'.' * 1000}"}
    provider.script("/v1/chat/completions", Reply(status=401, json=body))
    error = await chat_error(OpenAICompatibleAdapter(http, PROVIDERS), target(provider, "openai"))
    assert_clean(error)
    assert error.detail.endswith("eeeee*** reject…")  # the key gone whole, the text cut after it


async def test_an_error_event_in_a_stream_that_echoes_the_key_is_scrubbed(
    provider: ScriptedProvider, http: ProviderHttp
) -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None}]},
        {"error": {"message": f"key {KEY} was revoked while streaming", "type": "invalid_request_error"}},
    ]
    provider.script("/v1/chat/completions", Reply.sse_data(chunks, done=False))
    error = await chat_error(OpenAICompatibleAdapter(http, PROVIDERS), target(provider, "openai"))
    assert error.detail.startswith("error in stream: ") and "key *** was revoked" in error.detail
    assert_clean(error)


async def test_anthropic_errors_echoing_the_x_api_key_are_scrubbed(
    provider: ScriptedProvider, http: ProviderHttp
) -> None:
    body = {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key: {KEY}"},
    }
    provider.script("/v1/messages", Reply(status=401, json=body))
    error = await chat_error(AnthropicAdapter(http, PROVIDERS), target(provider, "anthropic"))
    assert error.code == ModelErrorCode.AUTHENTICATION_FAILED
    assert "invalid x-api-key: ***" in error.detail
    assert_clean(error)
    (sent,) = provider.requests_to("/v1/messages")
    assert sent.headers["x-api-key"] == KEY


async def test_an_answer_that_is_not_json_is_cut_and_scrubbed(
    provider: ScriptedProvider, http: ProviderHttp
) -> None:
    page = f"<html><body>Proxy login failed for {KEY}" + "<p>lorem</p>" * 200 + "</body></html>"
    provider.script("/v1/embeddings", Reply(status=200, body=page.encode(), content_type="application/json"))
    with pytest.raises(ModelError) as caught:
        await OpenAICompatibleAdapter(http, PROVIDERS).embed(target(provider, "openai"), ["a text"], 0)
    assert caught.value.detail.startswith("answer is not JSON: <html>")
    assert_clean(caught.value)


def test_provider_text_keeps_short_answers_whole_and_marks_a_cut() -> None:
    assert provider_text('{"error": "overloaded"}') == '{"error": "overloaded"}'
    cut = provider_text("x" * (PROVIDER_TEXT_IN_ERRORS + 1))
    assert cut == "x" * PROVIDER_TEXT_IN_ERRORS + "…"
    assert provider_text(f"token={KEY}&user=me") == "token=***&user=me"
