"""The embedded vector index: Qdrant's engine in-process (``qdrant-edge-py``), the default backend.

Layout under ``data_dir``, one directory per collection::

    <collection>/collection.json   dimension; written last, so a directory without it is an
                                   unfinished creation and is cleared by the next ensure_collection
    <collection>/shard/            the engine's shard (WAL + segments)

Points are cosine-distance vectors whose payload carries ``tenant_id`` (keyword index, ``is_tenant``),
``knowledge_base_id`` and ``document_id`` (keyword indexes) and ``chunk_id``; point ids and payload are
built by :mod:`.vector_points`, the same as on a Qdrant server. Every read and delete filters by the
tenant it is given.

Threads and the GIL. The engine is synchronous, so every engine call runs on this index's single
worker thread: writes are serialised and a shard is never closed under a running query. Large
upserts go to the engine in slices of ``UPSERT_SLICE_POINTS`` so searches interleave with them.
qdrant-edge-py (0.9) keeps the GIL for the whole of a call, which is harmless for a query (a few
milliseconds) but not for ``EdgeShard.optimize()`` — merging segments and building the HNSW graph
takes tens of seconds at 50k 384-d points on two cores, and in a thread it would freeze the event
loop all that time. So :meth:`EdgeVectorIndex.optimize` runs it in a child process on a copy of the
shard while this process goes on serving reads *and* writes; writes made meanwhile are recorded,
the optimized copy replaces the live shard by rename and gets them replayed. The old shard is
deleted only once the replay is flushed, and a crash before that falls back to it at the next open
(:func:`_recover_layout`), so no acknowledged write is lost. The event loop still stalls while the
engine loads the new shard (0.1–0.3 s at 50k points).

Until a segment passes the engine's indexing threshold, search is exact brute force over the
filtered points (about 5 ms at 50k here); optimizing matters for large collections. The index
optimizes a collection in the background once ``auto_optimize_points`` points were written since its
last optimization, and ``await index.optimize(name)`` does it on demand, e.g. after a bulk load.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import structlog
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    HnswIndexConfig,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Point,
    Query,
    QueryRequest,
    SearchParams,
    UpdateOperation,
)

from knowsphere_retrieval.adapters.vector_points import (
    CHUNK_ID,
    DOCUMENT_ID,
    KNOWLEDGE_BASE_ID,
    TENANT_ID,
    check_collection_name,
    check_dimension,
    check_limit,
    check_points,
    check_vector,
    payload,
    point_id,
)
from knowsphere_retrieval.domain.ports import Hit, Scope, VectorPoint

log = structlog.get_logger(__name__)

DEFAULT_AUTO_OPTIMIZE_POINTS: Final = 20_000
# Child processes optimizing at once, per index: each uses every core already.
MAX_CONCURRENT_OPTIMIZATIONS: Final = 1
UPSERT_SLICE_POINTS: Final = 512
# Beam width of an HNSW search (the engine's own default is its ef_construct, 100); raised to the
# limit when a caller asks for more hits than this.
SEARCH_HNSW_EF: Final = 128
# The HNSW graph: Qdrant's multitenancy layout. Every query is filtered by one tenant, so no global
# graph (m=0) is built, only links between points of the same tenant (payload_m on the is_tenant
# index) — cheaper to build than a global graph and better at tenant-filtered search.
HNSW_EF_CONSTRUCT: Final = 100
HNSW_PAYLOAD_M: Final = 16
HNSW_FULL_SCAN_THRESHOLD_KB: Final = 10_000

METADATA_FILE: Final = "collection.json"
SHARD_DIR: Final = "shard"
OPTIMIZING_DIR: Final = "shard.optimizing"  # the copy a child process optimizes
RETIRED_DIR: Final = "shard.retired"  # the old shard during the swap
_DISCARDED_PREFIX: Final = ".discarded-"  # renamed away, being deleted

# Run by a child process (see the module docstring); prints 1 when anything was optimized.
OPTIMIZE_SCRIPT = """
import sys
from qdrant_edge import EdgeShard
shard = EdgeShard.load(sys.argv[1])
changed = shard.optimize()
shard.flush()
shard.close()
print(1 if changed else 0)
"""

_P = ParamSpec("_P")
_T = TypeVar("_T")


@dataclass
class _Collection:
    path: Path
    dimension: int
    shard: EdgeShard
    written_since_optimize: int = 0
    # While a child process optimizes a copy: every write applied since the copy was taken.
    replay: list[tuple[UpdateOperation, int]] | None = None


class EdgeVectorIndex:
    """:class:`~knowsphere_retrieval.domain.ports.VectorIndex` on Qdrant's in-process engine."""

    def __init__(
        self, data_dir: str | Path, *, auto_optimize_points: int | None = DEFAULT_AUTO_OPTIMIZE_POINTS
    ) -> None:
        """``auto_optimize_points``: optimize a collection in the background once this many points were
        upserted since its last optimization; ``None`` leaves it to :meth:`optimize`."""
        if auto_optimize_points is not None and auto_optimize_points < 1:
            raise ValueError(f"auto_optimize_points is {auto_optimize_points}; it must be 1 or more")
        self._dir = Path(data_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._auto_optimize_points = auto_optimize_points
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-vector-index")
        self._open: dict[str, _Collection] = {}  # used only on the worker thread
        self._optimize_locks: dict[str, asyncio.Lock] = {}
        self._optimize_slots = asyncio.Semaphore(MAX_CONCURRENT_OPTIMIZATIONS)
        self._background: dict[str, asyncio.Task[bool]] = {}
        self._closing = False
        _remove_discarded(self._dir)

    # --- VectorIndex ----------------------------------------------------------------------------

    async def ensure_collection(self, collection: str, dimension: int) -> None:
        check_collection_name(collection)
        check_dimension(dimension)
        await self._run(self._ensure_sync, collection, dimension)

    async def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        check_collection_name(collection)
        if not points:
            return
        dimension = await self._run(self._dimension_sync, collection)
        if dimension is None:
            raise KeyError(f"collection {collection!r} does not exist; call ensure_collection first")
        check_points(collection, dimension, points)
        written_since_optimize = 0
        for start in range(0, len(points), UPSERT_SLICE_POINTS):
            written_since_optimize = await self._run(
                self._upsert_sync, collection, points[start : start + UPSERT_SLICE_POINTS]
            )
        if (
            self._auto_optimize_points is not None
            and written_since_optimize >= self._auto_optimize_points
            and collection not in self._background
            and not self._optimize_lock(collection).locked()
        ):
            task = asyncio.create_task(
                self._optimize_in_background(collection), name=f"optimize vector collection {collection}"
            )
            self._background[collection] = task
            task.add_done_callback(functools.partial(self._forget_background, collection))

    async def search(self, collection: str, vector: Sequence[float], scope: Scope, limit: int) -> list[Hit]:
        check_collection_name(collection)
        check_limit(limit)
        if limit == 0 or not scope.knowledge_base_ids:
            return []
        return await self._run(self._search_sync, collection, list(vector), scope, limit)

    async def delete_chunks(self, collection: str, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        if not chunk_ids:
            return
        ids: set[Any] = {point_id(tenant_id, chunk_id) for chunk_id in chunk_ids}
        await self._delete(collection, Filter(must=[_match(TENANT_ID, tenant_id), HasIdCondition(ids)]))

    async def delete_document(
        self, collection: str, tenant_id: str, knowledge_base_id: str, document_id: str
    ) -> None:
        await self._delete(
            collection,
            Filter(
                must=[
                    _match(TENANT_ID, tenant_id),
                    _match(KNOWLEDGE_BASE_ID, knowledge_base_id),
                    _match(DOCUMENT_ID, document_id),
                ]
            ),
        )

    async def delete_knowledge_base(self, collection: str, tenant_id: str, knowledge_base_id: str) -> None:
        await self._delete(
            collection,
            Filter(must=[_match(TENANT_ID, tenant_id), _match(KNOWLEDGE_BASE_ID, knowledge_base_id)]),
        )

    async def count(self, collection: str, tenant_id: str, knowledge_base_id: str) -> int:
        check_collection_name(collection)
        return await self._run(self._count_sync, collection, tenant_id, knowledge_base_id)

    async def collections(self) -> list[str]:
        return await self._run(self._collections_sync)

    async def drop_collection(self, collection: str) -> None:
        check_collection_name(collection)
        await self._stop_background(collection)
        async with self._optimize_lock(collection):
            await self._run(self._drop_sync, collection)

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        for collection in list(self._background):
            await self._stop_background(collection)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_all_sync)
        self._executor.shutdown(wait=True)

    # --- optimization -----------------------------------------------------------------------------

    async def optimize(self, collection: str) -> bool:
        """Merge the collection's segments and build its HNSW graph, without blocking the event loop.

        Reads and writes go on meanwhile. Returns whether the engine changed anything; a collection
        that does not exist is left alone (``False``).
        """
        check_collection_name(collection)
        running = self._background.get(collection)
        if running is not None:
            # Let it finish (its failure is logged there), then optimize what was written since.
            await asyncio.wait([running])
        return await self._optimize(collection)

    async def _optimize(self, collection: str) -> bool:
        async with self._optimize_lock(collection), self._optimize_slots:
            try:
                work = await self._run(self._begin_optimize_sync, collection)
                if work is None:
                    return False
                changed = await _optimize_in_child_process(work)
                if changed:
                    await self._run(self._finish_optimize_sync, collection)
                else:  # the copy is the live shard again: nothing to swap
                    await self._run(self._abandon_optimize_sync, collection, counted=True)
            except BaseException:
                # Queued behind whatever step was interrupted, so it cleans up after that step. Once
                # the index is closed it cannot run; the next open clears the copy instead.
                with contextlib.suppress(RuntimeError):
                    await self._run_even_when_closing(self._abandon_optimize_sync, collection)
                raise
            return changed

    async def _optimize_in_background(self, collection: str) -> bool:
        try:
            return await self._optimize(collection)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("vector_collection_optimize_failed", collection=collection)
            return False

    def _forget_background(self, collection: str, task: asyncio.Task[bool]) -> None:
        if self._background.get(collection) is task:
            del self._background[collection]

    async def _stop_background(self, collection: str) -> None:
        task = self._background.get(collection)
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    def _optimize_lock(self, collection: str) -> asyncio.Lock:
        return self._optimize_locks.setdefault(collection, asyncio.Lock())

    # --- plumbing ---------------------------------------------------------------------------------

    async def _run(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if self._closing:
            raise RuntimeError("the vector index is closed")
        return await self._run_even_when_closing(fn, *args, **kwargs)

    async def _run_even_when_closing(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _delete(self, collection: str, condition: Filter) -> None:
        check_collection_name(collection)
        await self._run(self._apply_sync, collection, UpdateOperation.delete_points_by_filter(condition), 0)

    # --- on the worker thread ---------------------------------------------------------------------

    def _load_sync(self, collection: str) -> _Collection | None:
        state = self._open.get(collection)
        if state is not None:
            return state
        path = self._dir / collection
        metadata = path / METADATA_FILE
        if not metadata.is_file():
            return None
        dimension = int(json.loads(metadata.read_text(encoding="utf-8"))["dimension"])
        _recover_layout(path)
        shard = EdgeShard.load(str(path / SHARD_DIR))
        _ensure_payload_indexes(shard)
        info = shard.info()
        state = _Collection(
            path=path,
            dimension=dimension,
            shard=shard,
            written_since_optimize=max(0, info.points_count - info.indexed_vectors_count),
        )
        self._open[collection] = state
        return state

    def _ensure_sync(self, collection: str, dimension: int) -> None:
        state = self._load_sync(collection)
        if state is not None:
            if state.dimension != dimension:
                raise ValueError(
                    f"collection {collection!r} holds {state.dimension}-dimensional vectors; "
                    f"it cannot be used with dimension {dimension}"
                )
            return
        path = self._dir / collection
        if path.exists():  # an unfinished creation: no metadata file yet
            _discard(path)
        config = EdgeConfig(
            vectors=EdgeVectorParams(size=dimension, distance=Distance.Cosine),
            hnsw_config=HnswIndexConfig(
                m=0,
                ef_construct=HNSW_EF_CONSTRUCT,
                full_scan_threshold=HNSW_FULL_SCAN_THRESHOLD_KB,
                payload_m=HNSW_PAYLOAD_M,
            ),
        )
        shard = EdgeShard.create(str(path / SHARD_DIR), config)
        try:
            _ensure_payload_indexes(shard)
            shard.flush()
            _write_atomically(path / METADATA_FILE, json.dumps({"dimension": dimension}))
        except BaseException:
            shard.close()
            _discard(path)
            raise
        self._open[collection] = _Collection(path=path, dimension=dimension, shard=shard)

    def _dimension_sync(self, collection: str) -> int | None:
        state = self._load_sync(collection)
        return None if state is None else state.dimension

    def _upsert_sync(self, collection: str, points: Sequence[VectorPoint]) -> int:
        """Returns how many points were upserted since the collection was last optimized."""
        operation = UpdateOperation.upsert_points(
            [Point(point_id(p.tenant_id, p.chunk_id), _as_list(p.vector), payload(p)) for p in points]
        )
        return self._apply_sync(collection, operation, len(points))

    def _apply_sync(self, collection: str, operation: UpdateOperation, upserted: int) -> int:
        state = self._load_sync(collection)
        if state is None:
            if upserted:
                raise KeyError(f"collection {collection!r} was dropped")
            return 0  # deleting from a collection that does not exist: nothing to do
        state.shard.update(operation)
        state.written_since_optimize += upserted
        if state.replay is not None:
            state.replay.append((operation, upserted))
        return state.written_since_optimize

    def _search_sync(self, collection: str, vector: list[float], scope: Scope, limit: int) -> list[Hit]:
        state = self._load_sync(collection)
        if state is None:
            return []
        check_vector(collection, state.dimension, vector, "query vector")
        must: list[Any] = [
            _match(TENANT_ID, scope.tenant_id),
            _match_any(KNOWLEDGE_BASE_ID, scope.knowledge_base_ids),
        ]
        if scope.document_ids:
            must.append(_match_any(DOCUMENT_ID, scope.document_ids))
        found = state.shard.query(
            QueryRequest(
                limit=limit,
                query=Query.Nearest(vector),
                filter=Filter(must=must),
                with_payload=[CHUNK_ID],
                params=SearchParams(hnsw_ef=max(SEARCH_HNSW_EF, limit)),
            )
        )
        return [Hit(chunk_id=str((p.payload or {})[CHUNK_ID]), score=float(p.score)) for p in found]

    def _count_sync(self, collection: str, tenant_id: str, knowledge_base_id: str) -> int:
        state = self._load_sync(collection)
        if state is None:
            return 0
        condition = Filter(must=[_match(TENANT_ID, tenant_id), _match(KNOWLEDGE_BASE_ID, knowledge_base_id)])
        return int(state.shard.count(CountRequest(exact=True, filter=condition)))

    def _collections_sync(self) -> list[str]:
        return sorted(
            path.name
            for path in self._dir.iterdir()
            if not path.name.startswith(".") and (path / METADATA_FILE).is_file()
        )

    def _drop_sync(self, collection: str) -> None:
        state = self._open.pop(collection, None)
        if state is not None:
            state.shard.close()
        _discard(self._dir / collection)

    def _begin_optimize_sync(self, collection: str) -> Path | None:
        state = self._load_sync(collection)
        if state is None:
            return None
        work = state.path / OPTIMIZING_DIR
        _discard(work)
        state.shard.flush()
        shutil.copytree(state.path / SHARD_DIR, work, copy_function=_copy_keeping_holes)
        state.replay = []
        return work

    def _finish_optimize_sync(self, collection: str) -> None:
        """Swap the optimized copy in and replay onto it the writes made since the copy was taken.

        The old shard is kept (as ``shard.retired``) until the replay is flushed: until then a crash
        falls back to it, and it holds every write.
        """
        state = self._open[collection]
        replay = state.replay or []
        shard_dir, retired = state.path / SHARD_DIR, state.path / RETIRED_DIR
        state.shard.close()
        fresh: EdgeShard | None = None
        try:
            shard_dir.rename(retired)
            (state.path / OPTIMIZING_DIR).rename(shard_dir)
            fresh = EdgeShard.load(str(shard_dir))
            for operation, _ in replay:
                fresh.update(operation)
            fresh.flush()
        except BaseException:
            if fresh is not None:
                fresh.close()
            _recover_layout(state.path)
            state.shard = EdgeShard.load(str(shard_dir))
            raise
        state.shard = fresh
        _discard(retired)
        state.replay = None
        state.written_since_optimize = sum(upserted for _, upserted in replay)

    def _abandon_optimize_sync(self, collection: str, *, counted: bool = False) -> None:
        """Forget the copy. ``counted``: the engine had nothing to do, so the writes before the copy
        no longer call for an optimization."""
        state = self._open.get(collection)
        if state is None:
            return
        if counted and state.replay is not None:
            state.written_since_optimize = sum(upserted for _, upserted in state.replay)
        state.replay = None
        _discard(state.path / OPTIMIZING_DIR)

    def _close_all_sync(self) -> None:
        for state in self._open.values():
            state.shard.flush()
            state.shard.close()
        self._open.clear()


async def _optimize_in_child_process(shard_dir: Path) -> bool:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OPTIMIZE_SCRIPT,
        str(shard_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        detail = err.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"optimizing {shard_dir} failed (exit status {process.returncode}): {detail}")
    return out.strip() == b"1"


def _recover_layout(path: Path) -> None:
    """Undo an optimization swap that a crash interrupted (see ``_finish_optimize_sync``)."""
    shard, retired = path / SHARD_DIR, path / RETIRED_DIR
    if retired.exists():  # the replay onto the new shard may be incomplete: the old one holds everything
        _discard(shard)
        retired.rename(shard)
    _discard(path / OPTIMIZING_DIR)
    _remove_discarded(path)


def _copy_keeping_holes(source: str, target: str) -> str:
    """``shutil.copy2`` that copies only the data of sparse files, leaving their holes as holes.

    The engine preallocates its files sparsely: a 5k-point shard is 19 MB on disk but 152 MB long,
    and a plain copy would write all of it.
    """
    if not hasattr(os, "SEEK_DATA"):
        return str(shutil.copy2(source, target))
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole up to the end
                    break
                raise
            end = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            position = start
            while position < end:
                copied = os.copy_file_range(src.fileno(), dst.fileno(), end - position, position, position)
                if copied == 0:
                    break
                position += copied
            offset = end
        dst.truncate(size)
    shutil.copystat(source, target)
    return target


def _discard(path: Path) -> None:
    """Delete a directory tree; renamed away first, so a crash never leaves half of one in place."""
    if not path.exists():
        return
    doomed = path.with_name(f"{_DISCARDED_PREFIX}{uuid.uuid4().hex}")
    path.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _remove_discarded(directory: Path) -> None:
    for leftover in directory.glob(f"{_DISCARDED_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _ensure_payload_indexes(shard: EdgeShard) -> None:
    existing = shard.info().payload_schema
    wanted = {
        TENANT_ID: KeywordIndexParams(is_tenant=True),
        # Searches filter by knowledge bases inside a tenant's graph; documents are small enough
        # for the payload index alone. Neither gets graph links of its own.
        KNOWLEDGE_BASE_ID: KeywordIndexParams(enable_hnsw=False),
        DOCUMENT_ID: KeywordIndexParams(enable_hnsw=False),
    }
    for field_name, params in wanted.items():
        if field_name not in existing:
            shard.update(UpdateOperation.create_field_index(field_name, params))


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    temporary.replace(path)


def _as_list(vector: Sequence[float]) -> list[float]:
    return vector if isinstance(vector, list) else list(vector)


def _match(key: str, value: str) -> FieldCondition:
    return FieldCondition(key, match=MatchValue(value))


def _match_any(key: str, values: Sequence[str]) -> FieldCondition:
    if len(values) == 1:
        return _match(key, values[0])
    return FieldCondition(key, match=MatchAny(list(values)))
