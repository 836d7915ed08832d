"""Long-term memory items over gRPC: ApplyStatements, Remember, ListMemoryItems, DeleteMemoryItem.

``ApplyStatements`` receives the text of one user message and applies the explicit statement it opens
with (``knowsphere_memory.domain.statements``): a remember form stores its items, a forget form deletes
the caller's matching items, anything else changes nothing. ``Remember`` receives items a caller already
took from a statement. Both check every item before storing any, so a bad item leaves nothing
half-written, and an item equal (kind and normalised content) to one the user has updates that one and
comes back with ``created = false``.
"""

from __future__ import annotations

import itertools
import secrets
import time
from typing import Any

import grpc
from opentelemetry import trace

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import MemoryItemKind, StatementForm
from knowsphere_memory.api import convert
from knowsphere_memory.api.requests import Clock, caller, optional_id, page_size, required_id, utc_now
from knowsphere_memory.domain.ports import ItemConflict, MemoryStore
from knowsphere_memory.domain.records import MemoryItemRecord, NewItem, Owner
from knowsphere_memory.domain.statements import (
    USER_ROLE,
    MemoryTextTooLong,
    matching_items,
    normalise,
    parse_forget,
    parse_remember,
)
from knowsphere_memory.settings import Settings
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid, not_found
from knowsphere_telemetry import attributes

tracer = trace.get_tracer("knowsphere.memory")


