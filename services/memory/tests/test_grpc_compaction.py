"""CompactSession through gRPC, as the conversation calls it when the previous prompt reached 85% of the
window: memory cuts the session, has modelhub's chat model write the handoff document (modelhub in-process,
its model on the scripted OpenAI-compatible server of ``services/modelhub/tests``), or falls back to
the deterministic extract when the model is unavailable, and stores the result as the session summary."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.modelhub.v1 import modelhub_pb2 as hpb
from knowsphere_clients import MemoryClient, ModelHubClient
from knowsphere_clients.errors import Aborted, InvalidArgument
from knowsphere_contracts.services import CONTRACTS
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.api.grpc import build_binding
from knowsphere_memory.domain.handoff import refs_tokens
from knowsphere_memory.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc import open_channel
from knowsphere_runtime.rpc.testing import serving

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "services" / "modelhub" / "tests"))
from scripted_provider import Recorded, Reply, ScriptedProvider, closed_port, openai_text_stream  # noqa: E402

ALICE = Identity("acme", "alice")
BOB = Identity("acme", "bob")
WINDOW = 8000
CHAT = "/v1/chat/completions"
USER, ASSISTANT, TOOL = (
    mpb.SESSION_MESSAGE_ROLE_USER,
    mpb.SESSION_MESSAGE_ROLE_ASSISTANT,
    mpb.SESSION_MESSAGE_ROLE_TOOL,
)
MODEL_HANDOFF = {
    "phases_done": [{"title": "Policy search", "summary": "Found the expense policies (ref-0)."}],
    "abandoned_paths": [{"approach": "web search", "reason": "not enabled"}],
    "key_facts": ["Expense cap is 5000 CNY"],
    "open_questions": [],
    "result_refs": [{"ref_id": "invented-by-the-model"}],
}


def stored_result(ref: str) -> str:
    return json.dumps({"__stored": True, "__refId": ref, "__summary": f"{ref} policies", "__hint": "x"})


def turns(first: int, count: int, words: int = 120) -> list[mpb.SessionMessage]:
    """``count`` turns of question, tool call, stored tool result and answer, numbered from ``first``."""
    messages: list[mpb.SessionMessage] = []
    for t in range(first, first + count):
        messages += [
            mpb.SessionMessage(id=f"u{t}", role=USER, content=f"question {t} " + "word " * words),
            mpb.SessionMessage(id=f"a{t}c", role=ASSISTANT, tool_call_ids=[f"call{t}"]),
            mpb.SessionMessage(
                id=f"r{t}",
                role=TOOL,
                content=stored_result(f"ref-{t}"),
                tool_call_id=f"call{t}",
                tool_name="doc_retrieval",
            ),
            mpb.SessionMessage(id=f"a{t}", role=ASSISTANT, content=f"answer {t} " + "word " * words),
        ]
    return messages


CURRENT = mpb.SessionMessage(id="current", role=USER, content="and what about travel?")


def compact_request(
    messages: list[mpb.SessionMessage], expected: int | None = None
) -> mpb.CompactSessionRequest:
    request = mpb.CompactSessionRequest(
        session_id="s1", messages=messages, context_window=WINDOW, trigger_prompt_tokens=870
    )
    if expected is not None:
        request.expected_revision = expected
    return request


def assert_cut_rules(messages: list[mpb.SessionMessage], response: mpb.CompactSessionResponse) -> None:
    """The cut is at a message boundary, splits no tool call from its result, keeps the current question
    and about 30% of the window: the newest messages and the handoff document within it, besides the
    index of stored results (never shortened: it is the only way back to them)."""
    ids = [m.id for m in messages]
    cut = ids.index(response.summary.summary_upto_message_id) + 1
    archived, kept = messages[:cut], messages[cut:]
    assert kept and kept[-1].id == "current" and kept[0].role != TOOL
    archived_calls = {c for m in archived for c in m.tool_call_ids}
    assert all(m.tool_call_id not in archived_calls for m in kept if m.role == TOOL)
    assert {m.tool_call_id for m in archived if m.role == TOOL} == archived_calls
    assert 0 < response.kept_tokens <= 0.25 * WINDOW  # the newest messages; the handoff takes the rest
    index = refs_tokens(response.summary.handoff.result_refs)
    assert response.kept_tokens + response.handoff_tokens - index <= 0.30 * WINDOW


@pytest.fixture(scope="module")
def provider() -> Any:
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@asynccontextmanager
async def modelhub_service(folder: Path, provider_url: str) -> AsyncIterator[grpc.aio.Channel]:
    """modelhub's own gRPC face (SQLite registry) with the scripted server as ALICE's tenant's default
    KnowledgeQA model."""
    from knowsphere_egress import EgressPolicy
    from knowsphere_modelhub.adapters.http import ProviderHttp
    from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
    from knowsphere_modelhub.adapters.sql_store import SqlModelStore
    from knowsphere_modelhub.api.grpc import build_binding as modelhub_binding
    from knowsphere_modelhub.domain.providers import PROVIDERS
    from knowsphere_modelhub.domain.registry import Registry
    from knowsphere_modelhub.domain.secrets import verify_master_key
    from knowsphere_modelhub.settings import Settings as ModelHubSettings
    from knowsphere_runtime.secrets import KeyRing
    from knowsphere_telemetry.langfuse import NoopLlmObserver

    settings = ModelHubSettings(
        data_dir=folder,
        master_key="unit-test-master-key-0123456789",  # type: ignore[arg-type]
        provider_backoff_seconds=0.01,
        provider_timeout_seconds=5,
        # The tests' providers are scripted servers on loopback, on ports chosen at random.
        egress=EgressPolicy(allow_networks=("127.0.0.1/32",), allowed_ports=frozenset(range(1, 65536))),  # type: ignore[arg-type]
    )
    store = SqlModelStore(settings.sqlalchemy_url())
    await store.open()
    keyring = KeyRing.from_strings(settings.master_key.get_secret_value())
    await verify_master_key(store, keyring)
    http = ProviderHttp.from_settings(settings)
    binding = modelhub_binding(
        Registry(store, keyring, PROVIDERS, {}, egress=settings.egress),
        {"openai": OpenAICompatibleAdapter(http, PROVIDERS)},
        settings,
        NoopLlmObserver(),
    )
    try:
        async with serving("modelhub", binding=binding) as channel:
            stub = CONTRACTS["modelhub"].stub(channel)
            with bound_identity(ALICE):
                created = await stub.CreateModel(
                    hpb.CreateModelRequest(
                        display_name="scripted",
                        provider_id="custom",
                        model_name="scripted-model",
                        types=[hpb.MODEL_TYPE_KNOWLEDGE_QA],
                        base_url=f"{provider_url}/v1",
                        api_key="sk-unit-test-0000001",
                    )
                )
                await stub.SetDefaultModel(
                    hpb.SetDefaultModelRequest(type=hpb.MODEL_TYPE_KNOWLEDGE_QA, model_id=created.model.id)
                )
            yield channel
    finally:
        await http.close()
        await store.close()


@asynccontextmanager
async def memory_service(
    store: SqlMemoryStore, settings: Settings, modelhub: grpc.aio.Channel
) -> AsyncIterator[MemoryClient]:
    """memory wired as ``__main__`` wires it with a modelhub address."""
    binding = build_binding(settings=settings, store=store, modelhub=ModelHubClient(modelhub))
    async with serving("memory", binding=binding) as channel:
        yield MemoryClient(channel)


@pytest.fixture
async def with_model(
    tmp_path: Path, store: SqlMemoryStore, settings: Settings, provider: ScriptedProvider
) -> AsyncIterator[MemoryClient]:
    provider.reset()
    async with (
        modelhub_service(tmp_path / "modelhub", provider.url) as modelhub,
        memory_service(store, settings, modelhub) as memory,
    ):
        yield memory


@pytest.fixture
async def modelhub_down(store: SqlMemoryStore, settings: Settings) -> AsyncIterator[MemoryClient]:
    """memory whose modelhub address has nothing listening."""
    channel = open_channel(f"127.0.0.1:{closed_port()}", services=[CONTRACTS["modelhub"].descriptor])
    try:
        async with memory_service(store, settings, channel) as memory:
            yield memory
    finally:
        await channel.close()


def last_archived_question(response: mpb.CompactSessionResponse) -> str:
    """The question of the newest turn the cut archived (ids carry the turn number)."""
    turn = re.search(r"\d+", response.summary.summary_upto_message_id)
    assert turn is not None
    return f"question {turn.group()} "


def answer_with(handoff: dict[str, Any]) -> Callable[[Recorded], Reply]:
    return lambda request: openai_text_stream([json.dumps(handoff)])


def transcript_of(request: Recorded) -> str:
    return "\n".join(str(m.get("content", "")) for m in request.json["messages"])


async def test_the_model_writes_the_handoff_code_indexes_the_results_and_it_is_stored(
    with_model: MemoryClient, provider: ScriptedProvider
) -> None:
    provider.respond(CHAT, answer_with(MODEL_HANDOFF))
    messages = [*turns(0, 20), CURRENT]
    with bound_identity(ALICE):
        response = await with_model.compact_session(compact_request(messages, expected=0))
        assert response.compacted and not response.degraded and response.degraded_reason == ""
        assert_cut_rules(messages, response)
        summary = response.summary
        assert summary.revision == 1 and summary.trigger_prompt_tokens == 870
        handoff = summary.handoff
        assert handoff.original_request.startswith("question 0")
        assert [p.title for p in handoff.phases_done] == ["Policy search"]
        assert list(handoff.key_facts) == ["Expense cap is 5000 CNY"]
        archived = [m.id for m in messages][: [m.id for m in messages].index(summary.summary_upto_message_id)]
        archived_refs = [f"ref-{m.removeprefix('r')}" for m in archived if m.startswith("r")]
        assert archived_refs and [r.ref_id for r in handoff.result_refs] == archived_refs

        got = await with_model.get_session_summary(mpb.GetSessionSummaryRequest(session_id="s1"))
        assert got.summary == summary
    [asked] = provider.requests_to(CHAT)
    assert asked.json["response_format"] == {"type": "json_object"}
    assert "question 0" in transcript_of(asked) and "and what about travel?" not in transcript_of(asked)
    with bound_identity(BOB):
        bobs = await with_model.get_session_summary(mpb.GetSessionSummaryRequest(session_id="s1"))
        assert bobs.summary.revision == 0 and not bobs.summary.HasField("handoff")


async def test_a_second_compaction_carries_the_first_forward_and_never_summarises_a_span_twice(
    with_model: MemoryClient, provider: ScriptedProvider
) -> None:
    provider.respond(CHAT, answer_with(MODEL_HANDOFF))
    first_messages = [*turns(0, 12), CURRENT]
    with bound_identity(ALICE):
        first = await with_model.compact_session(compact_request(first_messages, expected=0))
        later = [*turns(0, 24), mpb.SessionMessage(id="current2", role=USER, content="and hotels?")]
        second = await with_model.compact_session(compact_request(later, expected=first.summary.revision))
    assert second.compacted and second.summary.revision == 2
    ids = [m.id for m in later]
    first_upto, second_upto = first.summary.summary_upto_message_id, second.summary.summary_upto_message_id
    assert ids.index(second_upto) > ids.index(first_upto)
    first_refs = [r.ref_id for r in first.summary.handoff.result_refs]
    refs = [r.ref_id for r in second.summary.handoff.result_refs]
    assert refs[: len(first_refs)] == first_refs and len(refs) == len(set(refs)) > len(first_refs)
    first_call, second_call = provider.requests_to(CHAT)
    assert "question 0 " in transcript_of(first_call)
    assert "[user #u0]" not in transcript_of(second_call)  # already summarised by the first compaction


@pytest.mark.parametrize("answer", ["not json at all", json.dumps({"phases_done": []})])
async def test_a_model_answer_that_is_not_the_handoff_degrades_to_the_extract(
    with_model: MemoryClient, provider: ScriptedProvider, answer: str
) -> None:
    provider.respond(CHAT, lambda request: openai_text_stream([answer]))
    messages = [*turns(0, 20), CURRENT]
    with bound_identity(ALICE):
        response = await with_model.compact_session(compact_request(messages))
    assert response.compacted and response.degraded
    assert "not the handoff JSON" in response.degraded_reason
    assert response.summary.handoff.phases_done[-1].title.startswith(last_archived_question(response))


async def test_with_the_model_unavailable_the_extract_is_stored_and_marked_degraded(
    modelhub_down: MemoryClient,
) -> None:
    messages = [*turns(0, 20), CURRENT]
    with bound_identity(ALICE):
        response = await modelhub_down.compact_session(compact_request(messages, expected=0))
        assert response.compacted and response.degraded
        assert "model unavailable" in response.degraded_reason
        assert_cut_rules(messages, response)
        handoff = response.summary.handoff
        # One phase per archived turn, written by code: the oldest folded to fit, the newest kept.
        assert handoff.phases_done[-1].title.startswith(last_archived_question(response))
        assert [r.ref_id for r in handoff.result_refs][:2] == ["ref-0", "ref-1"]
        got = await modelhub_down.get_session_summary(mpb.GetSessionSummaryRequest(session_id="s1"))
        assert got.summary == response.summary and got.summary.revision == 1


async def test_a_stale_expected_revision_is_aborted_before_any_model_call(
    with_model: MemoryClient, provider: ScriptedProvider
) -> None:
    provider.respond(CHAT, answer_with(MODEL_HANDOFF))
    messages = [*turns(0, 20), CURRENT]
    with bound_identity(ALICE):
        with pytest.raises(Aborted) as raised:
            await with_model.compact_session(compact_request(messages, expected=3))
        assert raised.value.field == "expected_revision"
        assert provider.requests_to(CHAT) == []
        await with_model.compact_session(compact_request(messages, expected=0))
        with pytest.raises(Aborted):  # the revision read before the first compaction is stale now
            await with_model.compact_session(compact_request([*turns(0, 28), CURRENT], expected=0))
        got = await with_model.get_session_summary(mpb.GetSessionSummaryRequest(session_id="s1"))
    assert got.summary.revision == 1


async def test_a_session_with_nothing_to_archive_is_left_alone(modelhub_down: MemoryClient) -> None:
    with bound_identity(ALICE):
        response = await modelhub_down.compact_session(compact_request([CURRENT]))
        assert not response.compacted and response.summary.revision == 0
        got = await modelhub_down.get_session_summary(mpb.GetSessionSummaryRequest(session_id="s1"))
        assert got.summary.revision == 0 and not got.summary.HasField("handoff")


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (mpb.CompactSessionRequest(session_id="s1", context_window=WINDOW), "messages"),
        (compact_request([*turns(0, 1), mpb.SessionMessage(id="x", content="no role")]), "messages[4].role"),
        (compact_request([mpb.SessionMessage(role=USER, content="no id")]), "messages[0].id"),
        (mpb.CompactSessionRequest(session_id="s1", messages=[CURRENT]), "context_window"),
    ],
)
async def test_bad_compaction_requests_name_the_field(
    modelhub_down: MemoryClient, request_: mpb.CompactSessionRequest, field: str
) -> None:
    with bound_identity(ALICE), pytest.raises(InvalidArgument) as raised:
        await modelhub_down.compact_session(request_)
    assert raised.value.field == field


async def test_a_slow_model_gives_way_to_the_extract_within_the_callers_deadline(
    with_model: MemoryClient, provider: ScriptedProvider
) -> None:
    provider.respond(CHAT, lambda request: Reply(delay=20, json={}))
    messages = [*turns(0, 20), CURRENT]
    started = time.monotonic()
    with bound_identity(ALICE):
        response = await with_model.compact_session(compact_request(messages), timeout=4.0)
    assert time.monotonic() - started < 4.0
    assert response.compacted and response.degraded
    assert "did not answer within" in response.degraded_reason
