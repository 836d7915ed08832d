"""Where the conversation graph keeps its checkpoints: SQLite in the data dir by default, PostgreSQL
in production (``KS_CONVERSATION_CHECKPOINT_URL=postgresql://…``), through LangGraph's own savers
(``langgraph-checkpoint-sqlite`` / ``-postgres``).

:class:`CheckpointStore` is a service component: ``start()`` opens the saver, creates its tables and
compiles the graph on it (``graph``); ``stop()`` closes the connection after the bus has drained.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from knowsphere_conversation.domain.graph import build_graph


async def open_saver(stack: AsyncExitStack, url: str, data_dir: Path) -> BaseCheckpointSaver[Any]:
    """The saver for ``url`` (empty: ``<data_dir>/checkpoints.db``), its tables created."""
    saver: BaseCheckpointSaver[Any]
    if url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            url,
            open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        await pool.open(wait=True)
        stack.push_async_callback(pool.close)
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    else:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        data_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, at start-up
        conn = await aiosqlite.connect(data_dir / "checkpoints.db")
        stack.push_async_callback(conn.close)
        await conn.execute("PRAGMA journal_mode=WAL")
        # As every SQLite store of the platform: a commit is not fsynced on its own (WAL checkpoints
        # are). A crash of the process loses nothing; a power cut may lose the last steps, which the
        # turn then runs again.
        await conn.execute("PRAGMA synchronous=NORMAL")
        saver = AsyncSqliteSaver(conn)
    await saver.setup()  # type: ignore[attr-defined]
    return saver


class CheckpointStore:
    name = "checkpoints"

    def __init__(self, url: str, data_dir: Path) -> None:
        self._url = url
        self._data_dir = data_dir
        self._stack = AsyncExitStack()
        self.graph: Any = None
        self.saver: Any = None

    async def start(self) -> object:
        self.saver = await open_saver(self._stack, self._url, self._data_dir)
        self.graph = build_graph(self.saver)
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self._stack.aclose()


__all__ = ["CheckpointStore", "open_saver"]
