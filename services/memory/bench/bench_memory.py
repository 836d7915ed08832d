"""Latency of memory's per-turn reads and writes, and the time of a handoff compaction.

1. A memory service in-process (real gRPC server on loopback, SQLite in a temporary directory) holding
   1,000 users of one tenant; one of them has 10,000 memory items (profile, interest, fact) and 1,000
   frequently consulted documents (2+ cited hits each), the others 10 items and 5 documents each.
   Measured through the real client: ``GetAskerBackground`` and ``Remember`` (one new item) p50/p95 for
   that user.
2. Compaction of a 100-message session (20 turns of question, tool call, externalised tool result,
   tool error or raw result, answer) whose size is 85% of the context window (the trigger point),
   through memory's ``CompactSession`` (gRPC, in-process) → ``ModelHubHandoffModel`` → a real modelhub
   in-process → a scripted OpenAI-compatible server on a real socket
   (``services/modelhub/tests/scripted_provider.py``), then again on a memory without a model (the
   degraded extract). Reports the time and the share of the window kept (kept messages + handoff).

Prints readable lines, then one JSON object as the last line.

    python services/memory/bench/bench_memory.py [--users 1000] [--items 10000] [--documents 1000] \
        [--calls 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import MemoryItemKind, SessionMessageRole
from knowsphere.modelhub.v1 import modelhub_pb2 as hpb
from knowsphere_clients import MemoryClient, ModelHubClient
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.api.grpc import build_binding
from knowsphere_memory.domain.handoff import TRIGGER_SHARE, SessionMessage
from knowsphere_memory.domain.records import CitedDocumentRecord, NewItem, Owner
from knowsphere_memory.domain.statements import normalise
from knowsphere_memory.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving

REPO = Path(__file__).resolve().parents[3]
TENANT = "bench"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = (MemoryItemKind.PROFILE, MemoryItemKind.INTEREST, MemoryItemKind.FACT)
ITEMS_PER_CALL = 100
SESSION_TURNS = 20  # x 5 messages = 100


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def timed(calls: int, call: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    for i in range(min(20, calls)):  # warm-up: channel, statement caches
        await call(-1 - i)
    latencies = []
    for i in range(calls):
        start = time.perf_counter()
        await call(i)
        latencies.append((time.perf_counter() - start) * 1000)
    return {
        "p50_ms": round(statistics.median(latencies), 3),
        "p95_ms": round(percentile(latencies, 0.95), 3),
        "max_ms": round(max(latencies), 3),
        "calls": calls,
    }


async def populate(store: SqlMemoryStore, users: int, items: int, documents: int) -> str:
    counter = iter(range(10**9))

    def new_id() -> str:
        return f"id-{next(counter):012d}"

    target = Owner(TENANT, "user-0000")
    for start in range(0, items, ITEMS_PER_CALL):
        batch = [
            NewItem(KINDS[i % 3], text, normalise(text))
            for i in range(start, min(start + ITEMS_PER_CALL, items))
            for text in [f"{KINDS[i % 3].value} statement {i}: the user works on topic {i % 97}"]
        ]
        await store.remember(target, batch, "s", "m", T0 + timedelta(seconds=start), new_id)
    cited = [
        CitedDocumentRecord(f"doc-{d:05d}", f"kb-{d % 5}", f"document-{d:05d}.pdf") for d in range(documents)
    ]
    for turn in range(2):
        await store.record_citations(target, f"turn-{turn}", cited, T0 + timedelta(minutes=turn))
    for u in range(1, users):
        owner = Owner(TENANT, f"user-{u:04d}")
        texts = [f"fact {i} of user {u}" for i in range(10)]
        await store.remember(
            owner, [NewItem(KINDS[i % 3], t, normalise(t)) for i, t in enumerate(texts)], "", "", T0, new_id
        )
        docs = [CitedDocumentRecord(f"doc-{d:05d}", "kb-0", "") for d in range(u % 50, u % 50 + 5)]
        for turn in range(2):
            await store.record_citations(owner, f"turn-{turn}", docs, T0)
    return target.user_id


def session_messages() -> list[SessionMessage]:
    messages: list[SessionMessage] = []
    for t in range(SESSION_TURNS):
        stored = {"__stored": True, "__refId": f"ref-{t:03d}", "__summary": f"{40 + t} rows", "__hint": "x"}
        raw = (
            json.dumps({"error": "index temporarily unavailable"})
            if t % 4 == 3
            else json.dumps(
                {"chunks": [f"passage {t}.{k} about expense policy clause {k}" * 4 for k in range(6)]}
            )
        )
        messages += [
            SessionMessage(f"u{t}", "user", f"Question {t}: what does the policy say about item {t}? " * 3),
            SessionMessage(f"a{t}c", "assistant", "", tool_call_ids=(f"c{t}a", f"c{t}b")),
            SessionMessage(
                f"r{t}a", "tool", json.dumps(stored), tool_call_id=f"c{t}a", tool_name="doc_retrieval"
            ),
            SessionMessage(f"r{t}b", "tool", raw, tool_call_id=f"c{t}b", tool_name="grep_chunks"),
            SessionMessage(
                f"a{t}", "assistant", f"Answer {t}: clause {t} allows up to {t * 100} CNY [[c1]]. " * 8
            ),
        ]
    return messages


HANDOFF_JSON = json.dumps(
    {
        "phases_done": [
            {
                "title": f"Questions {i * 5}-{i * 5 + 4}",
                "summary": f"Read clauses {i * 5}-{i * 5 + 4}; caps found.",
            }
            for i in range(3)
        ],
        "abandoned_paths": [{"approach": "grep_chunks", "reason": "index temporarily unavailable"}],
        "key_facts": ["Clause 3 caps meals at 300 CNY", "Travel needs approval above 5000 CNY"],
        "open_questions": ["travel insurance?"],
    }
)


async def modelhub_channel(tmp: Path, provider: Any) -> Any:
    from knowsphere_modelhub.adapters.http import ProviderHttp
    from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
    from knowsphere_modelhub.adapters.sql_store import SqlModelStore
    from knowsphere_modelhub.api.grpc import build_binding as modelhub_binding
    from knowsphere_modelhub.domain.providers import PROVIDERS
    from knowsphere_modelhub.domain.registry import Registry
    from knowsphere_modelhub.domain.secrets import verify_master_key
    from knowsphere_modelhub.settings import Settings as HubSettings
    from knowsphere_runtime.secrets import KeyRing
    from knowsphere_telemetry.langfuse import NoopLlmObserver

    settings = HubSettings(
        data_dir=tmp,
        master_key="bench-master-key-0123456789abcdef",  # type: ignore[arg-type]
        provider_backoff_seconds=0.01,
        local_embedding_enabled=False,
        egress=provider.egress(),  # the scripted model is on loopback
    )
    store = SqlModelStore(settings.sqlalchemy_url())
    await store.open()
    keyring = KeyRing.from_strings(settings.master_key.get_secret_value())
    await verify_master_key(store, keyring)
    registry = Registry(store, keyring, PROVIDERS, {}, egress=settings.egress)
    http = ProviderHttp.from_settings(settings)
    binding = modelhub_binding(
        registry, {"openai": OpenAICompatibleAdapter(http, PROVIDERS)}, settings, NoopLlmObserver()
    )
    return serving("modelhub", binding=binding), store, http


def as_proto(message: SessionMessage) -> mpb.SessionMessage:
    return mpb.SessionMessage(
        id=message.id,
        role=SessionMessageRole.parse(message.role).to_proto(),
        content=message.content,
        tool_call_ids=list(message.tool_call_ids),
        tool_call_id=message.tool_call_id,
        tool_name=message.tool_name,
    )


async def bench_compaction(tmp: Path) -> dict[str, Any]:
    """CompactSession through gRPC: memory with modelhub (scripted model), then memory without a model."""
    sys.path.insert(0, str(REPO / "services" / "modelhub" / "tests"))
    from scripted_provider import ScriptedProvider, openai_text_stream

    provider = ScriptedProvider()
    provider.start()
    messages = session_messages()
    total = sum(m.tokens for m in messages)
    window = int(total / TRIGGER_SHARE)
    request = mpb.CompactSessionRequest(
        messages=[as_proto(m) for m in messages], context_window=window, trigger_prompt_tokens=total
    )
    serving_hub, hub_store, http = await modelhub_channel(tmp, provider)
    store = SqlMemoryStore(f"sqlite+aiosqlite:///{tmp}/compaction.db")
    await store.open()
    settings = Settings(data_dir=tmp)
    try:
        async with serving_hub as hub:
            hub_client = ModelHubClient(hub)
            with_model = build_binding(settings=settings, store=store, modelhub=hub_client)
            without_model = build_binding(settings=settings, store=store)
            async with (
                serving("memory", binding=with_model) as model_channel,
                serving("memory", binding=without_model) as extract_channel,
            ):
                with bound_identity(Identity(TENANT, "user-0000")):
                    model = await hub_client.create_model(
                        hpb.CreateModelRequest(
                            display_name="scripted",
                            provider_id="custom",
                            model_name="scripted-model",
                            types=[hpb.MODEL_TYPE_KNOWLEDGE_QA],
                            base_url=f"{provider.url}/v1",
                            api_key="sk-bench-0000000001",
                        )
                    )
                    pieces = [HANDOFF_JSON[i : i + 40] for i in range(0, len(HANDOFF_JSON), 40)]
                    provider.script("/v1/chat/completions", openai_text_stream(pieces))
                    request.session_id, request.model_id = "bench-model", model.id
                    start = time.perf_counter()
                    result = await MemoryClient(model_channel).compact_session(request)
                    with_model_ms = (time.perf_counter() - start) * 1000
                    request.session_id, request.model_id = "bench-extract", ""
                    start = time.perf_counter()
                    degraded = await MemoryClient(extract_channel).compact_session(request)
                    extract_ms = (time.perf_counter() - start) * 1000
    finally:
        await store.close()
        await http.close()
        await hub_store.close()
        provider.stop()
    assert result.compacted and degraded.compacted and degraded.degraded
    sent = provider.requests_to("/v1/chat/completions")
    archived = [m.id for m in messages].index(result.summary.summary_upto_message_id) + 1
    return {
        "messages": len(messages),
        "session_tokens": total,
        "context_window": window,
        "with_model_ms": round(with_model_ms, 1),
        "with_model_degraded": result.degraded,
        "degraded_reason": result.degraded_reason,
        "archived_messages": archived,
        "kept_messages": len(messages) - archived,
        "window_share_after": round((result.kept_tokens + result.handoff_tokens) / window, 3),
        "result_refs": len(result.summary.handoff.result_refs),
        "model_requests": len(sent),
        "extract_ms": round(extract_ms, 1),
        "extract_window_share_after": round((degraded.kept_tokens + degraded.handoff_tokens) / window, 3),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        store = SqlMemoryStore(f"sqlite+aiosqlite:///{tmp}/memory.db")
        await store.open()
        start = time.perf_counter()
        user = await populate(store, args.users, args.items, args.documents)
        populate_s = time.perf_counter() - start
        print(
            f"populated {args.users} users ({args.items} items, {args.documents} frequent documents for one) "
            f"in {populate_s:.1f} s"
        )
        settings = Settings(data_dir=tmp)
        async with serving("memory", binding=build_binding(settings=settings, store=store)) as channel:
            memory = MemoryClient(channel)
            with bound_identity(Identity(TENANT, user)):
                first = (
                    await memory.get_asker_background(mpb.GetAskerBackgroundRequest(language="en"))
                ).background
                frequent = await memory.list_frequent_documents(mpb.ListFrequentDocumentsRequest(page_size=1))
                assert first.rendered and frequent.documents[0].hit_count >= 2
                background = await timed(
                    args.calls,
                    lambda _: memory.get_asker_background(mpb.GetAskerBackgroundRequest(language="en")),
                )
                remember = await timed(
                    args.calls,
                    lambda i: memory.remember(
                        mpb.RememberRequest(
                            items=[
                                mpb.NewMemoryItem(kind=mpb.MEMORY_ITEM_KIND_FACT, content=f"bench fact {i}")
                            ],
                            session_id="bench",
                            source_message_id=f"m{i}",
                        )
                    ),
                )
        await store.close()
        print(
            f"GetAskerBackground p50 {background['p50_ms']} ms, p95 {background['p95_ms']} ms "
            f"({len(first.profile)} profile, {len(first.interests)} interests, "
            f"{len(first.frequent_documents)} documents rendered)"
        )
        print(f"Remember           p50 {remember['p50_ms']} ms, p95 {remember['p95_ms']} ms")
        compaction = await bench_compaction(tmp)
        print(
            f"compaction of {compaction['messages']} messages ({compaction['session_tokens']} tokens, window "
            f"{compaction['context_window']}): {compaction['with_model_ms']} ms with the scripted model, "
            f"window share after {compaction['window_share_after']}; extract without model "
            f"{compaction['extract_ms']} ms, share {compaction['extract_window_share_after']}"
        )
    return {
        "bench": "memory",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "store": "sqlite",
        "users": args.users,
        "items_one_user": args.items,
        "frequent_documents_one_user": args.documents,
        "populate_s": round(populate_s, 1),
        "get_asker_background": background,
        "remember": remember,
        "background_p95_goal_ms": 5.0,
        "background_p95_met": background["p95_ms"] < 5.0,
        "compaction": compaction,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=500)
    print(json.dumps(asyncio.run(main(parser.parse_args())), ensure_ascii=False))
