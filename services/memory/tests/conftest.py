"""A memory service in-process for the tests: real gRPC server, SQLite store, the real client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from knowsphere_clients import MemoryClient
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.api.grpc import build_binding
from knowsphere_memory.settings import Settings
from knowsphere_runtime.rpc.testing import serving


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlMemoryStore]:
    sql = SqlMemoryStore(f"sqlite+aiosqlite:///{tmp_path}/memory.db")
    await sql.open()
    yield sql
    await sql.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path)


@pytest.fixture
async def memory(store: SqlMemoryStore, settings: Settings) -> AsyncIterator[MemoryClient]:
    async with serving("memory", binding=build_binding(settings=settings, store=store)) as channel:
        yield MemoryClient(channel)
