"""The toolrunner under test: its real gRPC server in-process, with real peers behind their contracts.

- ``retrieval``: retrieval's own gRPC face over its embedded stores (SQLite chunks, in-process Qdrant
  engine, tantivy) in a temporary folder; its query embeddings come from toy vectors (a hash of the
  text), since the tools under test never depend on what a vector model would rank first.
- ``modelhub``: modelhub's own gRPC face, SQLite registry, with a chat model on the scripted
  OpenAI-compatible server (``services/modelhub/tests/scripted_provider.py``) as each tenant's default,
  for distillation.
- ``toolrunner(**settings)``: the toolrunner's gRPC server wired as ``__main__`` wires it, talking to
  both; settings can be overridden per test.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import ModelHubClient, RetrievalClient
from knowsphere_contracts.services import CONTRACTS
from knowsphere_egress import EgressClient, Resolver
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving
from knowsphere_toolrunner.adapters.sql_store import SqlToolResultStore
from knowsphere_toolrunner.api.grpc import build_binding
from knowsphere_toolrunner.settings import Settings
from knowsphere_toolrunner.skills import SkillStore
from knowsphere_toolrunner.toolbox import build_mcp_discovery, build_sandbox, build_servicers

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "services" / "modelhub" / "tests"))
from scripted_provider import Reply, ScriptedProvider, closed_port, openai_text_stream  # noqa: E402, F401

ACME = Identity("acme", "alice")
ACME_BOB = Identity("acme", "bob")
GLOBEX = Identity("globex", "gus")
MODEL = "toy-model"
DIMENSION = 8


def toy_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.lower().encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:DIMENSION]]


class ToyQueryModels:
    """Query embeddings for retrieval (toy vectors); no rerank model, no expansion model."""

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        return toy_vector(query)

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], *, top_n: int = 0
    ) -> list[float]:
        raise AssertionError("no rerank model is configured")

    async def has_default(self, model_type: ModelType) -> bool:
        return model_type != ModelType.RERANK

    async def complete(self, messages: Sequence[Mapping[str, str]], **options: Any) -> str:
        return ""

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        return ()


def chunk(kb: str, document: str, position: int, text: str, **fields: Any) -> rpb.Chunk:
    return rpb.Chunk(
        id=f"{document}-{position}",
        document_id=document,
        knowledge_base_id=kb,
        file_name=f"{document}.pdf",
        text=text,
        position=position,
        embeddings=[rpb.ChunkEmbedding(model_id=MODEL, dimension=DIMENSION, values=toy_vector(text))],
        **fields,
    )


@asynccontextmanager
async def retrieval_service(folder: Path) -> AsyncIterator[grpc.aio.Channel]:
    from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
    from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
    from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
    from knowsphere_retrieval.api.grpc import build_binding as retrieval_binding
    from knowsphere_retrieval.api.stores import Stores
    from knowsphere_retrieval.domain.search import Searcher
    from knowsphere_retrieval.settings import Settings as RetrievalSettings

    settings = RetrievalSettings(data_dir=folder, modelhub_addr="127.0.0.1:1")
    chunks = SqlChunkStore(f"sqlite+aiosqlite:///{folder}/chunks.db")
    await chunks.open()
    vectors = EdgeVectorIndex(folder / "vectors")
    lexical = TantivyLexicalIndex(folder / "lexical")
    models = ToyQueryModels()
    stores = Stores(chunks, vectors, lexical, vector_backend="edge", lexical_backend="tantivy")
    searcher = Searcher(vectors=vectors, lexical=lexical, chunks=chunks, models=models)
    binding = retrieval_binding(settings=settings, stores=stores, searcher=searcher, models=models)
    try:
        async with serving("retrieval", binding=binding) as channel:
            yield channel
    finally:
        await lexical.close()
        await vectors.close()
        await chunks.close()


@asynccontextmanager
async def modelhub_service(folder: Path) -> AsyncIterator[grpc.aio.Channel]:
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
            yield channel
    finally:
        await http.close()
        await store.close()


async def give_chat_model(channel: grpc.aio.Channel, identity: Identity, provider_url: str) -> None:
    """The tenant's default chat model: the scripted provider."""
    stub = CONTRACTS["modelhub"].stub(channel)
    with bound_identity(identity):
        created = await stub.CreateModel(
            mpb.CreateModelRequest(
                display_name="scripted",
                provider_id="custom",
                model_name="scripted-model",
                types=[mpb.MODEL_TYPE_KNOWLEDGE_QA],
                base_url=f"{provider_url}/v1",
                api_key="sk-unit-test-0000001",
            )
        )
        await stub.SetDefaultModel(
            mpb.SetDefaultModelRequest(type=mpb.MODEL_TYPE_KNOWLEDGE_QA, model_id=created.model.id)
        )


