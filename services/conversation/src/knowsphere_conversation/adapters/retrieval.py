"""Retrieval over gRPC, as the turn runner's ``search`` function."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from knowsphere.retrieval.v1 import retrieval_pb2
from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation.domain.turns import CapabilityUnavailable, Evidence

_UNAVAILABLE_CODES = {
    grpc.StatusCode.UNIMPLEMENTED: "retrieval_unimplemented",
    grpc.StatusCode.UNAVAILABLE: "retrieval_unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "retrieval_timeout",
}


class RetrievalSearch:
    def __init__(self, channel: grpc.aio.Channel, top_k: int) -> None:
        self._stub = CONTRACTS["retrieval"].stub(channel)
        self._top_k = top_k

    async def __call__(self, query: str, knowledge_base_ids: Sequence[str]) -> list[Evidence]:
        request = retrieval_pb2.SearchRequest(
            query=query, knowledge_base_ids=list(knowledge_base_ids), top_k=self._top_k
        )
        try:
            response = await self._stub.Search(request)
        except grpc.aio.AioRpcError as error:
            code = _UNAVAILABLE_CODES.get(error.code())
            if code is None:
                raise
            raise CapabilityUnavailable(code, f"retrieval: {error.details()}") from error
        return [
            Evidence(
                chunk_id=result.chunk_id,
                document_id=result.document_id,
                file_name=result.file_name,
                knowledge_base_id=result.knowledge_base_id,
                text=result.text,
            )
            for result in response.results
        ]
