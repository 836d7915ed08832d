"""The memory client: one typed method per RPC of ``knowsphere.memory.v1.MemoryService``."""

from __future__ import annotations

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_clients.base import ServiceClient

COMPACTION_TIMEOUT_SECONDS = 90.0
"""Deadline of CompactSession. Memory gives its model at most its own limit (60 s by default) and never
more than the call's deadline less a reserve (2 s), then stores the deterministic extract, so the call
answers within this deadline."""


class MemoryClient(ServiceClient):
    service = "memory"

    async def get_session_summary(
        self, request: mpb.GetSessionSummaryRequest
    ) -> mpb.GetSessionSummaryResponse:
        response: mpb.GetSessionSummaryResponse = await self._call("GetSessionSummary", request)
        return response

    async def put_session_summary(
        self, request: mpb.PutSessionSummaryRequest
    ) -> mpb.PutSessionSummaryResponse:
        response: mpb.PutSessionSummaryResponse = await self._call("PutSessionSummary", request)
        return response

    async def compact_session(
        self, request: mpb.CompactSessionRequest, *, timeout: float = COMPACTION_TIMEOUT_SECONDS
    ) -> mpb.CompactSessionResponse:
        response: mpb.CompactSessionResponse = await self._call("CompactSession", request, timeout=timeout)
        return response

    async def get_working_memory(self, request: mpb.GetWorkingMemoryRequest) -> mpb.GetWorkingMemoryResponse:
        response: mpb.GetWorkingMemoryResponse = await self._call("GetWorkingMemory", request)
        return response

    async def put_working_memory(self, request: mpb.PutWorkingMemoryRequest) -> mpb.PutWorkingMemoryResponse:
        response: mpb.PutWorkingMemoryResponse = await self._call("PutWorkingMemory", request)
        return response

    async def delete_session_memory(
        self, request: mpb.DeleteSessionMemoryRequest
    ) -> mpb.DeleteSessionMemoryResponse:
        response: mpb.DeleteSessionMemoryResponse = await self._call("DeleteSessionMemory", request)
        return response

    async def remember(self, request: mpb.RememberRequest) -> mpb.RememberResponse:
        response: mpb.RememberResponse = await self._call("Remember", request)
        return response

    async def apply_statements(self, request: mpb.ApplyStatementsRequest) -> mpb.ApplyStatementsResponse:
        response: mpb.ApplyStatementsResponse = await self._call("ApplyStatements", request)
        return response

    async def list_memory_items(self, request: mpb.ListMemoryItemsRequest) -> mpb.ListMemoryItemsResponse:
        response: mpb.ListMemoryItemsResponse = await self._call("ListMemoryItems", request)
        return response

    async def update_memory_item(self, request: mpb.UpdateMemoryItemRequest) -> mpb.UpdateMemoryItemResponse:
        response: mpb.UpdateMemoryItemResponse = await self._call("UpdateMemoryItem", request)
        return response

    async def delete_memory_item(self, request: mpb.DeleteMemoryItemRequest) -> mpb.DeleteMemoryItemResponse:
        response: mpb.DeleteMemoryItemResponse = await self._call("DeleteMemoryItem", request)
        return response

    async def record_cited_documents(
        self, request: mpb.RecordCitedDocumentsRequest
    ) -> mpb.RecordCitedDocumentsResponse:
        response: mpb.RecordCitedDocumentsResponse = await self._call("RecordCitedDocuments", request)
        return response

    async def list_frequent_documents(
        self, request: mpb.ListFrequentDocumentsRequest
    ) -> mpb.ListFrequentDocumentsResponse:
        response: mpb.ListFrequentDocumentsResponse = await self._call("ListFrequentDocuments", request)
        return response

    async def get_asker_background(
        self, request: mpb.GetAskerBackgroundRequest
    ) -> mpb.GetAskerBackgroundResponse:
        response: mpb.GetAskerBackgroundResponse = await self._call("GetAskerBackground", request)
        return response