@dataclass
class Peers:
    retrieval: grpc.aio.Channel
    modelhub: grpc.aio.Channel
    provider: ScriptedProvider

    @property
    def index(self) -> Any:
        return CONTRACTS["retrieval"].stub(self.retrieval)


@pytest.fixture(scope="session")
def provider() -> Any:
    server = ScriptedProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def peers(tmp_path: Path, provider: ScriptedProvider) -> AsyncIterator[Peers]:
    provider.reset()
    async with AsyncExitStack() as stack:
        retrieval = await stack.enter_async_context(retrieval_service(tmp_path / "retrieval"))
        modelhub = await stack.enter_async_context(modelhub_service(tmp_path / "modelhub"))
        for identity in (ACME, GLOBEX):
            await give_chat_model(modelhub, identity, provider.url)
        yield Peers(retrieval, modelhub, provider)


async def configure_kb(peers: Peers, identity: Identity, kb: str, chunks: Sequence[rpb.Chunk]) -> None:
    with bound_identity(identity):
        await peers.index.ConfigureKnowledgeBase(
            rpb.ConfigureKnowledgeBaseRequest(
                knowledge_base_id=kb, embedding_model_id=MODEL, embedding_dimension=DIMENSION
            )
        )
        if chunks:
            await peers.index.IndexChunks(rpb.IndexChunksRequest(chunks=list(chunks)))


@asynccontextmanager
async def toolrunner_service(
    folder: Path,
    retrieval: grpc.aio.Channel,
    modelhub: grpc.aio.Channel,
    resolver: Resolver | None = None,
    **overrides: Any,
) -> AsyncIterator[Any]:
    """The toolrunner wired as ``__main__`` wires it, on loopback; yields its stub. ``resolver``
    replaces the egress guard's DNS (names the tests own)."""
    settings = Settings(data_dir=folder, retrieval_addr="unused", modelhub_addr="unused", **overrides)
    store = SqlToolResultStore(settings.result_store_url())
    await store.open()
    egress = EgressClient(settings.egress, resolver=resolver)
    sandbox = build_sandbox(settings)
    servicers = build_servicers(
        settings,
        store,
        RetrievalClient(retrieval),
        ModelHubClient(modelhub),
        SkillStore(settings.data_dir, settings.skills),
        sandbox,
        egress,
    )
    mcp = build_mcp_discovery(settings, egress, servicers, sandbox)
    await mcp.start()
    binding = build_binding(servicers.all)
    try:
        async with serving("toolrunner", binding=binding) as channel:
            yield CONTRACTS["toolrunner"].stub(channel)
    finally:
        await mcp.stop()
        await egress.aclose()
        await store.close()


@pytest.fixture
def toolrunner(tmp_path: Path, peers: Peers) -> Callable[..., Any]:
    """``async with toolrunner(**settings) as stub: …``"""

    def start(**overrides: Any) -> Any:
        return toolrunner_service(tmp_path / "toolrunner", peers.retrieval, peers.modelhub, **overrides)

    return start


def write_skill(data_dir: Path, tenant: str, name: str, files: Mapping[str, str | bytes]) -> Path:
    """Install a skill as an operator does: files under ``<data_dir>/skills/<tenant folder>/<name>/``."""
    folder = SkillStore(data_dir).tenant_dir(tenant) / name
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return folder


@pytest.fixture
def install_skill(tmp_path: Path) -> Callable[..., Path]:
    """``install_skill(identity, name, {"SKILL.md": …, "scripts/x.py": …})`` into the toolrunner's data."""

    def install(identity: Identity, name: str, files: Mapping[str, str | bytes]) -> Path:
        return write_skill(tmp_path / "toolrunner", identity.tenant_id, name, files)

    return install


@pytest.fixture
async def unreachable_peers() -> AsyncIterator[tuple[grpc.aio.Channel, grpc.aio.Channel]]:
    """Channels to retrieval and modelhub addresses where nothing listens (a peer that is down)."""
    from knowsphere_runtime.rpc import open_channel

    retrieval = open_channel(f"127.0.0.1:{closed_port()}", services=[CONTRACTS["retrieval"].descriptor])
    modelhub = open_channel(f"127.0.0.1:{closed_port()}", services=[CONTRACTS["modelhub"].descriptor])
    yield retrieval, modelhub
    await retrieval.close()
    await modelhub.close()


@pytest.fixture
def lone_toolrunner(
    tmp_path: Path, unreachable_peers: tuple[grpc.aio.Channel, grpc.aio.Channel]
) -> Callable[..., Any]:
    """The toolrunner with its peers down: ``async with lone_toolrunner(**settings) as stub: …``"""

    def start(**overrides: Any) -> Any:
        return toolrunner_service(tmp_path / "toolrunner", *unreachable_peers, **overrides)

    return start
