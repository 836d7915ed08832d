"""The model registry as the API uses it: validation, encrypted keys, resolution order, delete guards."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.modelhub.v1.modelhub_enums import (
    DefaultModelSource,
    ModelConsumerKind,
    ModelErrorCode,
    ModelType,
)
from knowsphere_egress import EgressPolicy
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.in_use import ModelInUse
from knowsphere_modelhub.domain.ports import Usage
from knowsphere_modelhub.domain.records import ModelParams, ModelRecord
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_runtime.secrets import KeyRing

MASTER_KEY = "test-master-key-0123456789abcdef"
KDF_SALT = b"registry-test-salt"  # a passphrase MASTER_KEY is stretched with the installation's salt
SECRET = "sk-proj-VerySecretValue0123456789xyzW"
KB = ModelConsumerKind.KNOWLEDGE_BASE
AGENT = ModelConsumerKind.AGENT


@dataclass(frozen=True)
class FakeProvider:
    id: str
    default_base_url: str
    requires_api_key: bool
    model_types: frozenset[ModelType]
    local: bool = False


PROVIDERS = {
    "openai": FakeProvider(
        "openai",
        "https://api.openai.test/v1",
        True,
        frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA, ModelType.VLM, ModelType.ASR}),
    ),
    "jina": FakeProvider(
        "jina", "https://api.jina.test/v1", True, frozenset({ModelType.EMBEDDING, ModelType.RERANK})
    ),
    "ollama": FakeProvider(
        "ollama",
        "http://127.0.0.1:11434/v1",
        False,
        frozenset({ModelType.EMBEDDING, ModelType.KNOWLEDGE_QA}),
        True,
    ),
    "custom": FakeProvider("custom", "", False, frozenset(ModelType)),
    "local": FakeProvider("local", "", False, frozenset({ModelType.EMBEDDING}), True),
}


class Clock:
    """Strictly increasing times, so creation order is list order."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> datetime:
        return datetime(2025, 6, 1, tzinfo=UTC) + timedelta(seconds=next(self._ticks))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "modelhub.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SqlModelStore]:
    store = SqlModelStore(f"sqlite+aiosqlite:///{db_path}")
    await store.open()
    yield store
    await store.close()


def make_registry(
    store: SqlModelStore, env: Mapping[str, str] | None = None, egress: EgressPolicy | None = None
) -> Registry:
    return Registry(
        store, KeyRing(MASTER_KEY, salt=KDF_SALT), PROVIDERS, env or {}, clock=Clock(), egress=egress
    )


@pytest.fixture
def registry(store: SqlModelStore) -> Registry:
    return make_registry(store)


def chat(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "display_name": "GPT-4o",
        "provider_id": "openai",
        "model_name": "gpt-4o",
        "types": [ModelType.KNOWLEDGE_QA, ModelType.VLM],
        "api_key": SECRET,
    }
    spec.update(overrides)
    return spec


def embedder(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "display_name": "Jina v3",
        "provider_id": "jina",
        "model_name": "jina-embeddings-v3",
        "types": [ModelType.EMBEDDING],
        "api_key": "jina_0123456789abcdefABCD",
        "parameters": ModelParams(embedding_dimension=1024),
    }
    spec.update(overrides)
    return spec


