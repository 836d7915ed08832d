"""Conformance suite for modelhub's ``ModelStore``: every backend must pass it.

Runs against SQLite (a file per test) always, and against PostgreSQL when one answers at
``KS_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``, trust auth):
each test gets a fresh database ``ks_test_<random>`` that is dropped afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from knowsphere.modelhub.v1.modelhub_enums import ModelConsumerKind, ModelType
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.domain.ports import ModelReferenced, ModelStore, Usage
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord

KB = ModelConsumerKind.KNOWLEDGE_BASE
AGENT = ModelConsumerKind.AGENT
T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[ModelStore]:
    if request.param == "sqlite":
        sql_store = SqlModelStore(f"sqlite+aiosqlite:///{tmp_path}/modelhub.db")
        await sql_store.open()
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("ModelStore"):
        sql_store = SqlModelStore(url)
        await sql_store.open()
        try:
            yield sql_store
        finally:
            await sql_store.close()


def record(
    model_id: str,
    tenant_id: str = "tenant-a",
    *,
    types: frozenset[ModelType] = frozenset({ModelType.KNOWLEDGE_QA}),
    provider_id: str = "openai",
    at: datetime = T0,
    builtin: bool = False,
) -> ModelRecord:
    return ModelRecord(
        id=model_id,
        tenant_id=tenant_id,
        display_name=f"Model {model_id}",
        provider_id=provider_id,
        model_name="gpt-4o",
        types=types,
        base_url="",
        parameters=ModelParams(),
        api_key_ciphertext=None,
        api_key_hint="",
        builtin=builtin,
        description="",
        create_time=at,
        update_time=at,
    )


def builtin(model_id: str = "builtin-minilm", at: datetime = T0) -> ModelRecord:
    return record(
        model_id, "", types=frozenset({ModelType.EMBEDDING}), provider_id="local", at=at, builtin=True
    )


async def list_all(store: ModelStore, tenant_id: str, page_size: int, **filters: object) -> list[str]:
    ids: list[str] = []
    token = ""
    for _ in range(100):
        page = await store.list(
            tenant_id,
            model_type=filters.get("model_type"),  # type: ignore[arg-type]
            provider_id=filters.get("provider_id"),  # type: ignore[arg-type]
            page_size=page_size,
            page_token=token,
        )
        assert len(page.records) <= page_size
        ids.extend(r.id for r in page.records)
        token = page.next_page_token
        if not token:
            return ids
    raise AssertionError("pagination did not end")


async def test_create_then_get_returns_every_field(store):
    full = replace(
        record("m-full", types=frozenset({ModelType.EMBEDDING, ModelType.RERANK})),
        display_name="Embedder «中文»",
        base_url="https://example.test/v1",
        parameters=ModelParams(
            temperature=0.3,
            max_tokens=512,
            context_window=32000,
            embedding_dimension=1024,
            extra={"enable_thinking": False, "nested": {"a": [1, 2]}},
        ),
        api_key_ciphertext="v1:abcd1234:bm9uY2U=:ZGF0YQ==",
        api_key_hint="sk-…a1b2",
        description="for tests",
        update_time=T0 + timedelta(seconds=5),
    )
    await store.create(full)
    got = await store.get("tenant-a", "m-full")
    assert got == full
    assert got is not None and got.create_time.tzinfo is not None
    assert await store.get("tenant-a", "nope") is None


async def test_a_tenant_never_sees_another_tenants_model(store):
    await store.create(record("m-a", "tenant-a"))
    await store.create(record("m-b", "tenant-b"))

    assert await store.get("tenant-b", "m-a") is None
    assert await list_all(store, "tenant-b", 10) == ["m-b"]
    assert await list_all(store, "tenant-a", 10) == ["m-a"]

    with pytest.raises(LookupError):
        await store.update(replace(record("m-a", "tenant-b"), display_name="hijacked"))
    assert not await store.delete("tenant-b", "m-a")
    unchanged = await store.get("tenant-a", "m-a")
    assert unchanged is not None and unchanged.display_name == "Model m-a"


async def test_builtin_models_are_visible_to_every_tenant_and_listed_first(store):
    await store.create(record("m-a", "tenant-a", at=T0 - timedelta(days=1)))
    await store.upsert_builtin(builtin(at=T0))
    for tenant in ("tenant-a", "tenant-b"):
        got = await store.get(tenant, "builtin-minilm")
        assert got is not None and got.builtin and got.tenant_id == ""
    assert await list_all(store, "tenant-a", 10) == ["builtin-minilm", "m-a"]
    assert await list_all(store, "tenant-b", 10) == ["builtin-minilm"]
    # A tenant cannot delete or update a built-in model.
    assert not await store.delete("tenant-a", "builtin-minilm")
    with pytest.raises(LookupError):
        await store.update(builtin())


async def test_upsert_builtin_is_idempotent_and_keeps_the_creation_time(store):
    await store.upsert_builtin(builtin(at=T0))
    await store.upsert_builtin(builtin(at=T0))
    later = replace(
        builtin(at=T0 + timedelta(hours=1)), display_name="MiniLM v2", create_time=T0 + timedelta(hours=1)
    )
    await store.upsert_builtin(later)
    assert await list_all(store, "tenant-a", 10) == ["builtin-minilm"]
    got = await store.get("tenant-a", "builtin-minilm")
    assert got is not None
    assert got.display_name == "MiniLM v2"
    assert got.create_time == T0
    assert got.update_time == T0 + timedelta(hours=1)
    with pytest.raises(ValueError):
        await store.upsert_builtin(record("m-not-builtin"))


async def test_pagination_is_stable_complete_and_ordered(store):
    await store.upsert_builtin(builtin(at=T0 + timedelta(days=9)))
    # Three records share a creation time: the id breaks the tie.
    times = [T0 + timedelta(minutes=m) for m in (5, 1, 3, 3, 3, 2, 4)]
    for index, at in enumerate(times):
        await store.create(record(f"m-{index}", at=at))
    await store.create(record("other-tenant", "tenant-b", at=T0))
    expected = ["builtin-minilm"] + [
        f"m-{i}" for i, _ in sorted(enumerate(times), key=lambda pair: (pair[1], f"m-{pair[0]}"))
    ]

    for size in (1, 2, 3, 8, 50):
        assert await list_all(store, "tenant-a", size) == expected

    # Changes between pages neither repeat nor skip the records that remain.
    first = await store.list("tenant-a", model_type=None, provider_id=None, page_size=3, page_token="")
    assert [r.id for r in first.records] == expected[:3]
    assert await store.delete("tenant-a", expected[1])
    await store.create(record("m-late", at=T0 + timedelta(days=1)))
    rest: list[str] = []
    token = first.next_page_token
    while token:
        page = await store.list("tenant-a", model_type=None, provider_id=None, page_size=3, page_token=token)
        rest.extend(r.id for r in page.records)
        token = page.next_page_token
    assert rest == [*expected[3:], "m-late"]


async def test_list_filters_by_type_and_provider_and_rejects_foreign_tokens(store):
    await store.upsert_builtin(builtin())
    await store.create(record("chat", types=frozenset({ModelType.KNOWLEDGE_QA})))
    await store.create(
        record("vision", types=frozenset({ModelType.KNOWLEDGE_QA, ModelType.VLM}), provider_id="dashscope")
    )
    await store.create(record("embed", types=frozenset({ModelType.EMBEDDING}), provider_id="jina"))
    await store.create(record("rerank", types=frozenset({ModelType.RERANK}), provider_id="jina"))

    assert await list_all(store, "tenant-a", 1, model_type=ModelType.KNOWLEDGE_QA) == ["chat", "vision"]
    assert await list_all(store, "tenant-a", 1, model_type=ModelType.VLM) == ["vision"]
    assert await list_all(store, "tenant-a", 1, model_type=ModelType.EMBEDDING) == ["builtin-minilm", "embed"]
    assert await list_all(store, "tenant-a", 1, provider_id="jina") == ["embed", "rerank"]
    assert await list_all(store, "tenant-a", 5, model_type=ModelType.RERANK, provider_id="openai") == []

    page = await store.list(
        "tenant-a", model_type=ModelType.KNOWLEDGE_QA, provider_id=None, page_size=1, page_token=""
    )
    assert page.next_page_token
    with pytest.raises(ValueError):
        await store.list(
            "tenant-a",
            model_type=ModelType.EMBEDDING,
            provider_id=None,
            page_size=1,
            page_token=page.next_page_token,
        )
    with pytest.raises(ValueError):
        await store.list("tenant-a", model_type=None, provider_id=None, page_size=1, page_token="not-a-token")


async def test_update_changes_fields_and_keeps_identity(store):
    await store.create(record("m-1"))
    changed = replace(
        record("m-1"),
        display_name="Renamed",
        model_name="gpt-4.1",
        types=frozenset({ModelType.KNOWLEDGE_QA, ModelType.VLM}),
        base_url="https://proxy.test/v1",
        parameters=ModelParams(temperature=0.1),
        api_key_ciphertext="v1:abcd1234:bm9uY2U=:ZGF0YQ==",
        api_key_hint="…wxyz",
        description="updated",
        create_time=T0 + timedelta(days=3),  # ignored: the creation time never changes
        update_time=T0 + timedelta(days=3),
    )
    await store.update(changed)
    got = await store.get("tenant-a", "m-1")
    assert got == replace(changed, create_time=T0)
    with pytest.raises(LookupError):
        await store.update(record("missing"))


async def test_delete_removes_the_model_once(store):
    await store.create(record("m-1"))
    assert await store.delete("tenant-a", "m-1")
    assert await store.get("tenant-a", "m-1") is None
    assert not await store.delete("tenant-a", "m-1")
    assert await list_all(store, "tenant-a", 10) == []


async def test_defaults_per_tenant_and_type(store):
    await store.upsert_builtin(builtin())
    await store.create(record("chat-a", "tenant-a", types=frozenset({ModelType.KNOWLEDGE_QA, ModelType.VLM})))
    await store.create(record("chat-a2", "tenant-a"))
    assert await store.get_default("tenant-a", ModelType.KNOWLEDGE_QA) is None

    await store.set_default("tenant-a", ModelType.KNOWLEDGE_QA, "chat-a")
    await store.set_default("tenant-a", ModelType.VLM, "chat-a")
    await store.set_default("tenant-a", ModelType.EMBEDDING, "builtin-minilm")
    await store.set_default("tenant-b", ModelType.EMBEDDING, "builtin-minilm")
    assert await store.get_default("tenant-a", ModelType.KNOWLEDGE_QA) == "chat-a"
    assert await store.defaults_of("tenant-a", "chat-a") == [ModelType.KNOWLEDGE_QA, ModelType.VLM]
    assert await store.get_default("tenant-b", ModelType.KNOWLEDGE_QA) is None
    assert await store.defaults_of("tenant-b", "chat-a") == []

    await store.set_default("tenant-a", ModelType.KNOWLEDGE_QA, "chat-a2")
    assert await store.get_default("tenant-a", ModelType.KNOWLEDGE_QA) == "chat-a2"
    assert await store.defaults_of("tenant-a", "chat-a") == [ModelType.VLM]

    # A model that is a default cannot be deleted; the default is not removed behind the caller's back.
    with pytest.raises(ModelReferenced):
        await store.delete("tenant-a", "chat-a")
    assert await store.get("tenant-a", "chat-a") is not None

    await store.set_default("tenant-a", ModelType.VLM, "")
    assert await store.get_default("tenant-a", ModelType.VLM) is None
    assert await store.delete("tenant-a", "chat-a")


async def test_defaults_of_lists_types_in_proto_order_not_alphabetically(store):
    types = frozenset({ModelType.EMBEDDING, ModelType.RERANK, ModelType.KNOWLEDGE_QA})
    await store.create(record("all-in-one", types=types))
    for model_type in (ModelType.KNOWLEDGE_QA, ModelType.RERANK, ModelType.EMBEDDING):
        await store.set_default("tenant-a", model_type, "all-in-one")
    # Proto numbers 1, 2, 3; alphabetically it would be embedding, knowledge_qa, rerank.
    assert await store.defaults_of("tenant-a", "all-in-one") == [
        ModelType.EMBEDDING,
        ModelType.RERANK,
        ModelType.KNOWLEDGE_QA,
    ]


async def test_usages_are_idempotent_and_block_deletion(store):
    await store.create(record("embed", types=frozenset({ModelType.EMBEDDING})))
    kb = Usage("embed", KB, "kb-1", "HR handbook")
    await store.put_usage("tenant-a", kb)
    await store.put_usage("tenant-a", kb)
    await store.put_usage("tenant-a", replace(kb, consumer_name="HR handbook 2025"))
    await store.put_usage("tenant-a", Usage("embed", AGENT, "kb-1", "Same id, other kind"))
    usages = await store.list_usages("tenant-a", "embed")
    assert sorted((u.consumer_kind, u.consumer_id, u.consumer_name) for u in usages) == [
        (AGENT, "kb-1", "Same id, other kind"),
        (KB, "kb-1", "HR handbook 2025"),
    ]
    assert await store.list_usages("tenant-b", "embed") == []

    with pytest.raises(ModelReferenced):
        await store.delete("tenant-a", "embed")
    assert await store.delete_usage("tenant-a", "embed", KB, "kb-1")
    assert not await store.delete_usage("tenant-a", "embed", KB, "kb-1")
    assert not await store.delete_usage("tenant-b", "embed", AGENT, "kb-1")
    assert await store.delete_usage("tenant-a", "embed", AGENT, "kb-1")
    assert await store.list_usages("tenant-a", "embed") == []
    assert await store.delete("tenant-a", "embed")


async def test_settings_are_stored_and_overwritten(store):
    assert await store.get_setting("master_key_check") is None
    await store.put_setting("master_key_check", "v1:one")
    await store.put_setting("other", "x")
    await store.put_setting("master_key_check", "v1:two")
    assert await store.get_setting("master_key_check") == "v1:two"
    assert await store.get_setting("other") == "x"


async def test_api_keys_are_listed_across_tenants_and_swapped_only_if_unchanged(store):
    await store.create(replace(record("m-a", "tenant-a"), api_key_ciphertext="v1:old:a"))
    await store.create(replace(record("m-b", "tenant-b"), api_key_ciphertext="v1:old:b"))
    await store.create(record("m-none", "tenant-a"))
    keys = await store.list_api_keys()
    assert sorted((k.tenant_id, k.model_id, k.ciphertext) for k in keys) == [
        ("tenant-a", "m-a", "v1:old:a"),
        ("tenant-b", "m-b", "v1:old:b"),
    ]
    assert await store.replace_api_key("m-a", "v1:old:a", "v1:new:a")
    assert not await store.replace_api_key("m-b", "v1:stale", "v1:new:b")
    got_a, got_b = await store.get("tenant-a", "m-a"), await store.get("tenant-b", "m-b")
    assert got_a is not None and got_a.api_key_ciphertext == "v1:new:a"
    assert got_a.update_time == T0
    assert got_b is not None and got_b.api_key_ciphertext == "v1:old:b"
