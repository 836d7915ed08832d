"""Property: one user's memory never reaches another user's background or lists, within a tenant or
across tenants (same user name in two tenants), whatever the users remember and cite, in any order,
with turn ids reused between users and redelivered for the same user."""

from __future__ import annotations

import asyncio
import tempfile
from collections import defaultdict
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_clients import MemoryClient
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.api.grpc import build_binding
from knowsphere_memory.settings import Settings
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving

OWNERS = [Identity(tenant, user) for tenant in ("acme", "globex") for user in ("alice", "bob", "carol")]
KINDS = {"profile": mpb.MEMORY_ITEM_KIND_PROFILE, "interest": mpb.MEMORY_ITEM_KIND_INTEREST}

owners = st.sampled_from(OWNERS)
remember = st.tuples(st.just("remember"), owners, st.sampled_from(sorted(KINDS)), st.integers(0, 4))
cite = st.tuples(
    st.just("cite"),
    owners,
    st.sampled_from([f"t{i}" for i in range(5)]),  # few ids: reused across users and for one user
    st.lists(st.sampled_from([f"d{i}" for i in range(4)]), min_size=1, max_size=3),  # shared documents
)
actions = st.lists(st.one_of(remember, cite), max_size=30)


def marker(owner: Identity) -> str:
    return f"{owner.tenant_id}/{owner.user_id}"


async def run(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlMemoryStore(f"sqlite+aiosqlite:///{tmp}/memory.db")
        await store.open()
        items: dict[Identity, set[tuple[str, str]]] = defaultdict(set)
        turns: dict[Identity, set[str]] = defaultdict(set)
        hits: dict[Identity, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        try:
            binding = build_binding(settings=Settings(data_dir=Path(tmp)), store=store)
            async with serving("memory", binding=binding) as channel:
                memory = MemoryClient(channel)
                for step in steps:
                    owner = step[1]
                    with bound_identity(owner):
                        if step[0] == "remember":
                            _, _, kind, n = step
                            content = f"{kind} {n} of {marker(owner)}"
                            await memory.remember(
                                mpb.RememberRequest(
                                    items=[mpb.NewMemoryItem(kind=KINDS[kind], content=content)]
                                )
                            )
                            items[owner].add((kind, content))
                        else:
                            _, _, turn, documents = step
                            await memory.record_cited_documents(
                                mpb.RecordCitedDocumentsRequest(
                                    turn_id=turn,
                                    documents=[
                                        mpb.CitedDocument(
                                            document_id=d, knowledge_base_id="kb", file_name=f"{d}.pdf"
                                        )
                                        for d in documents
                                    ],
                                )
                            )
                            if turn not in turns[owner]:
                                turns[owner].add(turn)
                                for document in set(documents):
                                    hits[owner][document] += 1
                for owner in OWNERS:
                    with bound_identity(owner):
                        background = (
                            await memory.get_asker_background(mpb.GetAskerBackgroundRequest(language="en"))
                        ).background
                        listed = (
                            await memory.list_memory_items(mpb.ListMemoryItemsRequest(page_size=200))
                        ).items
                    others = [marker(o) for o in OWNERS if o != owner]
                    assert not any(f"of {m}" in background.rendered for m in others)
                    assert {("profile", i.content) for i in background.profile} | {
                        ("interest", i.content) for i in background.interests
                    } == items[owner]
                    assert {(mpb.MemoryItemKind.Name(i.kind), i.content) for i in listed} == {
                        (mpb.MemoryItemKind.Name(KINDS[k]), c) for k, c in items[owner]
                    }
                    expected_docs = {d: n for d, n in hits[owner].items() if n >= 2}
                    assert {
                        d.document_id: d.hit_count for d in background.frequent_documents
                    } == expected_docs
        finally:
            await store.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions)
def test_no_users_memory_reaches_another_users_background(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    asyncio.run(run(steps))