MINILM = ModelRecord(
    id="builtin-minilm-l6-v2",
    tenant_id="",
    display_name="all-MiniLM-L6-v2 (built in)",
    provider_id="local",
    model_name="all-MiniLM-L6-v2",
    types=frozenset({ModelType.EMBEDDING}),
    base_url="",
    parameters=ModelParams(embedding_dimension=384),
    api_key_ciphertext=None,
    api_key_hint="",
    builtin=True,
    description="Runs on CPU inside modelhub.",
    create_time=datetime(2000, 1, 1, tzinfo=UTC),
    update_time=datetime(2000, 1, 1, tzinfo=UTC),
)


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (chat(display_name=""), "display_name", "1–200"),
        (chat(display_name="x" * 201), "display_name", "1–200"),
        (chat(provider_id="nope"), "provider_id", "not a known provider"),
        (chat(provider_id="local"), "provider_id", "built-in models only"),
        (chat(model_name="  "), "model_name", "required"),
        (chat(types=[]), "types", "at least one"),
        (chat(types=[ModelType.RERANK]), "types", "does not offer rerank"),
        (chat(types=[0]), "types", "must be one of"),
        (chat(provider_id="custom", api_key=None), "base_url", "required for provider 'custom'"),
        (chat(provider_id="custom", base_url="ftp://files.test"), "base_url", "http:// or https://"),
        (chat(base_url="not a url"), "base_url", "http:// or https://"),
        # The form of the egress guard's base-URL check: credentials would go to whoever the rest of
        # the URL names, a query or fragment would swallow the paths appended to it.
        (chat(provider_id="custom", base_url="http://evil.test@llm.test/v1"), "base_url", "credentials"),
        (chat(provider_id="custom", base_url="https://llm.test/v1?x=/"), "base_url", "query"),
        (chat(provider_id="custom", base_url="https://llm.test/v1#"), "base_url", "fragment"),
        # Where a tenant's model may not point (the egress guard, without an operator allow-list).
        (chat(provider_id="custom", base_url="http://169.254.169.254/v1"), "base_url", "may not be called"),
        (chat(provider_id="custom", base_url="http://127.0.0.1/v1"), "base_url", "may not be called"),
        (
            chat(provider_id="custom", base_url="http://[::ffff:127.0.0.1]/v1"),
            "base_url",
            "may not be called",
        ),
        (chat(provider_id="custom", base_url="http://10.0.0.7/v1"), "base_url", "may not be called"),
        (chat(provider_id="custom", base_url="http://llm.test:7233/v1"), "base_url", "may not be called"),
        (chat(base_url="http://metadata.google.internal/v1"), "base_url", "may not be called"),
        (chat(api_key=None), "api_key", "required for provider 'openai'"),
        (chat(api_key="   "), "api_key", "required"),
        (chat(parameters=ModelParams(temperature=3)), "parameters.temperature", "between 0 and 2"),
        (chat(parameters=ModelParams(max_tokens=0)), "parameters.max_tokens", "at least 1"),
        # Extra parameters shape one answer; none may change where it goes, what it may do or how
        # many answers are made.
        (chat(parameters=ModelParams(extra={"n": 50})), "parameters.extra.n", "allowed: "),
        (chat(parameters=ModelParams(extra={"tools": []})), "parameters.extra.tools", "allowed: "),
        (chat(parameters=ModelParams(extra={"stop": ["x" * 5000]})), "parameters.extra", "limit is 4096"),
        (embedder(parameters=ModelParams()), "parameters.embedding_dimension", "required for embedding"),
        (
            embedder(parameters=ModelParams(embedding_dimension=0)),
            "parameters.embedding_dimension",
            "1 and 8192",
        ),
        (
            embedder(parameters=ModelParams(embedding_dimension=8193)),
            "parameters.embedding_dimension",
            "1 and 8192",
        ),
    ],
)
async def test_invalid_input_names_the_field(registry, store, spec, field, words):
    with pytest.raises(ModelError) as caught:
        await registry.create("tenant-a", **spec)
    error = caught.value
    assert error.code == ModelErrorCode.INVALID_INPUT
    assert error.grpc_status == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field == field
    assert words in error.detail
    assert "evil.test" not in error.detail  # a URL with credentials is not echoed
    assert error.user_message().startswith("Invalid request: ")
    # Nothing half-written is left behind.
    assert (await registry.list("tenant-a")).records == []


