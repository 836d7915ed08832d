"""Wiring of the retrieval service: stores and indexes (embedded or servers), modelhub client, gRPC, NATS."""

from pathlib import Path

from knowsphere_clients import ModelHubClient, service_channel
from knowsphere_clients.model_changes import MODELHUB
from knowsphere_retrieval import SERVICE_NAME
from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_opensearch import OpenSearchLexicalIndex
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.adapters.vector_qdrant import QdrantServerVectorIndex
from knowsphere_retrieval.api.bus import build_bus
from knowsphere_retrieval.api.grpc import build_binding
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.core import RetrievalCore
from knowsphere_retrieval.domain.analysis import AnalysisConfig, Analyzer
from knowsphere_retrieval.domain.expansion import SynonymTable
from knowsphere_retrieval.domain.ports import LexicalIndex, VectorIndex
from knowsphere_retrieval.domain.search import Searcher
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        data = settings.data_dir
        chunks = SqlChunkStore(settings.chunk_store_url())
        analyzer = Analyzer(
            AnalysisConfig(
                user_dictionary=Path(settings.user_dictionary) if settings.user_dictionary else None
            )
        )
        vectors: VectorIndex
        if settings.qdrant_url:
            vectors = QdrantServerVectorIndex(settings.qdrant_url, api_key=settings.qdrant_api_key or None)
        else:
            vectors = EdgeVectorIndex(data / "vectors")
        lexical: LexicalIndex
        if settings.opensearch_url:
            lexical = OpenSearchLexicalIndex(
                settings.opensearch_url, index_prefix=settings.opensearch_index_prefix, analyzer=analyzer
            )
        else:
            lexical = TantivyLexicalIndex(data / "lexical", analyzer=analyzer)
        channel = service_channel("modelhub", settings.modelhub_addr, settings)
        modelhub = ModelHubClient(
            channel,
            cache_seconds=settings.model_cache_seconds,
            query_cache_size=settings.query_vector_cache_size,
        )
        searcher = Searcher(
            vectors=vectors,
            lexical=lexical,
            chunks=chunks,
            models=modelhub,
            synonyms=SynonymTable.from_file(Path(settings.synonyms_file)) if settings.synonyms_file else None,
            terms=analyzer.index_terms,
        )
        stores = Stores(
            chunks=chunks,
            vectors=vectors,
            lexical=lexical,
            vector_backend="qdrant" if settings.qdrant_url else "qdrant-edge (in-process)",
            lexical_backend="opensearch" if settings.opensearch_url else "tantivy (embedded)",
        )
        core = RetrievalCore(settings, stores, analyzer)
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding(settings=settings, stores=stores, searcher=searcher, models=modelhub)],
            grace=settings.shutdown_grace_seconds,
        )
        components: list[Component] = [ChannelsComponent([channel]), core]
        if settings.nats_url:
            broker = build_broker(
                settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
            )
            broker.include_router(build_bus().subscribers)
            broker.context.set_global(MODELHUB, modelhub)
            components.append(BrokerComponent(broker))
        return [*components, server]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
