"""Wiring of the retrieval service: stores and indexes (embedded or servers), modelhub client, gRPC."""

from pathlib import Path

from knowsphere_contracts.services import CONTRACTS
from knowsphere_retrieval import SERVICE_NAME
from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_opensearch import OpenSearchLexicalIndex
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.modelhub_client import ModelHubClient
from knowsphere_retrieval.adapters.ports import LexicalIndex, VectorIndex
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.adapters.vector_qdrant import QdrantServerVectorIndex
from knowsphere_retrieval.api.grpc import RetrievalServicer, build_binding
from knowsphere_retrieval.core import RetrievalCore
from knowsphere_retrieval.domain.analysis import AnalysisConfig, Analyzer
from knowsphere_retrieval.domain.expansion import SynonymTable
from knowsphere_retrieval.domain.search import Searcher
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.lifecycle import ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer, open_channel
from knowsphere_runtime.settings import load_settings


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        data = settings.data_dir
        chunks = SqlChunkStore(settings.database_url or f"sqlite+aiosqlite:///{data}/chunks.db")
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
        channel = open_channel(
            settings.modelhub_addr,
            services=[CONTRACTS["modelhub"].descriptor],
            unary_timeout=settings.rpc_timeout_seconds,
        )
        modelhub = ModelHubClient(channel, cache_size=settings.query_vector_cache_size)

        async def embed(model_id: str, query: str) -> list[float]:
            return await modelhub.embed_query(require_identity().tenant_id, model_id, query)

        searcher = Searcher(
            vectors=vectors,
            lexical=lexical,
            chunks=chunks,
            embed=embed,
            rerank=modelhub.rerank,
            multi_query=modelhub.multi_query,
            synonyms=SynonymTable.from_file(Path(settings.synonyms_file)) if settings.synonyms_file else None,
            terms=analyzer.index_terms,
        )
        servicer = RetrievalServicer(
            settings=settings,
            chunks=chunks,
            vectors=vectors,
            lexical=lexical,
            graph=None,
            searcher=searcher,
            model_languages=modelhub.model_languages,
            backends=(
                "qdrant" if settings.qdrant_url else "qdrant-edge (in-process)",
                "opensearch" if settings.opensearch_url else "tantivy (embedded)",
                "none",
            ),
        )
        core = RetrievalCore(settings, chunks, vectors, lexical, servicer, analyzer)
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding(servicer)],
            grace=settings.shutdown_grace_seconds,
        )
        return [ChannelsComponent([channel]), core, server]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
