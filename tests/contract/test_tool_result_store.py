"""Conformance suite for the toolrunner's ``ToolResultStore`` (``tool_result_refs`` and artifacts):
every backend must pass it.

Runs against SQLite (a file per test) always, and against PostgreSQL when one answers at
``KS_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``, trust auth):
each test gets a fresh database ``ks_test_<random>`` that is dropped afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from knowsphere.toolrunner.v1.toolrunner_enums import ContentFormat
from knowsphere_toolrunner.adapters.sql_store import SqlToolResultStore
from knowsphere_toolrunner.domain.ports import StoredArtifact, StoredResult, ToolResultStore

T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[ToolResultStore]:
    if request.param == "sqlite":
        sql_store = SqlToolResultStore(f"sqlite+aiosqlite:///{tmp_path}/toolrunner.db")
        await sql_store.open()
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("ToolResultStore"):
        sql_store = SqlToolResultStore(url)
        await sql_store.open()
        try:
            yield sql_store
        finally:
            await sql_store.close()


def result(ref_id: str = "ref_1", tenant: str = "acme", user: str = "alice", **fields: Any) -> StoredResult:
    base = StoredResult(
        ref_id=ref_id,
        tenant_id=tenant,
        user_id=user,
        session_id="s1",
        turn_id="t1",
        tool_name="list_chunks",
        content='{"chunks":[{"text":"年假 25 天 — annual leave"}]}',
        format=ContentFormat.JSON,
        char_count=45,
        summary="JSON object with 1 keys.",
        distilled=False,
        degraded=False,
        create_time=T0,
    )
    return replace(base, **fields)


def artifact(artifact_id: str = "art_1", tenant: str = "acme", user: str = "alice") -> StoredArtifact:
    return StoredArtifact(
        artifact_id=artifact_id,
        tenant_id=tenant,
        user_id=user,
        session_id="s1",
        turn_id="t1",
        tool_name="generate_pptx",
        file_name="年假.pptx",
        content_type="application/vnd.openxmlformats-officedocument.presentationml.presentation",
        size_bytes=6,
        create_time=T0,
    )


async def test_a_stored_result_comes_back_with_every_field(store):
    stored = result(distilled=True, summary="25 days; carry-over until March")
    await store.put_result(stored)
    assert await store.get_result("acme", "alice", "ref_1") == stored


async def test_a_megabyte_of_text_comes_back_unchanged(store):
    text = ("行" + "x" * 99 + "\n") * 10_000  # 1,010,000 characters, multi-byte included
    await store.put_result(result(content=text, format=ContentFormat.TEXT, char_count=len(text)))
    got = await store.get_result("acme", "alice", "ref_1")
    assert got is not None and got.content == text and got.format == ContentFormat.TEXT


async def test_a_page_is_counted_in_characters_not_bytes(store):
    text = "年假" * 10 + "abc"  # 23 characters, 63 bytes
    await store.put_result(result(content=text, char_count=len(text)))
    page = await store.get_result_page("acme", "alice", "ref_1", 18, 4)
    assert page is not None and page.content == "年假ab" and page.char_count == 23
    tail = await store.get_result_page("acme", "alice", "ref_1", 20, 100)
    assert tail is not None and tail.content == "abc"
    past = await store.get_result_page("acme", "alice", "ref_1", 50, 10)
    assert past is not None and past.content == ""
    assert await store.get_result_page("globex", "alice", "ref_1", 0, 10) is None


async def test_a_result_is_invisible_to_another_tenant_and_another_user(store):
    await store.put_result(result())
    assert await store.get_result("globex", "alice", "ref_1") is None
    assert await store.get_result("acme", "bob", "ref_1") is None
    assert await store.get_result("acme", "alice", "ref_unknown") is None


async def test_a_ref_id_is_never_reused(store):
    await store.put_result(result())
    with pytest.raises(Exception):  # noqa: B017 - each backend raises its own integrity error
        await store.put_result(result(tenant="globex", content="other"))
    got = await store.get_result("acme", "alice", "ref_1")
    assert got is not None and got.content == result().content


async def test_an_artifact_comes_back_whole_and_only_to_its_owner(store):
    data = b"PK\x03\x04\x00\xff"
    await store.put_artifact(artifact(), data)
    assert await store.get_artifact("acme", "alice", "art_1") == (artifact(), data)
    assert await store.get_artifact("globex", "alice", "art_1") is None
    assert await store.get_artifact("acme", "bob", "art_1") is None