async def test_valid_models_of_each_kind_are_accepted(registry, store):
    custom = await registry.create(
        "tenant-a", **chat(provider_id="custom", base_url=" https://vllm.example/v1/ ", api_key=None)
    )
    assert custom.base_url == "https://vllm.example/v1"
    # An internal server on its own port, once the operator allow-lists its network and port.
    allowing = make_registry(
        store,
        egress=EgressPolicy(allow_networks=("10.0.0.0/8",), allowed_ports=frozenset({443, 8000})),  # type: ignore[arg-type]
    )
    internal = await allowing.create(
        "tenant-a", **chat(provider_id="custom", base_url="http://10.1.2.3:8000/v1", api_key=None)
    )
    assert internal.base_url == "http://10.1.2.3:8000/v1"
    assert custom.api_key_hint == "" and custom.api_key_ciphertext is None
    local = await registry.create(
        "tenant-a", **chat(provider_id="ollama", types=[ModelType.KNOWLEDGE_QA], api_key=None)
    )
    assert registry.call_target(local).base_url == "http://127.0.0.1:11434/v1"
    assert (await registry.create("tenant-a", **embedder())).parameters.embedding_dimension == 1024


# --- keys --------------------------------------------------------------------------------------------


async def test_api_key_is_stored_encrypted_and_never_readable_back(registry, store, db_path):
    created = await registry.create("tenant-a", **chat())
    assert created.api_key_hint == "sk-…xyzW"

    # The raw database: the key appears in no table, in no form SQLite keeps in the file.
    await store.close()
    with sqlite3.connect(db_path) as raw:
        rows = raw.execute("SELECT * FROM models WHERE id = ?", (created.id,)).fetchall()
        assert len(rows) == 1
        row_text = " ".join(str(value) for value in rows[0])
        assert SECRET not in row_text
        assert SECRET[-8:] not in row_text
        every_table = [name for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in every_table:
            for row in raw.execute(f'SELECT * FROM "{table}"'):  # names from sqlite_master
                assert SECRET not in " ".join(str(value) for value in row), table
    for path in db_path.parent.glob("modelhub.db*"):  # the WAL too
        assert SECRET.encode() not in path.read_bytes(), path.name
    await store.open()

    # Nothing the API reads returns the key: records carry the ciphertext and hint only.
    fetched = await registry.get("tenant-a", created.id)
    assert SECRET not in repr(fetched)
    listed = (await registry.list("tenant-a")).records
    assert all(SECRET not in repr(r) for r in listed)
    # Only a call target (never stored, never logged) holds it.
    target = registry.call_target(fetched)
    assert target.api_key == SECRET
    assert SECRET not in repr(target)


async def test_update_replaces_or_removes_the_key(registry):
    created = await registry.create("tenant-a", **chat(provider_id="custom", base_url="https://llm.test/v1"))
    replaced = await registry.update("tenant-a", created.id, api_key="sk-another-key-000000000000NEWK")
    assert replaced.api_key_hint == "sk-…NEWK"
    assert registry.call_target(replaced).api_key == "sk-another-key-000000000000NEWK"
    removed = await registry.update("tenant-a", created.id, api_key="")
    assert removed.api_key_ciphertext is None and removed.api_key_hint == ""
    assert registry.call_target(await registry.get("tenant-a", created.id)).api_key is None

    openai = await registry.create("tenant-a", **chat())
    with pytest.raises(ModelError) as caught:
        await registry.update("tenant-a", openai.id, api_key="")
    assert caught.value.field == "api_key"


async def test_moving_a_model_to_another_host_needs_its_key_again(registry):
    created = await registry.create("tenant-a", **chat(provider_id="custom", base_url="https://llm.test/v1"))

    # An attacker with the tenant's admin token points the model at a host of theirs: the stored key
    # must not follow it there.
    with pytest.raises(ModelError) as caught:
        await registry.update("tenant-a", created.id, base_url="https://collector.example/v1")
    assert caught.value.field == "api_key" and "requires the API key again" in str(caught.value)
    unchanged = await registry.get("tenant-a", created.id)
    assert unchanged.base_url == "https://llm.test/v1"
    assert registry.call_target(unchanged).api_key == SECRET

    # With the key given again (or removed), the move is made; the same host needs nothing new.
    moved = await registry.update(
        "tenant-a", created.id, base_url="https://llm2.test/v1", api_key="sk-another-key-000000000000NEWK"
    )
    assert registry.call_target(moved).api_key == "sk-another-key-000000000000NEWK"
    same = await registry.update("tenant-a", created.id, base_url="https://llm2.test/v1/", display_name="x")
    assert registry.call_target(same).api_key == "sk-another-key-000000000000NEWK"


# --- CRUD and tenancy ---------------------------------------------------------------------------------


async def test_update_changes_only_given_fields(registry):
    created = await registry.create("tenant-a", **chat(description="first"))
    updated = await registry.update(
        "tenant-a", created.id, display_name="GPT-4o (EU)", types=[ModelType.KNOWLEDGE_QA]
    )
    assert (updated.display_name, updated.types, updated.description) == (
        "GPT-4o (EU)",
        {ModelType.KNOWLEDGE_QA},
        "first",
    )
    assert updated.create_time == created.create_time < updated.update_time
    assert await registry.get("tenant-a", created.id) == updated
    with pytest.raises(ModelError) as caught:
        await registry.update("tenant-a", created.id, types=[ModelType.RERANK])
    assert caught.value.field == "types"


async def test_other_tenants_models_do_not_exist_for_a_tenant(registry):
    mine = await registry.create("tenant-a", **chat())
    for call in (
        registry.get("tenant-b", mine.id),
        registry.update("tenant-b", mine.id, display_name="x"),
        registry.delete("tenant-b", mine.id),
        registry.resolve("tenant-b", mine.id, ModelType.KNOWLEDGE_QA),
        registry.set_default("tenant-b", ModelType.KNOWLEDGE_QA, mine.id),
        registry.put_usage("tenant-b", Usage(mine.id, AGENT, "agent-1", "Helper")),
    ):
        with pytest.raises(ModelError) as caught:
            await call
        assert caught.value.code == ModelErrorCode.MODEL_NOT_FOUND
        assert caught.value.user_message() == f"Model {mine.id} does not exist."
    assert (await registry.list("tenant-b")).records == []


async def test_list_pages_and_rejects_bad_tokens(registry):
    await registry.register_builtin(MINILM)
    created = [await registry.create("tenant-a", **chat(display_name=f"m{i}")) for i in range(5)]
    first = await registry.list("tenant-a", page_size=4)
    second = await registry.list("tenant-a", page_size=4, page_token=first.next_page_token)
    assert [r.id for r in first.records + second.records] == [MINILM.id] + [r.id for r in created]
    assert second.next_page_token == ""
    with pytest.raises(ModelError) as caught:
        await registry.list("tenant-a", page_token="garbage")
    assert caught.value.field == "page_token"


# --- resolution -----------------------------------------------------------------------------------------

ENV = {
    "KS_MODELHUB_KNOWLEDGE_QA_PROVIDER": "openai",
    "KS_MODELHUB_KNOWLEDGE_QA_MODEL": "gpt-4o-mini",
    "KS_MODELHUB_KNOWLEDGE_QA_API_KEY": "sk-env-key-0123456789abcdefENVK",
    "KS_MODELHUB_KNOWLEDGE_QA_CONTEXT_WINDOW": "128000",
    "KS_MODELHUB_EMBEDDING_PROVIDER": "ollama",
    "KS_MODELHUB_EMBEDDING_MODEL": "bge-m3",
    "KS_MODELHUB_EMBEDDING_EMBEDDING_DIMENSION": "1024",
}


async def test_resolution_order_explicit_tenant_environment_builtin_none(store):
    registry = make_registry(store, ENV)
    await registry.register_builtin(MINILM)

    # Built-in default: only embeddings have one, and the environment comes before it.
    record, source = await registry.resolve("tenant-a", "", ModelType.EMBEDDING)
    assert (record.id, source) == ("env-embedding", DefaultModelSource.ENVIRONMENT)
    assert record.parameters.embedding_dimension == 1024
    assert registry.call_target(record).base_url == "http://127.0.0.1:11434/v1"
    without_env = make_registry(store)
    await without_env.register_builtin(MINILM)
    record, source = await without_env.resolve("tenant-a", "", ModelType.EMBEDDING)
    assert (record.id, source) == (MINILM.id, DefaultModelSource.BUILTIN)

    # Environment, with its key held in memory only.
    record, source = await registry.resolve("tenant-a", "", ModelType.KNOWLEDGE_QA)
    assert (record.id, source) == ("env-knowledge_qa", DefaultModelSource.ENVIRONMENT)
    assert record.parameters.context_window == 128000 and record.api_key_ciphertext is None
    assert registry.call_target(record).api_key == ENV["KS_MODELHUB_KNOWLEDGE_QA_API_KEY"]
    assert await store.list_api_keys() == []
    assert (await registry.get("tenant-a", "env-knowledge_qa")).model_name == "gpt-4o-mini"

    # Tenant default beats the environment, for that tenant only.
    mine = await registry.create("tenant-a", **chat())
    assert await registry.set_default("tenant-a", ModelType.KNOWLEDGE_QA, mine.id) == (
        mine,
        DefaultModelSource.TENANT,
    )
    record, source = await registry.resolve("tenant-a", "", ModelType.KNOWLEDGE_QA)
    assert (record.id, source) == (mine.id, DefaultModelSource.TENANT)
    assert (await registry.resolve("tenant-b", "", ModelType.KNOWLEDGE_QA))[0].id == "env-knowledge_qa"
    assert await registry.get_default("tenant-a", ModelType.KNOWLEDGE_QA) == (mine, DefaultModelSource.TENANT)

    # An explicit id beats everything.
    other = await registry.create("tenant-a", **chat(display_name="Other"))
    record, source = await registry.resolve("tenant-a", other.id, ModelType.KNOWLEDGE_QA)
    assert (record.id, source) == (other.id, None)
    assert (await registry.resolve("tenant-a", "env-knowledge_qa", ModelType.KNOWLEDGE_QA))[
        0
    ].id == "env-knowledge_qa"

    # Clearing the tenant default falls back to the environment again.
    assert await registry.set_default("tenant-a", ModelType.KNOWLEDGE_QA, "") == (
        await registry.get("tenant-a", "env-knowledge_qa"),
        DefaultModelSource.ENVIRONMENT,
    )

    # Nothing configured: a clear error that says how to add one.
    assert await registry.get_default("tenant-a", ModelType.RERANK) == (None, DefaultModelSource.NONE)
    with pytest.raises(ModelError) as caught:
        await registry.resolve("tenant-a", "", ModelType.RERANK)
    error = caught.value
    assert error.code == ModelErrorCode.NO_MODEL_CONFIGURED
    assert error.grpc_status == grpc.StatusCode.FAILED_PRECONDITION
    assert error.params["type"] == "rerank" and error.params["TYPE"] == "RERANK"
    assert error.user_message() == (
        "No rerank model is configured. Add one (POST /api/v1/models) and make it the default "
        "(PUT /api/v1/models/defaults/rerank), or set KS_MODELHUB_RERANK_PROVIDER and "
        "KS_MODELHUB_RERANK_MODEL."
    )


async def test_no_knowledge_qa_model_message_uses_the_type_name(registry):
    with pytest.raises(ModelError) as caught:
        await registry.resolve("tenant-a", "", ModelType.KNOWLEDGE_QA)
    assert "No knowledge_qa model is configured" in caught.value.user_message()
    assert "KS_MODELHUB_KNOWLEDGE_QA_PROVIDER" in caught.value.user_message()


async def test_wrong_type_and_unknown_id(registry):
    await registry.register_builtin(MINILM)
    with pytest.raises(ModelError) as caught:
        await registry.resolve("tenant-a", MINILM.id, ModelType.KNOWLEDGE_QA)
    error = caught.value
    assert error.code == ModelErrorCode.WRONG_MODEL_TYPE
    assert error.params["type"] == "knowledge_qa" and error.params["types"] == "embedding"
    assert error.user_message() == (
        f"Model '{MINILM.display_name}' ({MINILM.id}) cannot be used for knowledge_qa; "
        "it is registered for embedding."
    )
    with pytest.raises(ModelError) as caught:
        await registry.set_default("tenant-a", ModelType.KNOWLEDGE_QA, MINILM.id)
    assert caught.value.code == ModelErrorCode.WRONG_MODEL_TYPE
    with pytest.raises(ModelError) as caught:
        await registry.resolve("tenant-a", "model-does-not-exist", ModelType.EMBEDDING)
    assert caught.value.code == ModelErrorCode.MODEL_NOT_FOUND
    assert caught.value.model_id == "model-does-not-exist"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"KS_MODELHUB_VLM_PROVIDER": "openai"}, "KS_MODELHUB_VLM_MODEL"),
        ({"KS_MODELHUB_VLM_MODEL": "gpt-4o"}, "KS_MODELHUB_VLM_PROVIDER"),
        ({"KS_MODELHUB_VLM_PROVIDER": "nope", "KS_MODELHUB_VLM_MODEL": "m"}, "KS_MODELHUB_VLM_PROVIDER"),
        (
            {"KS_MODELHUB_RERANK_PROVIDER": "openai", "KS_MODELHUB_RERANK_MODEL": "m"},
            "KS_MODELHUB_RERANK_PROVIDER",
        ),
        (
            {"KS_MODELHUB_ASR_PROVIDER": "openai", "KS_MODELHUB_ASR_MODEL": "whisper-1"},
            "KS_MODELHUB_ASR_API_KEY",
        ),
        ({"KS_MODELHUB_ASR_PROVIDER": "custom", "KS_MODELHUB_ASR_MODEL": "w"}, "KS_MODELHUB_ASR_BASE_URL"),
        (
            {
                "KS_MODELHUB_EMBEDDING_PROVIDER": "ollama",
                "KS_MODELHUB_EMBEDDING_MODEL": "bge-m3",
                "KS_MODELHUB_EMBEDDING_EMBEDDING_DIMENSION": "lots",
            },
            "KS_MODELHUB_EMBEDDING_EMBEDDING_DIMENSION",
        ),
    ],
)
async def test_a_bad_environment_model_fails_at_start_naming_the_variable(store, env, variable):
    with pytest.raises(ModelError) as caught:
        make_registry(store, env)
    assert caught.value.field == variable
    assert variable in str(caught.value)


