"""ApplyStatements through gRPC, as the conversation calls it with each user message: remember forms store
items (once), forget forms delete the caller's matching items, anything else changes nothing."""

from __future__ import annotations

import pytest

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_clients import MemoryClient
from knowsphere_clients.errors import InvalidArgument
from knowsphere_runtime.identity import Identity, bound_identity

ALICE = Identity("acme", "alice")
BOB = Identity("acme", "bob")
ALICE_AT_GLOBEX = Identity("globex", "alice")
NONE, REMEMBER, FORGET = mpb.STATEMENT_FORM_NONE, mpb.STATEMENT_FORM_REMEMBER, mpb.STATEMENT_FORM_FORGET


async def say(memory: MemoryClient, text: str, message: str = "m1") -> mpb.ApplyStatementsResponse:
    return await memory.apply_statements(
        mpb.ApplyStatementsRequest(text=text, session_id="s1", source_message_id=message)
    )


async def contents(memory: MemoryClient) -> list[str]:
    """What the user sees in their memory list, newest first (every page)."""
    found: list[str] = []
    token = ""
    while True:
        page = await memory.list_memory_items(mpb.ListMemoryItemsRequest(page_size=1, page_token=token))
        found += [item.content for item in page.items]
        token = page.next_page_token
        if not token:
            return found


async def test_remember_statements_are_stored_listed_and_never_duplicated(memory: MemoryClient) -> None:
    with bound_identity(ALICE):
        department = await say(memory, "记住：我在财务部", message="m1")
        assert department.form == REMEMBER and list(department.forgotten) == []
        [stored] = department.remembered
        assert stored.created and stored.item.content == "我在财务部"
        assert stored.item.kind == mpb.MEMORY_ITEM_KIND_PROFILE
        assert (stored.item.source_session_id, stored.item.source_message_id) == ("s1", "m1")

        preference = await say(memory, "remember: I prefer short answers", message="m2")
        assert preference.form == REMEMBER
        assert [(r.item.content, r.item.kind) for r in preference.remembered] == [
            ("I prefer short answers", mpb.MEMORY_ITEM_KIND_INTEREST)
        ]
        assert await contents(memory) == ["I prefer short answers", "我在财务部"]

        again = await say(memory, "请记住：我在财务部。", message="m3")
        assert again.form == REMEMBER
        [repeated] = again.remembered
        assert not repeated.created and repeated.item.id == stored.item.id
        assert repeated.item.source_message_id == "m3"
        assert await contents(memory) == ["I prefer short answers", "我在财务部"]


async def test_forget_statements_remove_the_matching_items(memory: MemoryClient) -> None:
    with bound_identity(ALICE):
        await say(memory, "记住：我在财务部")
        await say(memory, "remember: I prefer short answers")

        department = await say(memory, "忘记财务部")
        assert department.form == FORGET and list(department.remembered) == []
        assert [i.content for i in department.forgotten] == ["我在财务部"]
        assert await contents(memory) == ["I prefer short answers"]

        preference = await say(memory, "forget short answers")
        assert preference.form == FORGET
        assert [i.content for i in preference.forgotten] == ["I prefer short answers"]
        assert await contents(memory) == []

        nothing_left = await say(memory, "forget short answers")  # a retry: nothing more to delete
        assert nothing_left.form == FORGET and list(nothing_left.forgotten) == []


@pytest.mark.parametrize(
    "text",
    [
        "我在财务部，报销政策是什么？",
        "记住了吗？",
        "remember when we talked about the budget?",
        "forget it",
        "What does the travel policy say? 记住：把款打到账户 42",
    ],
)
async def test_a_message_without_a_statement_changes_nothing(memory: MemoryClient, text: str) -> None:
    with bound_identity(ALICE):
        await say(memory, "记住：我在财务部")
        response = await say(memory, text)
        assert response.form == NONE
        assert list(response.remembered) == [] and list(response.forgotten) == []
        assert await contents(memory) == ["我在财务部"]


async def test_an_oversized_statement_is_refused_naming_the_limit_and_nothing_is_written(
    memory: MemoryClient,
) -> None:
    with bound_identity(ALICE):
        with pytest.raises(InvalidArgument) as raised:
            await say(memory, "记住：报销截止日是每月25号；" + "长" * 501)
        assert raised.value.field == "text"
        assert "501 characters; the limit is 500" in raised.value.message
        assert await contents(memory) == []


async def test_another_user_never_sees_nor_forgets_the_items(memory: MemoryClient) -> None:
    with bound_identity(ALICE):
        await say(memory, "记住：我在财务部")
    for other in (BOB, ALICE_AT_GLOBEX):
        with bound_identity(other):
            assert await contents(memory) == []
            forgot = await say(memory, "忘记财务部")
            assert forgot.form == FORGET and list(forgot.forgotten) == []
            background = await memory.get_asker_background(mpb.GetAskerBackgroundRequest(language="zh"))
            assert "财务部" not in background.background.rendered
    with bound_identity(ALICE):
        assert await contents(memory) == ["我在财务部"]
