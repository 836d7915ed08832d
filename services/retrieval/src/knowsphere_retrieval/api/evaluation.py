"""Retrieval's gRPC face for evaluation (``EvaluateQueries``): labelled questions run through search and
scored, for the gateway's evaluation runs.

Each query runs in each requested mode through the same search Search runs (the service's search
defaults, :data:`~knowsphere_retrieval.domain.evaluation.SEARCH_DEPTH` results), over one knowledge
base of the caller's tenant; another tenant's knowledge base is NOT_FOUND like one that never was.
Nothing is stored. Bad input answers INVALID_ARGUMENT naming the field and the limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from opentelemetry import trace

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_retrieval.api.convert import evaluation_search_settings, mode_evaluation
from knowsphere_retrieval.api.reading import search_indexes
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.evaluation import ranked_documents, score, shown_ranking
from knowsphere_retrieval.domain.ports import QueryModels
from knowsphere_retrieval.domain.search import KnowledgeBaseIndex, Searcher, SearchSettings
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import answer, invalid, not_found
from knowsphere_telemetry import attributes

_tracer = trace.get_tracer("knowsphere.retrieval")

T = TypeVar("T")

MODE_NAMES = ", ".join(mode.value for mode in SearchMode)


class EvaluationServicer:
    def __init__(
        self, *, settings: Settings, stores: Stores, searcher: Searcher, models: QueryModels
    ) -> None:
        self._settings = settings
        self._stores = stores
        self._searcher = searcher
        self._models = models

    async def EvaluateQueries(self, request: pb.EvaluateQueriesRequest, context: Any) -> Any:
        async def work() -> pb.EvaluateQueriesResponse:
            tenant = require_identity().tenant_id
            modes = self._modes(request.modes)
            self._check_queries(request.queries)
            kb = request.knowledge_base_id
            if not kb:
                raise invalid("knowledge_base_id", "a knowledge base id is required")
            configs = await self._stores.configs(tenant, [kb], "knowledge_base_id", 1)
            if not configs:
                raise not_found("knowledge base", kb)
            indexes = await search_indexes(configs, self._models)
            with _tracer.start_as_current_span("retrieval.evaluate_queries") as span:
                span.set_attribute(attributes.KNOWLEDGE_BASE_ID, kb)
                span.set_attribute(attributes.EVALUATION_QUERIES, len(request.queries))
                span.set_attribute(attributes.EVALUATION_MODES, [mode.value for mode in modes])
                # One evaluation per query and mode.
                span.set_attribute(attributes.RESULT_COUNT, len(request.queries) * len(modes))
                searches = {mode: evaluation_search_settings(mode, self._settings) for mode in modes}
                limiter = asyncio.Semaphore(self._settings.evaluation_concurrency)

                async def evaluate(query: pb.EvaluationQuery, mode: SearchMode) -> pb.ModeEvaluation:
                    async with limiter:
                        return await self._evaluate(tenant, query, mode, indexes, searches[mode])

                evaluated = await _all([evaluate(q, mode) for q in request.queries for mode in modes])
            width = len(modes)
            return pb.EvaluateQueriesResponse(
                queries=[
                    pb.QueryEvaluation(query_id=query.id, modes=evaluated[i * width : (i + 1) * width])
                    for i, query in enumerate(request.queries)
                ]
            )

        return await answer(context, work)

    async def _evaluate(
        self,
        tenant: str,
        query: pb.EvaluationQuery,
        mode: SearchMode,
        indexes: Sequence[KnowledgeBaseIndex],
        settings: SearchSettings,
    ) -> pb.ModeEvaluation:
        outcome = await self._searcher.search(tenant, query.text, indexes, settings, mode=mode)
        documents = ranked_documents([item.chunk for item in outcome.results])
        return mode_evaluation(mode, score(documents, query.relevance), shown_ranking(documents))

    @staticmethod
    def _modes(numbers: Sequence[int]) -> list[SearchMode]:
        if not numbers:
            raise invalid("modes", f"at least one mode is required ({MODE_NAMES})")
        modes: list[SearchMode] = []
        for index, number in enumerate(numbers):
            mode = SearchMode.from_number(number)
            if mode is None:
                raise invalid(f"modes[{index}]", f"unknown mode {number}; one of {MODE_NAMES}")
            if mode in modes:
                raise invalid(f"modes[{index}]", f"{mode.value} is given twice")
            modes.append(mode)
        return modes

    def _check_queries(self, queries: Sequence[pb.EvaluationQuery]) -> None:
        settings = self._settings
        if not queries:
            raise invalid("queries", "at least one query is required")
        limit = settings.evaluation_max_queries
        if len(queries) > limit:
            raise invalid("queries", f"{len(queries)} queries; the limit is {limit}")
        ids: set[str] = set()
        for index, query in enumerate(queries):
            where = f"queries[{index}]"
            if not query.id:
                raise invalid(f"{where}.id", "an id is required")
            if query.id in ids:
                raise invalid(f"{where}.id", f"{query.id!r} is given twice")
            ids.add(query.id)
            if not query.text.strip():
                raise invalid(f"{where}.text", "empty text")
            if len(query.text) > settings.evaluation_max_query_chars:
                raise invalid(
                    f"{where}.text",
                    f"{len(query.text)} characters; the limit is {settings.evaluation_max_query_chars}",
                )
            if len(query.relevance) > settings.evaluation_max_labels:
                raise invalid(
                    f"{where}.relevance",
                    f"{len(query.relevance)} labels; the limit is {settings.evaluation_max_labels}",
                )
            for label, grade in query.relevance.items():
                if grade < 0:
                    raise invalid(f"{where}.relevance", f"grade {grade} of {label!r} is negative; 0 or more")


async def _all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Every call's result in order; the first failure cancels the others and is raised."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