# --- delete guards -----------------------------------------------------------------------------------------


async def test_builtin_and_environment_models_cannot_be_changed_or_deleted(store):
    registry = make_registry(store, ENV)
    await registry.register_builtin(MINILM)
    for model_id, words in ((MINILM.id, "is built in"), ("env-knowledge_qa", "KS_MODELHUB_KNOWLEDGE_QA_*")):
        for call in (
            registry.delete("tenant-a", model_id),
            registry.update("tenant-a", model_id, display_name="x"),
        ):
            with pytest.raises(ModelInUse) as caught:
                await call
            assert caught.value.grpc_status == grpc.StatusCode.FAILED_PRECONDITION
            assert words in caught.value.detail and model_id in caught.value.detail
    assert await store.get("tenant-a", MINILM.id) is not None


async def test_a_default_model_cannot_be_deleted_and_the_message_names_the_types(registry):
    mine = await registry.create("tenant-a", **chat())
    await registry.set_default("tenant-a", ModelType.KNOWLEDGE_QA, mine.id)
    await registry.set_default("tenant-a", ModelType.VLM, mine.id)
    with pytest.raises(ModelInUse) as caught:
        await registry.delete("tenant-a", mine.id)
    error = caught.value
    assert error.grpc_status == grpc.StatusCode.FAILED_PRECONDITION
    assert error.detail == (
        f"Model 'GPT-4o' ({mine.id}) cannot be deleted: it is this tenant's default knowledge_qa and vlm "
        "model. First set another default model."
    )
    assert error.defaults == [ModelType.KNOWLEDGE_QA, ModelType.VLM]
    # Nor may it drop a type it is the default for.
    with pytest.raises(ModelInUse, match="default vlm model"):
        await registry.update("tenant-a", mine.id, types=[ModelType.KNOWLEDGE_QA])

    await registry.set_default("tenant-a", ModelType.KNOWLEDGE_QA, "")
    await registry.set_default("tenant-a", ModelType.VLM, "")
    await registry.delete("tenant-a", mine.id)
    with pytest.raises(ModelError) as gone:
        await registry.get("tenant-a", mine.id)
    assert gone.value.code == ModelErrorCode.MODEL_NOT_FOUND


