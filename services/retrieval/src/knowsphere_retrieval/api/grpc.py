"""The gRPC face of retrieval, bound from its parts: indexing, reading, evaluation, and knowledge-graph
queries."""

from __future__ import annotations

from knowsphere_contracts.services import CONTRACTS
from knowsphere_retrieval.api.evaluation import EvaluationServicer
from knowsphere_retrieval.api.graph import GraphServicer
from knowsphere_retrieval.api.indexing import IndexingServicer
from knowsphere_retrieval.api.reading import ReadingServicer
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.ports import QueryModels
from knowsphere_retrieval.domain.search import Searcher
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.rpc import ServiceBinding, bind_service


def build_binding(
    *, settings: Settings, stores: Stores, searcher: Searcher, models: QueryModels
) -> ServiceBinding:
    """RetrievalService, every method implemented by exactly one of its parts."""
    return bind_service(
        CONTRACTS["retrieval"].descriptor,
        [
            IndexingServicer(settings=settings, stores=stores),
            ReadingServicer(settings=settings, stores=stores, searcher=searcher, models=models),
            EvaluationServicer(settings=settings, stores=stores, searcher=searcher, models=models),
            GraphServicer(settings=settings, stores=stores),
        ],
        pending="",
    )
