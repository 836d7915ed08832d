"""Knowledge bases through the servicer: validation, model resolution, peers' refusals, migrations.

The store is a real SQLite one; modelhub, retrieval and Temporal are stood in for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients import EmbeddingModel, NoModelConfigured, WrongModelType
from knowsphere_clients.errors import InvalidArgument, NotFound
from knowsphere_contracts.vocabulary import ChunkingStrategy, MigrationState
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api.knowledge_bases import KnowledgeBases, chunking_of, language_of, name_of
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.errors import RequestError

TENANT = "tenant-a"


class Aborted(Exception):
    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status

    @property
    def field(self) -> str:
        """The field of the status's BadRequest detail, as a caller decodes it."""
        raw = dict(self.status.trailing_metadata).get("grpc-status-details-bin")
        if raw is None:
            return ""
        for detail in status_pb2.Status.FromString(raw).details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                return bad.field_violations[0].field
        return ""


class Context:
    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


class ModelHub:
    """Embedding models by id; "" resolves to the default, when there is one."""

    def __init__(self, default: str = "m-1") -> None:
        self.default = default
        self.models = {"m-1": 384, "m-2": 1024, "builtin-multi": 384}
        self.languages: dict[str, tuple[str, ...]] = {"builtin-multi": ("multi",)}  # () = unknown

    async def default_model(self, model_type: ModelType) -> mpb.Model | None:
        return mpb.Model(id=self.default) if self.default else None

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        return self.languages.get(model_id, ())

    async def list_models(self, request: mpb.ListModelsRequest) -> mpb.ListModelsResponse:
        builtin = [mpb.Model(id="builtin-multi", builtin=True)]
        return mpb.ListModelsResponse(models=[*builtin, *(mpb.Model(id=m) for m in ("m-1", "m-2"))])

    async def resolve_embedding_model(self, model_id: str) -> EmbeddingModel:
        model_id = model_id or self.default
        if not model_id:
            raise NoModelConfigured("no embedding model is configured for this tenant")
        if model_id == "chat-1":
            raise WrongModelType("model chat-1 is not an embedding model")
        if model_id not in self.models:
            raise NotFound(f"model {model_id} not found", service="modelhub", method="GetModel")
        return EmbeddingModel(model_id, self.models[model_id])


class Retrieval:
    def __init__(self) -> None:
        self.configured: list[tuple[str, dict[str, Any]]] = []
        self.refuse = False

    async def configure_knowledge_base(self, knowledge_base_id: str, **config: Any) -> None:
        if self.refuse:
            raise InvalidArgument(
                "language_hint: 'xx' is not a language retrieval analyses", field="language_hint"
            )
        self.configured.append((knowledge_base_id, config))


class Runs:
    def __init__(self) -> None:
        self.migrations: list[tuple[str, str]] = []

    async def start_migration(self, kb: Any, to_model_id: str) -> None:
        self.migrations.append((kb.id, to_model_id))


SETTINGS = Settings(
    temporal_address="t:1",
    nats_url="nats://n:1",
    retrieval_addr="r:1",
    modelhub_addr="m:1",
    data_dir="/nonexistent",
    max_name_length=20,
    min_chunk_size_tokens=32,
    max_chunk_size_tokens=2048,
)


@pytest.fixture(autouse=True)
def identity() -> Iterator[None]:
    with bound_identity(Identity(TENANT, "user-1")):
        yield


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[IngestionStore]:
    store = IngestionStore(f"sqlite+aiosqlite:///{tmp_path}/ingestion.db")
    await store.open()
    yield store
    await store.close()


def servicer(
    store: IngestionStore, modelhub: ModelHub | None = None
) -> tuple[KnowledgeBases, Retrieval, Runs]:
    retrieval, runs = Retrieval(), Runs()
    kbs = KnowledgeBases(
        settings=SETTINGS,
        store=store,
        blobs=None,  # type: ignore[arg-type]
        modelhub=modelhub or ModelHub(),  # type: ignore[arg-type]
        retrieval=retrieval,  # type: ignore[arg-type]
        runs=runs,  # type: ignore[arg-type]
    )
    return kbs, retrieval, runs


