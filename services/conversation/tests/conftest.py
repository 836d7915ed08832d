"""Fixtures of the conversation's tests: the session store on SQLite and on PostgreSQL."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from knowsphere_conversation.adapters.sessions_sql import SqlSessionStore

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[SqlSessionStore]:
    if request.param == "sqlite":
        sessions = SqlSessionStore(f"sqlite+aiosqlite:///{tmp_path}/conversation.db")
        await sessions.open()
        yield sessions
        await sessions.close()
        return
    async for url in postgres_database("SessionStore"):
        sessions = SqlSessionStore(url)
        await sessions.open()
        try:
            yield sessions
        finally:
            await sessions.close()
