"""The embedded lexical index: BM25 on tantivy (tantivy-py), in-process, one directory on disk.

Terms come from :mod:`knowsphere_retrieval.domain.analysis` and reach tantivy whitespace-joined
into fields that use tantivy's built-in ``whitespace`` tokenizer (no lower-casing, no stemming of
its own), and queries are built from the same terms as term queries — so ``Analyzer.index_terms``
is the only source of terms, and the built-in tokenizer needs no registration when the index is
reopened. Scoring is tantivy's BM25 with its defaults (k1 = 1.2, b = 0.75), summed over the
``text`` field and the ``title`` field (multiplied by ``title_boost``, lower than 1).

Schema: ``key`` (tenant + chunk id, the unit of replacement, so a chunk id reused by another
tenant never overwrites this tenant's chunk), ``chunk_id`` (raw, stored), ``tenant_id``,
``knowledge_base_id``, ``document_id`` (raw, indexed for filters and deletes), ``text`` and
``title`` (pre-analysed terms with frequencies; no positions, BM25 needs none). Filters are
wrapped in constant-score-0 queries so they restrict without changing scores.

Note: BM25 statistics (document frequencies, average length) are over the whole index, all
tenants together — scores differ with other tenants' data, results never include it.

tantivy is synchronous: every call runs on this index's own thread pool. One writer is kept open
for the life of the index (it holds the directory's lock: one ``TantivyLexicalIndex`` per
directory); every upsert batch and every delete is one commit, after which the searcher is
reloaded, so a returned call is visible to the next search. A failed batch is rolled back whole.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import tantivy

from knowsphere_retrieval.domain.analysis import AnalysedQuery, Analyzer
from knowsphere_retrieval.domain.ports import Hit, LexicalDoc, Scope

DEFAULT_TITLE_BOOST = 0.5
DEFAULT_WRITER_HEAP_BYTES = 128_000_000
DEFAULT_WRITER_THREADS = 1
DEFAULT_SEARCH_THREADS = 4

_KEY = "key"
_CHUNK_ID = "chunk_id"
_TENANT = "tenant_id"
_KB = "knowledge_base_id"
_DOC = "document_id"
_TEXT = "text"
_TITLE = "title"
_SCORED_OPTION = "freq"  # term frequencies, no positions

T = TypeVar("T")


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(_KEY, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(_CHUNK_ID, stored=True, tokenizer_name="raw", index_option="basic")
    for name in (_TENANT, _KB, _DOC):
        builder.add_text_field(name, tokenizer_name="raw", index_option="basic")
    for name in (_TEXT, _TITLE):
        builder.add_text_field(name, tokenizer_name="whitespace", index_option=_SCORED_OPTION)
    return builder.build()


def chunk_key(tenant_id: str, chunk_id: str) -> str:
    """One chunk of one tenant; length-prefixed so no pair of ids can produce another's key."""
    return f"{len(tenant_id)}:{tenant_id}:{chunk_id}"