# --- what a request may say ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        (pb.ChunkingConfig(chunk_size_tokens=-1), "chunking.chunk_size_tokens", "-1 is negative"),
        (
            pb.ChunkingConfig(chunk_size_tokens=8),
            "chunking.chunk_size_tokens",
            "outside the allowed range 32–2048",
        ),
        (pb.ChunkingConfig(parent_size_tokens=4096), "chunking.parent_size_tokens", "4096 tokens"),
        (pb.ChunkingConfig(chunk_overlap_tokens=-5), "chunking.chunk_overlap_tokens", "negative"),
        (pb.ChunkingConfig(strategy=9), "chunking.strategy", "9 is not a chunking strategy"),  # type: ignore[arg-type]
    ],
)
def test_bad_chunking_is_refused_naming_the_field(config: pb.ChunkingConfig, field: str, words: str) -> None:
    with pytest.raises(RequestError) as refused:
        chunking_of(SETTINGS, config)
    assert refused.value.field == field and words in refused.value.message


def test_chunking_takes_the_contract_strategy_and_defaults_to_headings() -> None:
    assert chunking_of(SETTINGS, None).strategy == ChunkingStrategy.HEADING
    assert chunking_of(SETTINGS, pb.ChunkingConfig()).strategy == ChunkingStrategy.HEADING
    chosen = chunking_of(
        SETTINGS,
        pb.ChunkingConfig(
            strategy=pb.CHUNKING_STRATEGY_PARENT_CHILD, parent_size_tokens=1024, child_size_tokens=256
        ),
    )
    assert chosen.strategy == ChunkingStrategy.PARENT_CHILD and chosen.parent_size_tokens == 1024


def test_names_and_language_hints() -> None:
    assert name_of(SETTINGS, "  Pump   manuals ") == "Pump manuals"
    with pytest.raises(RequestError, match="name: required"):
        name_of(SETTINGS, "   ")
    with pytest.raises(RequestError, match="name: 21 characters; the limit is 20"):
        name_of(SETTINGS, "x" * 21)
    assert language_of(" zh-Hans ") == "zh-Hans"
    with pytest.raises(RequestError, match="language_hint: 'en us' is not a BCP-47 tag"):
        language_of("en us")


# --- through the servicer ----------------------------------------------------------------------------


async def create(kbs: KnowledgeBases, **fields: Any) -> pb.KnowledgeBase:
    response = await kbs.CreateKnowledgeBase(
        pb.CreateKnowledgeBaseRequest(**{"name": "Manuals", **fields}), Context()
    )
    return response.knowledge_base  # type: ignore[no-any-return]


async def test_a_knowledge_base_is_created_with_the_default_model_and_configured_in_retrieval(
    store: IngestionStore,
) -> None:
    kbs, retrieval, _ = servicer(store)
    kb = await create(kbs, language_hint="de", graph_enabled=True)
    assert (kb.embedding_model_id, kb.embedding_dimension) == ("m-1", 384)
    assert retrieval.configured == [
        (
            kb.id,
            {
                "embedding_model_id": "m-1",
                "embedding_dimension": 384,
                "language_hint": "de",
                "graph_enabled": True,
            },
        )
    ]
    with pytest.raises(Aborted) as taken:
        await create(kbs)
    assert taken.value.status.code == grpc.StatusCode.ALREADY_EXISTS and taken.value.field == "name"


@pytest.mark.parametrize(
    ("name", "hint", "named", "expected"),
    [
        ("产品手册", "", "", "builtin-multi"),  # Chinese name, no hint: a model that reads Chinese
        ("Manuals", "zh-Hans", "", "builtin-multi"),
        ("Manuals", "ja", "", "builtin-multi"),
        ("Manuals", "", "", "m-1"),  # English: the default reads it
        ("产品手册", "en", "", "m-1"),  # the hint wins over the name
        ("产品手册", "zh", "m-2", "m-2"),  # a model named in the request is always used
    ],
)
async def test_a_knowledge_base_in_a_language_the_default_cannot_read_gets_a_builtin_that_can(
    store: IngestionStore, name: str, hint: str, named: str, expected: str
) -> None:
    hub = ModelHub()
    hub.languages["m-1"] = ("en",)
    kbs, retrieval, _ = servicer(store, hub)
    kb = await create(kbs, name=name, language_hint=hint, embedding_model_id=named)
    assert kb.embedding_model_id == expected
    assert retrieval.configured[0][1]["embedding_model_id"] == expected


