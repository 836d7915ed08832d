"""The production lexical index: BM25 on an OpenSearch 2.x cluster, through ``opensearch-py``.

Analysis happens here, client-side, with :mod:`knowsphere_retrieval.domain.analysis` — the same
code the embedded tantivy index uses — and OpenSearch receives the terms whitespace-joined into
``text`` and ``title`` fields whose analyzer only splits on whitespace. So Chinese segmentation,
stemming and whole identifiers behave exactly as in the embedded backend, and the cluster needs no
analysis plugin (no IK or smartcn); the cost is that OpenSearch's own highlighting and query-string
parsing see terms rather than the original text, which this index does not use.

One index, ``<index_prefix>-lexical``, holds every tenant: created on first use with an explicit
mapping (``dynamic: strict``) and BM25 similarity with k1 = 1.2, b = 0.75 (tantivy's defaults, so
both backends rank alike; one shard by default so document frequencies are index-wide). A
document's ``_id`` is tenant + chunk id, so re-sending a chunk replaces it (bulk ``index``) and no
tenant can overwrite another's. Every query filters on ``tenant_id`` and ``knowledge_base_id``
(and ``document_id`` when given) in a ``bool`` filter, which does not score; scoring is a ``match``
of the query terms on ``text`` plus one on ``title`` boosted by ``title_boost``. Writes use
``refresh=wait_for`` by default so that a returned upsert or delete is visible to the next search,
as in the embedded index.

No OpenSearch runs on the build machine: this adapter is tested against exchanges hand-written from
the documented OpenSearch 2.x shapes (``tests/test_opensearch_wire.py``), and runs the conformance
suite only where ``OPENSEARCH_URL`` points at a real server.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import RequestError
from opensearchpy.helpers import BulkIndexError, async_bulk

from knowsphere_retrieval.domain.analysis import DEFAULT_MAX_TERM_CHARS, AnalysedQuery, Analyzer
from knowsphere_retrieval.domain.ports import Hit, LexicalDoc, Scope

DEFAULT_TITLE_BOOST = 0.5  # as in the embedded index, so both backends rank alike
BM25_K1 = 1.2
BM25_B = 0.75
DEFAULT_SHARDS = 1
DEFAULT_REPLICAS = 1
DEFAULT_BULK_CHUNK_SIZE = 500
DEFAULT_TIMEOUT_SECONDS = 30.0
# Longer than any term analysis emits, so the whitespace tokenizer never splits one.
MAX_TOKEN_LENGTH = max(255, DEFAULT_MAX_TERM_CHARS)

_INDEX_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_TERMS_ANALYZER = "knowsphere_terms"
_SIMILARITY = "knowsphere_bm25"


def index_body(shards: int = DEFAULT_SHARDS, replicas: int = DEFAULT_REPLICAS) -> dict[str, Any]:
    """Settings and mapping of the lexical index (``PUT /<index>``)."""
    terms_field = {
        "type": "text",
        "analyzer": _TERMS_ANALYZER,
        "similarity": _SIMILARITY,
        "index_options": "freqs",  # BM25 needs frequencies, not positions
    }
    return {
        "settings": {
            "index": {
                "number_of_shards": shards,
                "number_of_replicas": replicas,
                "similarity": {_SIMILARITY: {"type": "BM25", "k1": BM25_K1, "b": BM25_B}},
            },
            "analysis": {
                "tokenizer": {_TERMS_ANALYZER: {"type": "whitespace", "max_token_length": MAX_TOKEN_LENGTH}},
                "analyzer": {_TERMS_ANALYZER: {"type": "custom", "tokenizer": _TERMS_ANALYZER, "filter": []}},
            },
        },
        "mappings": {
            "dynamic": "strict",
            "_source": {"excludes": ["text", "title"]},  # the chunk store keeps the text
            "properties": {
                "chunk_id": {"type": "keyword"},
                "tenant_id": {"type": "keyword"},
                "knowledge_base_id": {"type": "keyword"},
                "document_id": {"type": "keyword"},
                "text": terms_field,
                "title": terms_field,
            },
        },
    }


class OpenSearchLexicalIndex:
    """``LexicalIndex`` on OpenSearch at ``url``, in the index ``<index_prefix>-lexical``."""

    def __init__(
        self,
        url: str,
        index_prefix: str,
        *,
        analyzer: Analyzer | None = None,
        title_boost: float = DEFAULT_TITLE_BOOST,
        shards: int = DEFAULT_SHARDS,
        replicas: int = DEFAULT_REPLICAS,
        refresh: str = "wait_for",
        bulk_chunk_size: int = DEFAULT_BULK_CHUNK_SIZE,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        client: AsyncOpenSearch | None = None,
    ) -> None:
        self.index_name = f"{index_prefix}-lexical"
        if not _INDEX_NAME.fullmatch(self.index_name):
            raise ValueError(
                f"index_prefix {index_prefix!r} must be lower-case letters, digits, '-', '_' or '.' "
                "and start with a letter or digit (an OpenSearch index name)"
            )
        if title_boost < 0:
            raise ValueError(f"title_boost must be at least 0, got {title_boost}")
        if refresh not in ("wait_for", "true", "false"):
            raise ValueError(f"refresh must be 'wait_for', 'true' or 'false', got {refresh!r}")
        if bulk_chunk_size < 1:
            raise ValueError(f"bulk_chunk_size must be at least 1, got {bulk_chunk_size}")
        self._analyzer = analyzer or Analyzer()
        self._title_boost = title_boost
        self._body = index_body(shards, replicas)
        self._refresh = refresh
        self._bulk_chunk_size = bulk_chunk_size
        self._client = client or AsyncOpenSearch(hosts=[url], timeout=timeout_seconds)
        self._ready = False
        self._ready_lock = asyncio.Lock()

    # --- LexicalIndex -------------------------------------------------------------------------

    async def upsert(self, docs: Sequence[LexicalDoc]) -> None:
        for i, doc in enumerate(docs):
            for name in ("chunk_id", "tenant_id", "knowledge_base_id", "document_id"):
                if not getattr(doc, name):
                    raise ValueError(f"docs[{i}].{name} must not be empty")
        if not docs:
            return
        actions = await asyncio.to_thread(self._actions, list(docs))
        await self._ensure_index()
        try:
            await async_bulk(
                self._client,
                actions,
                chunk_size=self._bulk_chunk_size,
                refresh=self._refresh,
                max_retries=0,
            )
        except BulkIndexError as exc:
            first: dict[str, Any] = exc.errors[0] if exc.errors else {}
            item: dict[str, Any] = next(iter(first.values()), {})
            raise RuntimeError(
                f"OpenSearch rejected {len(exc.errors)} of {len(actions)} chunks in {self.index_name}; "
                f"first: _id {item.get('_id')!r}: {item.get('error')}; the others were written "
                "(re-sending the batch is safe: upsert is idempotent)"
            ) from exc

    async def search(self, query: str, scope: Scope, limit: int) -> list[Hit]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if not scope.tenant_id:
            raise ValueError("scope.tenant_id must not be empty")
        if not scope.knowledge_base_ids:
            return []
        analysed = await asyncio.to_thread(self._analyzer.analyse_query, query)
        if not analysed.terms:
            return []
        await self._ensure_index()
        hits = await self._search(analysed, scope, limit, require_identifiers=True)
        if not hits and analysed.identifiers:
            # No chunk in scope has any of the exact identifiers: rank by the terms alone.
            hits = await self._search(analysed, scope, limit, require_identifiers=False)
        return hits

    async def delete_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        _require(tenant_id=tenant_id)
        if chunk_ids:
            await self._delete([{"term": {"tenant_id": tenant_id}}, {"terms": {"chunk_id": list(chunk_ids)}}])

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> None:
        _require(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document_id=document_id)
        await self._delete(
            [
                {"term": {"tenant_id": tenant_id}},
                {"term": {"knowledge_base_id": knowledge_base_id}},
                {"term": {"document_id": document_id}},
            ]
        )

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> None:
        _require(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
        await self._delete(
            [{"term": {"tenant_id": tenant_id}}, {"term": {"knowledge_base_id": knowledge_base_id}}]
        )

    async def count(self, tenant_id: str, knowledge_base_id: str) -> int:
        _require(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
        await self._ensure_index()
        filters = [{"term": {"tenant_id": tenant_id}}, {"term": {"knowledge_base_id": knowledge_base_id}}]
        response = await self._client.count(
            index=self.index_name, body={"query": {"bool": {"filter": filters}}}
        )
        return int(response["count"])

    async def close(self) -> None:
        await self._client.close()

    async def drop_index(self) -> None:
        """Delete the whole index, every tenant's chunks (tests and rebuilds)."""
        await self._client.indices.delete(index=self.index_name, params={"ignore_unavailable": "true"})
        self._ready = False

    # --- internals ----------------------------------------------------------------------------

    async def _ensure_index(self) -> None:
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            try:
                await self._client.indices.create(index=self.index_name, body=self._body)
            except RequestError as exc:
                if exc.error != "resource_already_exists_exception":
                    raise
            self._ready = True

    def _actions(self, docs: list[LexicalDoc]) -> list[dict[str, Any]]:
        return [
            {
                "_op_type": "index",
                "_index": self.index_name,
                "_id": chunk_key(d.tenant_id, d.chunk_id),
                "_source": {
                    "chunk_id": d.chunk_id,
                    "tenant_id": d.tenant_id,
                    "knowledge_base_id": d.knowledge_base_id,
                    "document_id": d.document_id,
                    "text": " ".join(self._analyzer.index_terms(d.text)),
                    "title": " ".join(self._analyzer.index_terms(d.title)),
                },
            }
            for d in docs
        ]

    async def _search(
        self, analysed: AnalysedQuery, scope: Scope, limit: int, *, require_identifiers: bool
    ) -> list[Hit]:
        terms = " ".join(analysed.terms)
        filters: list[dict[str, Any]] = [
            {"term": {"tenant_id": scope.tenant_id}},
            {"terms": {"knowledge_base_id": list(scope.knowledge_base_ids)}},
        ]
        if scope.document_ids:
            filters.append({"terms": {"document_id": list(scope.document_ids)}})
        if require_identifiers and analysed.identifiers:
            identifiers = list(analysed.identifiers)
            filters.append(
                {
                    "bool": {
                        "should": [{"terms": {"text": identifiers}}, {"terms": {"title": identifiers}}],
                        "minimum_should_match": 1,
                    }
                }
            )
        body = {
            "size": limit,
            "_source": ["chunk_id"],
            "track_total_hits": False,
            "query": {
                "bool": {
                    "filter": filters,
                    "should": [
                        {"match": {"text": {"query": terms}}},
                        {"match": {"title": {"query": terms, "boost": self._title_boost}}},
                    ],
                    "minimum_should_match": 1,
                }
            },
        }
        response = await self._client.search(index=self.index_name, body=body)
        return [
            Hit(chunk_id=str(hit["_source"]["chunk_id"]), score=float(hit["_score"]))
            for hit in response["hits"]["hits"]
        ]

    async def _delete(self, filters: list[dict[str, Any]]) -> None:
        await self._ensure_index()
        await self._client.delete_by_query(
            index=self.index_name,
            body={"query": {"bool": {"filter": filters}}},
            params={"refresh": "true", "conflicts": "proceed"},
        )


def chunk_key(tenant_id: str, chunk_id: str) -> str:
    """The ``_id`` of one chunk of one tenant; length-prefixed so no two id pairs collide."""
    return f"{len(tenant_id)}:{tenant_id}:{chunk_id}"


def _require(**values: str) -> None:
    for name, value in values.items():
        if not value:
            raise ValueError(f"{name} must not be empty")
