"""Conformance suite for memory's ``MemoryStore``: every backend must pass it.

Runs against SQLite (a file per test) always, and against PostgreSQL when one answers at
``KS_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``, trust auth):
each test gets a fresh database ``ks_test_<random>`` that is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import MemoryItemKind
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.domain.ports import MemoryStore, RevisionConflict
from knowsphere_memory.domain.records import CitedDocumentRecord, NewItem, Owner
from knowsphere_memory.domain.statements import normalise

ALICE = Owner("acme", "alice")
BOB = Owner("acme", "bob")
ALICE_ELSEWHERE = Owner("globex", "alice")
T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
PROFILE, INTEREST, FACT = MemoryItemKind.PROFILE, MemoryItemKind.INTEREST, MemoryItemKind.FACT


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_database: Any
) -> AsyncIterator[MemoryStore]:
    if request.param == "sqlite":
        sql_store = SqlMemoryStore(f"sqlite+aiosqlite:///{tmp_path}/memory.db")
        await sql_store.open()
        yield sql_store
        await sql_store.close()
        return
    async for url in postgres_database("MemoryStore"):
        sql_store = SqlMemoryStore(url)
        await sql_store.open()
        try:
            yield sql_store
        finally:
            await sql_store.close()


_ids = itertools.count()


def new_id() -> str:
    return f"item-{next(_ids):06d}"


def item(content: str, kind: MemoryItemKind = FACT) -> NewItem:
    return NewItem(kind, content, normalise(content))


def doc(document_id: str, kb: str = "kb-1", name: str = "") -> CitedDocumentRecord:
    return CitedDocumentRecord(document_id, kb, name or f"{document_id}.pdf")


def handoff(request: str, *facts: str) -> mpb.HandoffDocument:
    return mpb.HandoffDocument(
        original_request=request,
        phases_done=[mpb.HandoffPhase(title="search", summary="found 3 policies")],
        result_refs=[
            mpb.StoredResultRef(ref_id="ref-1", tool_name="doc_retrieval", summary="s", message_id="m3")
        ],
        key_facts=list(facts),
    )


# --- session summary ------------------------------------------------------------------------------------


async def test_a_session_never_compacted_has_no_summary(store: MemoryStore) -> None:
    assert await store.get_summary(ALICE, "s1") is None


async def test_put_summary_round_trips_every_field_and_counts_revisions(store: MemoryStore) -> None:
    first = await store.put_summary(ALICE, "s1", handoff("q", "a"), "m10", 7000, None, T0)
    assert first.revision == 1
    got = await store.get_summary(ALICE, "s1")
    assert got is not None
    assert got.handoff == handoff("q", "a")
    assert (got.summary_upto_message_id, got.revision, got.trigger_prompt_tokens) == ("m10", 1, 7000)
    assert got.update_time == T0
    second = await store.put_summary(ALICE, "s1", handoff("q", "a", "b"), "m20", 7100, 1, T0 + timedelta(1))
    assert second.revision == 2
    stored = await store.get_summary(ALICE, "s1")
    assert (
        stored is not None
        and stored.summary_upto_message_id == "m20"
        and list(stored.handoff.key_facts)
        == [
            "a",
            "b",
        ]
    )


async def test_put_summary_with_a_stale_revision_is_refused_and_changes_nothing(store: MemoryStore) -> None:
    await store.put_summary(ALICE, "s1", handoff("q", "a"), "m10", 1, None, T0)
    await store.put_summary(ALICE, "s1", handoff("q", "b"), "m20", 1, 1, T0)
    with pytest.raises(RevisionConflict) as raised:
        await store.put_summary(ALICE, "s1", handoff("q", "c"), "m30", 1, 1, T0)
    assert (raised.value.expected, raised.value.stored) == (1, 2)
    stored = await store.get_summary(ALICE, "s1")
    assert stored is not None and list(stored.handoff.key_facts) == ["b"] and stored.revision == 2


async def test_a_retried_put_of_the_same_content_succeeds_without_a_new_revision(store: MemoryStore) -> None:
    await store.put_summary(ALICE, "s1", handoff("q", "a"), "m10", 1, None, T0)
    again = await store.put_summary(ALICE, "s1", handoff("q", "a"), "m10", 1, None, T0 + timedelta(1))
    assert again.revision == 1
    # The retry expected revision 0: the one its first attempt superseded.
    await store.put_summary(ALICE, "s2", handoff("q"), "m1", 1, 0, T0)
    retried = await store.put_summary(ALICE, "s2", handoff("q"), "m1", 1, 0, T0)
    assert retried.revision == 1


async def test_summaries_are_per_user(store: MemoryStore) -> None:
    await store.put_summary(ALICE, "s1", handoff("alice's"), "m1", 1, None, T0)
    assert await store.get_summary(BOB, "s1") is None
    assert await store.get_summary(ALICE_ELSEWHERE, "s1") is None
    # Bob writing "s1" makes his own summary; Alice's stays.
    await store.put_summary(BOB, "s1", handoff("bob's"), "m1", 1, None, T0)
    alice = await store.get_summary(ALICE, "s1")
    assert alice is not None and alice.handoff.original_request == "alice's"


# --- working memory ---------------------------------------------------------------------------------------


async def test_working_memory_is_replaced_and_deleted_with_the_session(store: MemoryStore) -> None:
    plan = [mpb.PlanStep(text="search policies", status=mpb.PLAN_STEP_STATUS_DONE)]
    qa = [mpb.QaPoint(turn_id="t1", question="报销上限？", answer_gist="5000 元")]
    await store.put_working_memory(ALICE, "s1", plan, qa, T0)
    await store.put_summary(ALICE, "s1", handoff("q"), "m1", 1, None, T0)
    got = await store.get_working_memory(ALICE, "s1")
    assert got is not None and list(got.plan) == plan and list(got.recent_qa) == qa
    await store.put_working_memory(ALICE, "s1", [], qa[:0], T0 + timedelta(1))
    replaced = await store.get_working_memory(ALICE, "s1")
    assert replaced is not None and list(replaced.plan) == [] and replaced.update_time == T0 + timedelta(1)
    assert await store.get_working_memory(BOB, "s1") is None
    await store.delete_session(BOB, "s1")  # someone else's delete touches nothing of Alice's
    assert await store.get_summary(ALICE, "s1") is not None
    await store.delete_session(ALICE, "s1")
    assert await store.get_working_memory(ALICE, "s1") is None
    assert await store.get_summary(ALICE, "s1") is None
    await store.delete_session(ALICE, "s1")  # nothing left: still fine


# --- long-term items --------------------------------------------------------------------------------------


async def test_remember_creates_then_updates_the_same_statement(store: MemoryStore) -> None:
    [first] = await store.remember(ALICE, [item("我是财务部的", PROFILE)], "s1", "m1", T0, new_id)
    assert first.created and first.item.content == "我是财务部的"
    [again] = await store.remember(
        ALICE, [item("我是财务部的。 ", PROFILE)], "s2", "m9", T0 + timedelta(1), new_id
    )
    assert not again.created
    assert again.item.id == first.item.id
    assert (again.item.source_session_id, again.item.source_message_id) == ("s2", "m9")
    page = await store.list_items(ALICE, [], 50, "")
    assert [r.id for r in page.records] == [first.item.id]
    assert page.records[0].create_time == T0


async def test_the_same_content_of_another_kind_or_user_is_another_item(store: MemoryStore) -> None:
    [a] = await store.remember(ALICE, [item("tax law", INTEREST)], "", "", T0, new_id)
    [b] = await store.remember(ALICE, [item("tax law", FACT)], "", "", T0, new_id)
    [c] = await store.remember(BOB, [item("tax law", INTEREST)], "", "", T0, new_id)
    assert a.created and b.created and c.created
    assert len({a.item.id, b.item.id, c.item.id}) == 3


async def test_one_call_with_an_item_twice_stores_it_once(store: MemoryStore) -> None:
    outcomes = await store.remember(ALICE, [item("x1"), item("X1")], "", "", T0, new_id)
    assert [o.created for o in outcomes] == [True, False]
    assert outcomes[0].item.id == outcomes[1].item.id


async def test_concurrent_remember_of_the_same_item_makes_one_row(store: MemoryStore) -> None:
    results = await asyncio.gather(
        *(store.remember(ALICE, [item("VPN is vpn.acme.com")], "", "", T0, new_id) for _ in range(5))
    )
    ids = {outcomes[0].item.id for outcomes in results}
    assert len(ids) == 1
    assert sum(outcomes[0].created for outcomes in results) == 1


async def test_list_items_is_newest_first_paged_and_filtered_by_kind(store: MemoryStore) -> None:
    for i in range(7):
        kind = PROFILE if i % 2 else INTEREST
        await store.remember(ALICE, [item(f"item {i}", kind)], "", "", T0 + timedelta(seconds=i // 2), new_id)
    await store.remember(BOB, [item("bob's")], "", "", T0, new_id)
    seen: list[str] = []
    token = ""
    while True:
        page = await store.list_items(ALICE, [], 3, token)
        assert len(page.records) <= 3
        seen += [r.content for r in page.records]
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == 7 and "bob's" not in seen
    # Newest first (items 6, then 5/4, …); equal times fall back to the id.
    assert seen[0] == "item 6"
    profiles = await store.list_items(ALICE, [PROFILE], 50, "")
    assert sorted(r.content for r in profiles.records) == ["item 1", "item 3", "item 5"]
    with pytest.raises(ValueError, match="page_token"):
        await store.list_items(
            ALICE, [INTEREST], 3, (await store.list_items(ALICE, [], 3, "")).next_page_token
        )
    with pytest.raises(ValueError, match="page_token"):
        await store.list_items(ALICE, [], 3, "garbage!")


async def test_delete_item_only_deletes_the_owners_item(store: MemoryStore) -> None:
    [mine] = await store.remember(ALICE, [item("mine")], "", "", T0, new_id)
    assert not await store.delete_item(BOB, mine.item.id)
    assert not await store.delete_item(ALICE_ELSEWHERE, mine.item.id)
    assert await store.delete_item(ALICE, mine.item.id)
    assert not await store.delete_item(ALICE, mine.item.id)
    assert (await store.list_items(ALICE, [], 10, "")).records == []


async def test_background_sources_are_the_newest_items_and_most_cited_documents(store: MemoryStore) -> None:
    for i in range(5):
        await store.remember(ALICE, [item(f"p{i}", PROFILE)], "", "", T0 + timedelta(seconds=i), new_id)
    await store.remember(ALICE, [item("i0", INTEREST), item("f0", FACT)], "", "", T0, new_id)
    await store.remember(BOB, [item("bob's", PROFILE)], "", "", T0, new_id)
    for turn, documents in enumerate([["a", "b", "c"], ["a", "b", "c"], ["a", "b"], ["a"]]):
        await store.record_citations(
            ALICE, f"t{turn}", [doc(d, "kb-2" if d == "b" else "kb-1") for d in documents], T0
        )
    await store.record_citations(ALICE, "t9", [doc("c")], T0 + timedelta(hours=1))

    got = await store.background_sources(
        ALICE, profile_limit=3, interest_limit=10, min_hits=2, knowledge_base_ids=[], document_limit=2
    )
    assert [r.content for r in got.profile] == ["p4", "p3", "p2"]
    assert [r.content for r in got.interests] == ["i0"]
    assert got.profile[0].kind == PROFILE and got.profile[0].create_time == T0 + timedelta(seconds=4)
    assert [(d.document_id, d.hit_count) for d in got.documents] == [("a", 4), ("c", 3)]
    only_kb1 = await store.background_sources(
        ALICE, profile_limit=0, interest_limit=0, min_hits=2, knowledge_base_ids=["kb-1"], document_limit=10
    )
    assert (only_kb1.profile, only_kb1.interests) == ([], [])
    assert [d.document_id for d in only_kb1.documents] == ["a", "c"]
    assert only_kb1.documents[1].last_cited_time == T0 + timedelta(hours=1)
    bob = await store.background_sources(
        BOB, profile_limit=10, interest_limit=10, min_hits=1, knowledge_base_ids=[], document_limit=10
    )
    assert ([r.content for r in bob.profile], bob.interests, bob.documents) == (["bob's"], [], [])
    nothing = await store.background_sources(
        ALICE_ELSEWHERE,
        profile_limit=10,
        interest_limit=10,
        min_hits=1,
        knowledge_base_ids=[],
        document_limit=10,
    )
    assert (nothing.profile, nothing.interests, nothing.documents) == ([], [], [])


# --- document affinity ------------------------------------------------------------------------------------


async def test_a_document_becomes_frequent_at_two_hits_from_two_turns(store: MemoryStore) -> None:
    assert await store.record_citations(ALICE, "t1", [doc("d1"), doc("d2")], T0)
    assert (await store.frequent_documents(ALICE, 2, [], 10, "")).records == []
    assert await store.record_citations(ALICE, "t2", [doc("d1")], T0 + timedelta(1))
    [d1] = (await store.frequent_documents(ALICE, 2, [], 10, "")).records
    assert (d1.document_id, d1.hit_count, d1.last_cited_time) == ("d1", 2, T0 + timedelta(1))
    assert (await store.frequent_documents(BOB, 1, [], 10, "")).records == []


async def test_the_same_turn_counts_once_even_redelivered_and_with_duplicates(store: MemoryStore) -> None:
    assert await store.record_citations(ALICE, "t1", [doc("d1"), doc("d1")], T0)
    assert not await store.record_citations(ALICE, "t1", [doc("d1")], T0)
    results = await asyncio.gather(*(store.record_citations(ALICE, "t2", [doc("d1")], T0) for _ in range(4)))
    assert sorted(results) == [False, False, False, True]
    [d1] = (await store.frequent_documents(ALICE, 1, [], 10, "")).records
    assert d1.hit_count == 2


async def test_a_late_older_turn_does_not_move_the_last_citation_back(store: MemoryStore) -> None:
    await store.record_citations(ALICE, "t2", [doc("d1")], T0 + timedelta(hours=1))
    await store.record_citations(ALICE, "t1", [doc("d1")], T0)
    [d1] = (await store.frequent_documents(ALICE, 1, [], 10, "")).records
    assert d1.hit_count == 2 and d1.last_cited_time == T0 + timedelta(hours=1)


async def test_frequent_documents_rank_filter_and_page(store: MemoryStore) -> None:
    turn = itertools.count()
    for document, hits, kb in (
        ("a", 5, "kb-1"),
        ("b", 3, "kb-2"),
        ("c", 3, "kb-1"),
        ("d", 2, "kb-2"),
        ("e", 1, "kb-1"),
    ):
        for _ in range(hits):
            await store.record_citations(ALICE, f"t{next(turn)}", [doc(document, kb)], T0)
    pages: list[list[str]] = []
    token = ""
    while True:
        page = await store.frequent_documents(ALICE, 2, [], 2, token)
        pages.append([r.document_id for r in page.records])
        token = page.next_page_token
        if not token:
            break
    assert pages == [["a", "b"], ["c", "d"]]
    only_kb2 = await store.frequent_documents(ALICE, 2, ["kb-2"], 10, "")
    assert [r.document_id for r in only_kb2.records] == ["b", "d"]
    with pytest.raises(ValueError, match="page_token"):
        await store.frequent_documents(
            ALICE, 3, [], 2, (await store.frequent_documents(ALICE, 2, [], 2, "")).next_page_token
        )


async def test_a_forgotten_document_leaves_every_users_affinity_and_is_not_counted_again(
    store: MemoryStore,
) -> None:
    for owner in (ALICE, BOB, ALICE_ELSEWHERE):
        await store.record_citations(owner, "t1", [doc("d1"), doc("d2")], T0)
        await store.record_citations(owner, "t2", [doc("d1"), doc("d2")], T0)
    assert await store.forget_document("acme", "d1") == 2
    for owner in (ALICE, BOB):
        assert [r.document_id for r in (await store.frequent_documents(owner, 1, [], 10, "")).records] == [
            "d2"
        ]
    # Another tenant's document of the same id is not touched.
    assert len((await store.frequent_documents(ALICE_ELSEWHERE, 1, [], 10, "")).records) == 2
    # A late event citing the deleted document does not bring it back.
    await store.record_citations(ALICE, "t3", [doc("d1")], T0)
    assert [r.document_id for r in (await store.frequent_documents(ALICE, 1, [], 10, "")).records] == ["d2"]
