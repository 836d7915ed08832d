"""The in-process vector engine's own guarantees, beyond the ``VectorIndex`` conformance suite.

Optimizing runs in a child process on a copy of the shard: reads and writes made meanwhile must be
served and must survive the swap; a crash in the middle of the swap must lose nothing; enough upserts
start an optimization by themselves, and a collection with nothing to optimize is left as it is.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from knowsphere_retrieval.adapters import vector_edge
from knowsphere_retrieval.adapters.vector_edge import OPTIMIZING_DIR, RETIRED_DIR, SHARD_DIR, EdgeVectorIndex
from knowsphere_retrieval.domain.ports import Scope, VectorPoint

DIM = 8
SCOPE = Scope("acme", ("kb-1",))
CHILD_DELAY_SECONDS = 1.0
POLL_SECONDS = 0.01


def points(first: int, count: int, *, doc: str = "d1") -> list[VectorPoint]:
    return [
        VectorPoint(
            chunk_id=f"c{i}",
            tenant_id="acme",
            knowledge_base_id="kb-1",
            document_id=doc,
            vector=[
                float(i % 7 + 1),
                float(i % 3),
                float(i % 5),
                1.0,
                0.5,
                float(i % 2),
                0.25,
                float(i % 11),
            ],
        )
        for i in range(first, first + count)
    ]


async def appears(path: Path, timeout_seconds: float = 10.0) -> None:
    for _ in range(int(timeout_seconds / POLL_SECONDS)):
        if await asyncio.to_thread(path.exists):
            return
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError(f"{path} did not appear within {timeout_seconds} s")


async def test_reads_and_writes_go_on_during_optimize_and_survive_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slower child process gives a wide window in which to read and write.
    monkeypatch.setattr(
        vector_edge,
        "OPTIMIZE_SCRIPT",
        f"import time; time.sleep({CHILD_DELAY_SECONDS})\n{vector_edge.OPTIMIZE_SCRIPT}",
    )
    index = EdgeVectorIndex(tmp_path, auto_optimize_points=None)
    await index.ensure_collection("vectors", DIM)
    await index.upsert("vectors", points(0, 1500))
    # enough deleted points for the engine to vacuum the segment, so optimizing changes the shard
    await index.delete_chunks("vectors", "acme", [f"c{i}" for i in range(400)])

    optimizing = asyncio.create_task(index.optimize("vectors"))
    await appears(tmp_path / "vectors" / OPTIMIZING_DIR)  # the copy is being taken
    await index.upsert("vectors", points(1500, 50, doc="d2"))
    await index.delete_chunks("vectors", "acme", ["c400", "c401"])
    hits = await index.search("vectors", points(1510, 1)[0].vector, SCOPE, limit=1)
    assert not optimizing.done()  # served while the child process was still at work
    assert hits[0].chunk_id == "c1510"

    assert await optimizing is True  # the engine changed the copy, which replaced the live shard
    assert not (tmp_path / "vectors" / OPTIMIZING_DIR).exists()
    assert await index.count("vectors", "acme", "kb-1") == 1148
    assert (await index.search("vectors", points(1540, 1)[0].vector, SCOPE, limit=1))[0].chunk_id == "c1540"
    await index.close()

    reopened = EdgeVectorIndex(tmp_path)
    assert await reopened.count("vectors", "acme", "kb-1") == 1148
    found = {h.chunk_id for h in await reopened.search("vectors", points(0, 1)[0].vector, SCOPE, limit=2000)}
    assert len(found) == 1148
    assert {"c0", "c399", "c400", "c401"}.isdisjoint(found)
    assert {"c402", "c1499", "c1500", "c1549"} <= found
    await reopened.close()


async def test_a_crash_between_the_two_renames_of_the_swap_loses_nothing(tmp_path: Path) -> None:
    index = EdgeVectorIndex(tmp_path)
    await index.ensure_collection("vectors", DIM)
    await index.upsert("vectors", points(0, 20))
    await index.close()
    collection_dir = tmp_path / "vectors"
    # the live shard was moved aside, the half-finished copy never moved in
    (collection_dir / SHARD_DIR).rename(collection_dir / RETIRED_DIR)
    (collection_dir / OPTIMIZING_DIR).mkdir()

    reopened = EdgeVectorIndex(tmp_path)
    assert await reopened.count("vectors", "acme", "kb-1") == 20
    assert sorted(p.name for p in collection_dir.iterdir()) == ["collection.json", SHARD_DIR]
    await reopened.close()


async def test_a_crash_before_the_replay_was_flushed_falls_back_to_the_old_shard(tmp_path: Path) -> None:
    index = EdgeVectorIndex(tmp_path)
    await index.ensure_collection("vectors", DIM)
    await index.upsert("vectors", points(0, 20))
    await index.close()
    collection_dir = tmp_path / "vectors"
    # the old shard set aside, the optimized copy in place but without the last writes
    (collection_dir / SHARD_DIR).rename(collection_dir / RETIRED_DIR)
    index = EdgeVectorIndex(tmp_path / "elsewhere")
    await index.ensure_collection("vectors", DIM)
    await index.upsert("vectors", points(0, 5))
    await index.close()
    shutil.copytree(tmp_path / "elsewhere" / "vectors" / SHARD_DIR, collection_dir / SHARD_DIR)

    reopened = EdgeVectorIndex(tmp_path)
    assert await reopened.count("vectors", "acme", "kb-1") == 20
    assert sorted(p.name for p in collection_dir.iterdir()) == ["collection.json", SHARD_DIR]
    await reopened.close()


async def test_enough_upserts_start_an_optimization_in_the_background(tmp_path: Path) -> None:
    index = EdgeVectorIndex(tmp_path, auto_optimize_points=100)
    await index.ensure_collection("vectors", DIM)
    await index.upsert("vectors", points(0, 60))
    assert not index._background  # below the threshold
    await index.upsert("vectors", points(60, 60))
    background = index._background["vectors"]
    assert await background in (True, False)  # finished without raising
    assert await index.count("vectors", "acme", "kb-1") == 120
    await index.close()


async def test_close_stops_a_running_optimization_and_leaves_no_copy_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        vector_edge, "OPTIMIZE_SCRIPT", f"import time; time.sleep(30)\n{vector_edge.OPTIMIZE_SCRIPT}"
    )
    index = EdgeVectorIndex(tmp_path, auto_optimize_points=10)
    await index.ensure_collection("vectors", DIM)
    await index.upsert("vectors", points(0, 20))
    await appears(tmp_path / "vectors" / OPTIMIZING_DIR)
    await asyncio.wait_for(index.close(), timeout=10)
    assert not (tmp_path / "vectors" / OPTIMIZING_DIR).exists()
    reopened = EdgeVectorIndex(tmp_path)
    assert await reopened.count("vectors", "acme", "kb-1") == 20
    await reopened.close()