async def test_a_used_model_cannot_be_deleted_and_the_message_names_the_users(registry):
    model = await registry.create("tenant-a", **embedder())
    await registry.put_usage("tenant-a", Usage(model.id, KB, "kb-1", "HR handbook"))
    await registry.put_usage("tenant-a", Usage(model.id, KB, "kb-1", "HR handbook"))
    await registry.put_usage("tenant-a", Usage(model.id, AGENT, "agent-7", "Onboarding helper"))
    assert len(await registry.list_usages("tenant-a", model.id)) == 2

    with pytest.raises(ModelInUse) as caught:
        await registry.delete("tenant-a", model.id)
    detail = caught.value.detail
    assert "knowledge base 'HR handbook' (kb-1)" in detail
    assert "agent 'Onboarding helper' (agent-7)" in detail
    assert caught.value.user_message().startswith(
        f"Invalid request: Model 'Jina v3' ({model.id}) cannot be deleted"
    )

    # Changing what the knowledge base's vectors depend on is refused too; renaming is fine.
    with pytest.raises(ModelInUse, match=r"knowledge base 'HR handbook' \(kb-1\)"):
        await registry.update("tenant-a", model.id, parameters=ModelParams(embedding_dimension=512))
    assert (await registry.update("tenant-a", model.id, display_name="Jina")).display_name == "Jina"

    assert await registry.delete_usage("tenant-a", model.id, KB, "kb-1")
    assert not await registry.delete_usage("tenant-a", model.id, KB, "kb-1")
    with pytest.raises(ModelInUse, match="agent 'Onboarding helper'"):
        await registry.delete("tenant-a", model.id)
    await registry.delete_usage("tenant-a", model.id, AGENT, "agent-7")
    await registry.delete("tenant-a", model.id)
    with pytest.raises(ModelError) as again:
        await registry.delete("tenant-a", model.id)
    assert again.value.code == ModelErrorCode.MODEL_NOT_FOUND


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        (Usage("m", None, "kb-1", "x"), "consumer_kind"),
        (Usage("m", KB, "", "x"), "consumer_id"),
        (Usage("", KB, "kb-1", "x"), "model_id"),
    ],
)
async def test_bad_usages_name_the_field(registry, usage, field):
    with pytest.raises(ModelError) as caught:
        await registry.put_usage("tenant-a", usage)
    assert caught.value.field == field


# --- built-in registration -------------------------------------------------------------------------------


async def test_register_builtin_is_idempotent_and_makes_the_builtin_default(store):
    first = make_registry(store)
    stored = await first.register_builtin(MINILM)
    assert stored.create_time != MINILM.create_time  # the registry stamps its own times
    again = await make_registry(store).register_builtin(MINILM)
    assert again == stored  # unchanged: not rewritten, same times
    assert (await first.list("tenant-a")).records == [stored]
    assert await first.get_default("tenant-b", ModelType.EMBEDDING) == (stored, DefaultModelSource.BUILTIN)
    # A second built-in that is not the default does not take over.
    other = await first.register_builtin(
        ModelRecord(**{**MINILM.__dict__, "id": "builtin-e5-small", "display_name": "e5"}), default=False
    )
    assert (await first.get_default("tenant-b", ModelType.EMBEDDING))[0] == stored
    assert other.builtin
    with pytest.raises(ValueError):
        await first.register_builtin(ModelRecord(**{**MINILM.__dict__, "builtin": False}))
