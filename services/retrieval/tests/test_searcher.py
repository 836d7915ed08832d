"""doc_retrieval end to end in-process: real embedded indexes, a scripted modelhub.

Checks the order of the spec: the BM25 leg does not wait for the query embedding, expansion only when
hits are too few, parents travel once, rerank reorders (and is skipped without a Rerank call when no
rerank model is configured), MMR applies when asked, and each step is a span with its counts.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode, ModelType
from knowsphere.retrieval.v1.retrieval_enums import SearchMode
from knowsphere_clients.errors import FailedPrecondition, ModelFailure, ServiceError, Unavailable
from knowsphere_retrieval.adapters.chunk_sql import SqlChunkStore
from knowsphere_retrieval.adapters.lexical_tantivy import TantivyLexicalIndex
from knowsphere_retrieval.adapters.vector_edge import EdgeVectorIndex
from knowsphere_retrieval.domain.ports import Hit, LexicalDoc, LexicalIndex, Scope, StoredChunk, VectorPoint
from knowsphere_retrieval.domain.search import (
    NO_RERANK_MODEL,
    KnowledgeBaseIndex,
    Searcher,
    SearchSettings,
)
from knowsphere_telemetry import attributes

TENANT = "acme"
KB = KnowledgeBaseIndex("kb", "toy-model", 8, ("en",))
TEXTS = {
    "c1": ("p1", "Employees receive 25 days of paid annual leave."),
    "c2": ("p1", "Annual leave can be carried over until March."),
    "c3": ("p2", "The badge reader shows error E0420 when offline."),
    "c4": ("p3", "Holiday entitlement for part-time staff is pro rata."),
    "c5": ("p4", "Employees receive 25 days of paid annual leave every year."),
}


def toy_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.lower().encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:8]]


def model_missing(code: ModelErrorCode = ModelErrorCode.NO_MODEL_CONFIGURED) -> ServiceError:
    """What ModelHubClient raises when the tenant has no usable model of the type."""
    return FailedPrecondition("no model", service="modelhub", model=ModelFailure(code=code, user_message=""))


class ScriptedModels:
    """A modelhub for the search: toy query vectors, scripted rerank scores and completions; counts calls."""

    def __init__(
        self,
        *,
        rerank: Callable[[Sequence[str]], list[float]] | ServiceError | None = None,
        default_rerank: bool = True,
        completion: str | ServiceError = "",
        embed_delay: float = 0.0,
        events: list[str] | None = None,
    ) -> None:
        self._rerank = rerank or (lambda texts: [0.5] * len(texts))
        self._default_rerank = default_rerank
        self._completion = completion
        self._embed_delay = embed_delay
        self.events = events if events is not None else []
        self.calls: Counter[str] = Counter()
        self.rerank_models: list[str] = []
        self.prompts: list[str] = []

    async def embed_query(self, model_id: str, query: str) -> list[float]:
        self.calls["embed_query"] += 1
        self.events.append("embed start")
        await asyncio.sleep(self._embed_delay)
        self.events.append("embed end")
        return toy_vector(query)

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], *, top_n: int = 0
    ) -> list[float]:
        self.calls["rerank"] += 1
        self.rerank_models.append(model_id)
        if isinstance(self._rerank, ServiceError):
            raise self._rerank
        return self._rerank(documents)

    async def has_default(self, model_type: ModelType) -> bool:
        self.calls[f"has_default:{model_type}"] += 1
        return self._default_rerank if model_type == ModelType.RERANK else True

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        purpose: str,
        model_id: str = "",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str:
        self.calls["complete"] += 1
        self.prompts.extend(m["content"] for m in messages)
        if isinstance(self._completion, ServiceError):
            raise self._completion
        return self._completion

    async def model_languages(self, model_id: str) -> tuple[str, ...]:
        return ("en",)


class RecordingLexical:
    """The real lexical index, noting when a search starts."""

    def __init__(self, inner: LexicalIndex, events: list[str]) -> None:
        self._inner = inner
        self._events = events

    async def search(self, query: str, scope: Scope, limit: int) -> list[Hit]:
        self._events.append("bm25 start")
        return await self._inner.search(query, scope, limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
async def parts(tmp_path: Path):  # type: ignore[no-untyped-def]
    chunks = SqlChunkStore(f"sqlite+aiosqlite:///{tmp_path}/chunks.db")
    await chunks.open()
    vectors = EdgeVectorIndex(tmp_path / "vectors")
    lexical = TantivyLexicalIndex(tmp_path / "lexical")
    stored = [
        StoredChunk(cid, TENANT, "kb", f"doc-{parent}", "handbook.pdf", text, parent, i)
        for i, (cid, (parent, text)) in enumerate(TEXTS.items())
    ]
    await chunks.put_chunks(
        stored, {"p1": "PARENT ONE", "p2": "PARENT TWO", "p3": "PARENT THREE", "p4": "PARENT FOUR"}
    )
    await vectors.ensure_collection(KB.collection, 8)
    await vectors.upsert(
        KB.collection,
        [VectorPoint(c.chunk_id, TENANT, "kb", c.document_id, toy_vector(c.text)) for c in stored],
    )
    await lexical.upsert([LexicalDoc(c.chunk_id, TENANT, "kb", c.document_id, c.text) for c in stored])
    yield chunks, vectors, lexical
    await lexical.close()
    await vectors.close()
    await chunks.close()


def make_searcher(parts, models: ScriptedModels | None = None, lexical: Any = None) -> Searcher:  # type: ignore[no-untyped-def]
    chunks, vectors, real_lexical = parts
    return Searcher(
        vectors=vectors, lexical=lexical or real_lexical, chunks=chunks, models=models or ScriptedModels()
    )


async def test_bm25_starts_before_the_query_embedding_finishes(parts):
    events: list[str] = []
    models = ScriptedModels(embed_delay=0.3, events=events)
    searcher = make_searcher(parts, models, lexical=RecordingLexical(parts[2], events))
    outcome = await searcher.search(TENANT, "annual leave", [KB], SearchSettings(rerank_enabled=False))
    # One after the other, the embedding would have ended before BM25 began.
    assert events.index("bm25 start") < events.index("embed end")
    assert outcome.stats.vector_hit_count and outcome.stats.bm25_hit_count
    assert outcome.results[0].fused.vector is not None and outcome.results[0].fused.bm25 is not None


async def test_a_bm25_search_embeds_nothing(parts):
    models = ScriptedModels()
    await make_searcher(parts, models).search(
        TENANT, "annual leave", [KB], SearchSettings(rerank_enabled=False), mode=SearchMode.BM25
    )
    assert models.calls["embed_query"] == 0


async def test_each_step_is_a_span_with_its_counts(parts, spans: InMemorySpanExporter):
    models = ScriptedModels(embed_delay=0.05)
    outcome = await make_searcher(parts, models).search(
        TENANT, "annual leave", [KB], SearchSettings(top_k=3, mmr_lambda=0.7)
    )
    steps = {s.name: s for s in spans.get_finished_spans() if s.name.startswith("retrieval.")}
    assert set(steps) == {
        "retrieval.embed_query",
        "retrieval.vector_query",
        "retrieval.bm25_query",
        "retrieval.fusion",
        "retrieval.rerank",
        "retrieval.mmr",
        "retrieval.parent_fetch",
    }
    assert steps["retrieval.embed_query"].attributes[attributes.EMBED_MODELS] == 1
    assert (
        steps["retrieval.vector_query"].attributes[attributes.RESULT_COUNT] == outcome.stats.vector_hit_count
    )
    assert steps["retrieval.bm25_query"].attributes[attributes.RESULT_COUNT] == outcome.stats.bm25_hit_count
    assert steps["retrieval.fusion"].attributes[attributes.FUSION_METHOD] == "rrf"
    assert steps["retrieval.parent_fetch"].attributes[attributes.PARENT_COUNT] >= 1
    # The legs overlap: the BM25 query ran while the query was being embedded.
    embed, bm25 = steps["retrieval.embed_query"], steps["retrieval.bm25_query"]
    assert bm25.start_time < embed.end_time  # type: ignore[operator]


async def test_expansion_runs_only_when_hits_are_too_few(parts):
    models = ScriptedModels(completion="1. holiday entitlement\n- pro rata\n")
    searcher = make_searcher(parts, models)
    settings = SearchSettings(expansion_method="llm", expansion_min_hits=2, rerank_enabled=False)
    few = await searcher.search(TENANT, "pro rata", [KB], settings, mode=SearchMode.BM25)
    assert few.stats.expanded and few.stats.expansion_queries == ["holiday entitlement"]
    assert models.calls["complete"] == 1 and "Question: pro rata" in models.prompts[0]
    many = await searcher.search(TENANT, "annual leave", [KB], settings, mode=SearchMode.BM25)
    assert not many.stats.expanded and models.calls["complete"] == 1


async def test_no_chat_model_means_no_expansion_not_a_failure(parts):
    models = ScriptedModels(completion=model_missing())
    settings = SearchSettings(expansion_method="llm", expansion_min_hits=2, rerank_enabled=False)
    outcome = await make_searcher(parts, models).search(
        TENANT, "pro rata", [KB], settings, mode=SearchMode.BM25
    )
    assert models.calls["complete"] == 1
    assert not outcome.stats.expanded and [r.chunk.chunk_id for r in outcome.results] == ["c4"]


async def test_parents_travel_once_and_rerank_reorders(parts):
    models = ScriptedModels(rerank=lambda texts: [1.0 if "March" in t else 0.1 for t in texts])
    outcome = await make_searcher(parts, models).search(TENANT, "annual leave", [KB], SearchSettings(top_k=3))
    assert outcome.stats.reranked
    assert outcome.results[0].chunk.chunk_id == "c2"  # the reranker's favourite, not BM25's
    assert outcome.results[0].rerank == 1.0
    with_p1 = [r for r in outcome.results if r.chunk.parent_id == "p1"]
    assert [r.parent_text for r in with_p1] == ["PARENT ONE", ""]


async def test_no_rerank_model_configured_makes_no_rerank_call(parts):
    models = ScriptedModels(default_rerank=False)
    searcher = make_searcher(parts, models)
    for _ in range(2):
        outcome = await searcher.search(TENANT, "annual leave", [KB], SearchSettings())
        assert not outcome.stats.reranked
        assert outcome.stats.rerank_skipped_reason == NO_RERANK_MODEL == "no rerank model configured"
        assert outcome.results
    assert models.calls["rerank"] == 0
    assert (
        models.calls[f"has_default:{ModelType.RERANK}"] == 2
    )  # asked per search; ModelHubClient answers from its cache


async def test_a_named_rerank_model_is_called_without_asking_for_the_default(parts):
    models = ScriptedModels(default_rerank=False, rerank=lambda texts: [0.9] * len(texts))
    outcome = await make_searcher(parts, models).search(
        TENANT, "annual leave", [KB], SearchSettings(rerank_model_id="bge-reranker")
    )
    assert outcome.stats.reranked and models.rerank_models == ["bge-reranker"]
    assert models.calls[f"has_default:{ModelType.RERANK}"] == 0


async def test_a_rerank_model_that_cannot_rerank_is_reported_not_fatal(parts):
    models = ScriptedModels(rerank=model_missing(ModelErrorCode.WRONG_MODEL_TYPE))
    outcome = await make_searcher(parts, models).search(
        TENANT, "annual leave", [KB], SearchSettings(rerank_model_id="an-embedder")
    )
    assert not outcome.stats.reranked and outcome.results
    assert outcome.stats.rerank_skipped_reason.startswith("rerank model an-embedder cannot rerank")


async def test_a_failing_rerank_call_fails_the_search(parts):
    models = ScriptedModels(rerank=Unavailable("modelhub is down", service="modelhub"))
    with pytest.raises(Unavailable):
        await make_searcher(parts, models).search(TENANT, "annual leave", [KB], SearchSettings())


async def test_mmr_pushes_a_near_duplicate_down(parts):
    searcher = make_searcher(parts)
    query = "employees receive paid annual leave days"
    plain = await searcher.search(
        TENANT, query, [KB], SearchSettings(rerank_enabled=False, top_k=3), mode=SearchMode.BM25
    )
    diverse = await searcher.search(
        TENANT,
        query,
        [KB],
        SearchSettings(rerank_enabled=False, top_k=3, mmr_lambda=0.3),
        mode=SearchMode.BM25,
    )
    assert diverse.stats.mmr_applied and not plain.stats.mmr_applied
    # c1 and c5 say the same thing: plain relevance keeps both on top, MMR does not.
    assert {r.chunk.chunk_id for r in plain.results[:2]} == {"c1", "c5"}
    assert {r.chunk.chunk_id for r in diverse.results[:2]} != {"c1", "c5"}


async def test_other_tenants_and_unknown_scopes_find_nothing(parts):
    outcome = await make_searcher(parts).search("intruder", "annual leave", [KB], SearchSettings())
    assert outcome.results == []