class TantivyLexicalIndex:
    """``LexicalIndex`` on an embedded tantivy index stored in ``data_dir`` (created if missing)."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        analyzer: Analyzer | None = None,
        title_boost: float = DEFAULT_TITLE_BOOST,
        writer_heap_bytes: int = DEFAULT_WRITER_HEAP_BYTES,
        writer_threads: int = DEFAULT_WRITER_THREADS,
        search_threads: int = DEFAULT_SEARCH_THREADS,
    ) -> None:
        if title_boost < 0:
            raise ValueError(f"title_boost must be at least 0, got {title_boost}")
        if search_threads < 1:
            raise ValueError(f"search_threads must be at least 1, got {search_threads}")
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._analyzer = analyzer or Analyzer()
        self._title_boost = title_boost
        self._schema = _schema()
        try:
            self._index = tantivy.Index(self._schema, path=str(self.data_dir), reuse=True)
        except ValueError as exc:
            raise ValueError(
                f"lexical index at {self.data_dir} cannot be opened with this schema ({exc}); "
                "rebuild it from the chunk store"
            ) from exc
        self._index.config_reader(reload_policy="manual")
        # Raises if another writer (another process, or another instance here) holds the lock.
        self._writer: tantivy.IndexWriter | None = self._index.writer(
            heap_size=writer_heap_bytes, num_threads=writer_threads
        )
        self._write_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=search_threads, thread_name_prefix="tantivy-lexical")
        self._closed = False

    # --- LexicalIndex -------------------------------------------------------------------------

    async def upsert(self, docs: Sequence[LexicalDoc]) -> None:
        for i, doc in enumerate(docs):
            for name in ("chunk_id", "tenant_id", "knowledge_base_id", "document_id"):
                if not getattr(doc, name):
                    raise ValueError(f"docs[{i}].{name} must not be empty")
        if docs:
            await self._run(self._upsert_sync, list(docs))

    async def search(self, query: str, scope: Scope, limit: int) -> list[Hit]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if not scope.tenant_id:
            raise ValueError("scope.tenant_id must not be empty")
        if not scope.knowledge_base_ids:
            return []
        return await self._run(self._search_sync, query, scope, limit)

    async def delete_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        _require(tenant_id=tenant_id)
        if not chunk_ids:
            return
        keys = [chunk_key(tenant_id, chunk_id) for chunk_id in chunk_ids]
        await self._run(self._delete_sync, lambda w: [w.delete_documents_by_term(_KEY, k) for k in keys])

    async def delete_document(self, tenant_id: str, knowledge_base_id: str, document_id: str) -> None:
        _require(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document_id=document_id)
        query = self._all_of({_TENANT: tenant_id, _KB: knowledge_base_id, _DOC: document_id})
        await self._run(self._delete_sync, lambda w: w.delete_documents_by_query(query))

    async def delete_knowledge_base(self, tenant_id: str, knowledge_base_id: str) -> None:
        _require(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
        query = self._all_of({_TENANT: tenant_id, _KB: knowledge_base_id})
        await self._run(self._delete_sync, lambda w: w.delete_documents_by_query(query))

    async def count(self, tenant_id: str, knowledge_base_id: str) -> int:
        _require(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
        query = self._all_of({_TENANT: tenant_id, _KB: knowledge_base_id})
        result = await self._run(lambda: self._index.searcher().search(query, 1, count=True))
        return int(result.count or 0)  # type: ignore[attr-defined]  # tantivy's stub omits .count

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_writer)
        self._executor.shutdown(wait=True)

    # --- on the index's threads ---------------------------------------------------------------

    def _upsert_sync(self, docs: list[LexicalDoc]) -> None:
        prepared = [
            (
                chunk_key(d.tenant_id, d.chunk_id),
                tantivy.Document(
                    key=chunk_key(d.tenant_id, d.chunk_id),
                    chunk_id=d.chunk_id,
                    tenant_id=d.tenant_id,
                    knowledge_base_id=d.knowledge_base_id,
                    document_id=d.document_id,
                    text=" ".join(self._analyzer.index_terms(d.text)),
                    title=" ".join(self._analyzer.index_terms(d.title)),
                ),
            )
            for d in docs
        ]

        def write(writer: tantivy.IndexWriter) -> None:
            # Delete-then-add per chunk: a later copy of a chunk id in the same batch wins.
            for key, document in prepared:
                writer.delete_documents_by_term(_KEY, key)
                writer.add_document(document)

        self._commit(write)

    def _delete_sync(self, delete: Callable[[tantivy.IndexWriter], object]) -> None:
        self._commit(delete)

    def _commit(self, change: Callable[[tantivy.IndexWriter], object]) -> None:
        with self._write_lock:
            writer = self._writer
            if writer is None:
                raise RuntimeError(f"lexical index at {self.data_dir} is closed")
            try:
                change(writer)
                writer.commit()
            except BaseException:
                writer.rollback()
                raise
            self._index.reload()

    def _search_sync(self, query: str, scope: Scope, limit: int) -> list[Hit]:
        analysed = self._analyzer.analyse_query(query)
        if not analysed.terms:
            return []
        searcher = self._index.searcher()
        hits = self._search_terms(searcher, analysed, scope, limit, require_identifiers=True)
        if not hits and analysed.identifiers:
            # No chunk in scope has any of the exact identifiers: rank by the terms alone.
            hits = self._search_terms(searcher, analysed, scope, limit, require_identifiers=False)
        return hits

    def _search_terms(
        self,
        searcher: tantivy.Searcher,
        analysed: AnalysedQuery,
        scope: Scope,
        limit: int,
        *,
        require_identifiers: bool,
    ) -> list[Hit]:
        Q, Occur = tantivy.Query, tantivy.Occur
        text = self._any_term(_TEXT, analysed.terms)
        title = Q.boost_query(self._any_term(_TITLE, analysed.terms), self._title_boost)
        clauses = [(Occur.Must, Q.boolean_query([(Occur.Should, text), (Occur.Should, title)]))]
        filters = [
            Q.term_query(self._schema, _TENANT, scope.tenant_id),
            Q.term_set_query(self._schema, _KB, list(scope.knowledge_base_ids)),
        ]
        if scope.document_ids:
            filters.append(Q.term_set_query(self._schema, _DOC, list(scope.document_ids)))
        if require_identifiers and analysed.identifiers:
            filters.append(
                Q.boolean_query(
                    [
                        (Occur.Should, Q.term_set_query(self._schema, _TEXT, list(analysed.identifiers))),
                        (Occur.Should, Q.term_set_query(self._schema, _TITLE, list(analysed.identifiers))),
                    ]
                )
            )
        clauses += [(Occur.Must, Q.const_score_query(f, 0.0)) for f in filters]
        result = searcher.search(Q.boolean_query(clauses), limit, count=False)
        return [
            Hit(chunk_id=str(searcher.doc(address).get_first(_CHUNK_ID)), score=float(score))
            for score, address in result.hits
        ]

    def _any_term(self, field: str, terms: Sequence[str]) -> tantivy.Query:
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, field, t, _SCORED_OPTION))
                for t in terms
            ]
        )

    def _all_of(self, values: dict[str, str]) -> tantivy.Query:
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, tantivy.Query.term_query(self._schema, f, v)) for f, v in values.items()]
        )

    def _close_writer(self) -> None:
        with self._write_lock:
            writer, self._writer = self._writer, None
            if writer is not None:
                writer.wait_merging_threads()  # consumes the writer and releases the directory lock

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise RuntimeError(f"lexical index at {self.data_dir} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)


def _require(**values: str) -> None:
    for name, value in values.items():
        if not value:
            raise ValueError(f"{name} must not be empty")