async def test_a_default_that_says_nothing_of_languages_is_kept(store: IngestionStore) -> None:
    kbs, _, _ = servicer(store)  # m-1 documents no languages: it may read Chinese
    assert (await create(kbs, name="产品手册")).embedding_model_id == "m-1"


@pytest.mark.parametrize(
    ("default", "model_id", "code", "message"),
    [
        ("", "", grpc.StatusCode.FAILED_PRECONDITION, "no embedding model is configured for this tenant"),
        (
            "m-1",
            "chat-1",
            grpc.StatusCode.INVALID_ARGUMENT,
            "embedding_model_id: model chat-1 is not an embedding",
        ),
    ],
)
async def test_a_model_that_cannot_embed_is_refused_naming_the_field(
    store: IngestionStore, default: str, model_id: str, code: grpc.StatusCode, message: str
) -> None:
    kbs, retrieval, _ = servicer(store, ModelHub(default=default))
    with pytest.raises(Aborted) as refused:
        await create(kbs, embedding_model_id=model_id)
    assert refused.value.status.code == code
    assert refused.value.status.details.startswith(message)
    assert refused.value.field == "embedding_model_id"
    assert retrieval.configured == []


async def test_a_peers_refusal_reaches_the_caller_and_leaves_nothing(store: IngestionStore) -> None:
    kbs, retrieval, _ = servicer(store)
    with pytest.raises(Aborted) as missing:
        await create(kbs, embedding_model_id="m-404")
    assert missing.value.status.code == grpc.StatusCode.NOT_FOUND
    assert missing.value.status.details == "model m-404 not found"

    retrieval.refuse = True
    with pytest.raises(Aborted) as refused:
        await create(kbs, language_hint="xx")
    assert refused.value.status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.status.details == "language_hint: 'xx' is not a language retrieval analyses"
    assert refused.value.field == "language_hint"
    assert await store.list_kbs(TENANT, 10, None) == []  # the half-made knowledge base is gone


async def test_a_new_embedding_model_starts_one_migration(store: IngestionStore) -> None:
    kbs, _, runs = servicer(store)
    kb = await create(kbs)

    async def update(**fields: Any) -> pb.KnowledgeBase:
        request = pb.UpdateKnowledgeBaseRequest(knowledge_base_id=kb.id, **fields)
        return (await kbs.UpdateKnowledgeBase(request, Context())).knowledge_base  # type: ignore[no-any-return]

    unchanged = await update(embedding_model_id="m-1")
    assert not unchanged.HasField("migration") and runs.migrations == []
    assert not (await update(embedding_model_id="")).HasField("migration")  # the default is the same model

    migrating = await update(embedding_model_id="m-2")
    assert migrating.migration.state == pb.MIGRATION_STATE_RUNNING
    assert (migrating.migration.from_model_id, migrating.migration.to_model_id) == ("m-1", "m-2")
    assert runs.migrations == [(kb.id, "m-2")]
    stored = await store.get_kb(TENANT, kb.id)
    assert stored is not None and stored.migration is not None
    assert stored.migration.state == MigrationState.RUNNING and stored.migration.to_dimension == 1024

    await update(embedding_model_id="m-2")  # a retry: the same migration, started again at most
    assert runs.migrations == [(kb.id, "m-2"), (kb.id, "m-2")]
    with pytest.raises(Aborted) as busy:
        await update(embedding_model_id="m-3")
    assert busy.value.status.code == grpc.StatusCode.FAILED_PRECONDITION
    assert busy.value.status.details.startswith("embedding_model_id: a migration to m-2 is running")
    assert busy.value.field == "embedding_model_id"