class ItemIds:
    """Item ids that sort in creation order (microseconds, then a counter, then randomness), so the
    items of one Remember list newest-last-stated first like items of separate calls."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def __call__(self) -> str:
        sequence = next(self._counter) % 0x1000000
        return f"{time.time_ns() // 1000:014x}{sequence:06x}{secrets.token_hex(6)}"


class ItemsServicer:
    def __init__(self, *, settings: Settings, store: MemoryStore, clock: Clock = utc_now) -> None:
        self._settings = settings
        self._store = store
        self._clock = clock
        self._new_id = ItemIds()

    def _new_items(self, request: mpb.RememberRequest) -> list[NewItem]:
        limit = self._settings.remember_max_items
        if not request.items:
            raise invalid("items", "at least one item is required")
        if len(request.items) > limit:
            raise invalid("items", f"{len(request.items)} items; the limit is {limit}")
        max_chars = self._settings.memory_item_max_chars
        items: list[NewItem] = []
        for i, item in enumerate(request.items):
            kind = MemoryItemKind.from_number(item.kind)
            if kind is None:
                raise invalid(f"items[{i}].kind", "must be profile, interest or fact")
            content = item.content.strip()
            if len(content) > max_chars:
                raise invalid(f"items[{i}].content", f"{len(content)} characters; the limit is {max_chars}")
            key = normalise(content)
            if not key:
                raise invalid(f"items[{i}].content", "empty")
            items.append(NewItem(kind, content, key))
        return items

    async def Remember(self, request: mpb.RememberRequest, context: Any) -> Any:
        async def work() -> mpb.RememberResponse:
            items = self._new_items(request)
            session = optional_id("session_id", request.session_id, self._settings.max_id_chars)
            message = optional_id("source_message_id", request.source_message_id, self._settings.max_id_chars)
            outcomes = await self._store.remember(
                caller(), items, session, message, self._clock(), self._new_id
            )
            return mpb.RememberResponse(
                items=[
                    mpb.RememberedItem(item=convert.memory_item(o.item), created=o.created) for o in outcomes
                ]
            )

        return await answer(context, work)

    async def ApplyStatements(self, request: mpb.ApplyStatementsRequest, context: Any) -> Any:
        async def work() -> mpb.ApplyStatementsResponse:
            settings = self._settings
            session = optional_id("session_id", request.session_id, settings.max_id_chars)
            message = optional_id("source_message_id", request.source_message_id, settings.max_id_chars)
            owner = caller()
            with tracer.start_as_current_span("memory.statements") as span:
                # The request holds the user's own message by contract, hence the user role: a document
                # or tool result sent here would be a caller's bug the parser cannot see.
                try:
                    stated = parse_remember(
                        USER_ROLE,
                        request.text,
                        max_items=settings.remember_max_items,
                        max_chars=settings.memory_item_max_chars,
                    )
                except MemoryTextTooLong as error:
                    raise invalid("text", str(error)) from None
                form = StatementForm.NONE
                response = mpb.ApplyStatementsResponse()
                if stated:
                    items = [NewItem(i.kind, i.content, normalise(i.content)) for i in stated]
                    outcomes = await self._store.remember(
                        owner, items, session, message, self._clock(), self._new_id
                    )
                    form = StatementForm.REMEMBER
                    response.remembered.extend(
                        mpb.RememberedItem(item=convert.memory_item(o.item), created=o.created)
                        for o in outcomes
                    )
                elif (target := parse_forget(USER_ROLE, request.text)) is not None:
                    form = StatementForm.FORGET
                    for item in matching_items(target, await self._all_items(owner), lambda r: r.content):
                        if await self._store.delete_item(owner, item.id):
                            response.forgotten.append(convert.memory_item(item))
                response.form = form.to_proto()
                span.set_attribute(attributes.MEMORY_STATEMENT_FORM, form.value)
                span.set_attribute(attributes.MEMORY_REMEMBERED_ITEMS, len(response.remembered))
                span.set_attribute(attributes.MEMORY_FORGOTTEN_ITEMS, len(response.forgotten))
            return response

        return await answer(context, work)

    async def _all_items(self, owner: Owner) -> list[MemoryItemRecord]:
        """Every item of the owner (a forget statement is matched against all of them)."""
        records: list[MemoryItemRecord] = []
        token = ""
        while True:
            page = await self._store.list_items(owner, [], self._settings.max_page_size, token)
            records += page.records
            token = page.next_page_token
            if not token:
                return records

    async def ListMemoryItems(self, request: mpb.ListMemoryItemsRequest, context: Any) -> Any:
        async def work() -> mpb.ListMemoryItemsResponse:
            kinds: list[MemoryItemKind] = []
            for i, number in enumerate(request.kinds):
                kind = MemoryItemKind.from_number(number)
                if kind is None:
                    raise invalid(f"kinds[{i}]", "must be profile, interest or fact")
                kinds.append(kind)
            size = page_size(
                "page_size", request.page_size, self._settings.default_page_size, self._settings.max_page_size
            )
            page = await self._store.list_items(caller(), kinds, size, request.page_token)
            return mpb.ListMemoryItemsResponse(
                items=[convert.memory_item(r) for r in page.records], next_page_token=page.next_page_token
            )

        return await answer(context, work)

    async def UpdateMemoryItem(self, request: mpb.UpdateMemoryItemRequest, context: Any) -> Any:
        async def work() -> mpb.UpdateMemoryItemResponse:
            item_id = required_id("memory_item_id", request.memory_item_id, self._settings.max_id_chars)
            owner = caller()
            current = next((r for r in await self._all_items(owner) if r.id == item_id), None)
            if current is None:
                raise not_found("memory item", item_id)
            kind = current.kind
            if request.kind:
                found = MemoryItemKind.from_number(request.kind)
                if found is None:
                    raise invalid("kind", "must be profile, interest or fact")
                kind = found
            content = request.content.strip() if request.HasField("content") else current.content
            max_chars = self._settings.memory_item_max_chars
            if len(content) > max_chars:
                raise invalid("content", f"{len(content)} characters; the limit is {max_chars}")
            key = normalise(content)
            if not key:
                raise invalid("content", "empty")
            try:
                updated = await self._store.update_item(owner, item_id, kind, content, key, self._clock())
            except ItemConflict:
                raise RequestError(
                    grpc.StatusCode.ALREADY_EXISTS, "another memory item already says this", field="content"
                ) from None
            if updated is None:
                raise not_found("memory item", item_id)
            return mpb.UpdateMemoryItemResponse(item=convert.memory_item(updated))

        return await answer(context, work)

    async def DeleteMemoryItem(self, request: mpb.DeleteMemoryItemRequest, context: Any) -> Any:
        async def work() -> mpb.DeleteMemoryItemResponse:
            item_id = required_id("memory_item_id", request.memory_item_id, self._settings.max_id_chars)
            if not await self._store.delete_item(caller(), item_id):
                raise not_found("memory item", item_id)
            return mpb.DeleteMemoryItemResponse()

        return await answer(context, work)
