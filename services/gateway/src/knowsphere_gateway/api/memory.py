"""The caller's long-term memory (``/api/v1/memory``), backed by the memory service: the items written
from their explicit "remember: …" statements (list, edit, delete) and their frequently consulted
documents. Always the caller's own: another user's item is a 404 like one that never was."""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field

from knowsphere.memory.v1 import memory_pb2 as pb
from knowsphere.memory.v1.memory_enums import MemoryItemKind
from knowsphere_clients import MemoryClient
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES
from knowsphere_gateway.api.knowledge import PageSize
from knowsphere_gateway.api.protojson import RequestBody, json_model, to_json

ItemListJson = json_model(pb.ListMemoryItemsResponse.DESCRIPTOR)
ItemJson = json_model(pb.MemoryItem.DESCRIPTOR)
FrequentListJson = json_model(pb.ListFrequentDocumentsResponse.DESCRIPTOR)


class MemoryItemUpdate(RequestBody):
    content: str | None = Field(default=None, min_length=1, description="the new wording")
    kind: MemoryItemKind | None = Field(default=None, description="profile, interest or fact")


def build_memory_router(memory: MemoryClient, caller: Callable[..., Caller]) -> APIRouter:
    router = APIRouter(prefix="/api/v1/memory", tags=["memory"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    @router.get("/items", response_model=ItemListJson)
    async def list_items(
        who: Who,
        kind: Annotated[list[MemoryItemKind] | None, Query(description="only these kinds")] = None,
        page_size: PageSize = 0,
        page_token: str = "",
    ) -> dict[str, Any]:
        """What KnowSphere remembers about the caller, newest first."""
        request = pb.ListMemoryItemsRequest(
            kinds=[k.to_proto() for k in kind or []], page_size=page_size, page_token=page_token
        )
        with who.bound():
            return to_json(await memory.list_memory_items(request))

    @router.patch("/items/{item_id}", response_model=ItemJson)
    async def update_item(item_id: str, body: MemoryItemUpdate, who: Who) -> dict[str, Any]:
        request = pb.UpdateMemoryItemRequest(memory_item_id=item_id)
        if body.content is not None:
            request.content = body.content
        if body.kind is not None:
            request.kind = body.kind.to_proto()
        with who.bound():
            return to_json((await memory.update_memory_item(request)).item)

    @router.delete("/items/{item_id}", status_code=204)
    async def delete_item(item_id: str, who: Who) -> Response:
        with who.bound():
            await memory.delete_memory_item(pb.DeleteMemoryItemRequest(memory_item_id=item_id))
        return Response(status_code=204)

    @router.get("/frequent-documents", response_model=FrequentListJson)
    async def frequent_documents(who: Who, page_size: PageSize = 0, page_token: str = "") -> dict[str, Any]:
        """The documents the caller's answers cited most (at least twice)."""
        request = pb.ListFrequentDocumentsRequest(page_size=page_size, page_token=page_token)
        with who.bound():
            return to_json(await memory.list_frequent_documents(request))

    return router


__all__ = ["build_memory_router"]
