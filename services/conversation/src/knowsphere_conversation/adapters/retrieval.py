"""Retrieval as the turn runner's ``search``: ranked passages through ``RetrievalClient.search``.

A retrieval that cannot serve (not built, unreachable, too slow) is a :class:`CapabilityUnavailable`
with the turn's error code for it (:data:`UNAVAILABLE_CODES`, the one mapping); any other failure goes up
to the turn as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients import RetrievalClient
from knowsphere_clients.errors import DeadlineExceeded, ServiceError, Unavailable, Unimplemented
from knowsphere_conversation.domain.turns import CapabilityUnavailable

UNAVAILABLE_CODES: dict[type[ServiceError], str] = {
    Unimplemented: "retrieval_unimplemented",
    Unavailable: "retrieval_unavailable",
    DeadlineExceeded: "retrieval_timeout",
}


class RetrievalSearch:
    def __init__(self, retrieval: RetrievalClient, top_k: int) -> None:
        self._retrieval = retrieval
        self._top_k = top_k

    async def __call__(self, query: str, knowledge_base_ids: Sequence[str]) -> Sequence[rpb.SearchResult]:
        try:
            response = await self._retrieval.search(query, knowledge_base_ids, top_k=self._top_k)
        except ServiceError as error:
            code = UNAVAILABLE_CODES.get(type(error))
            if code is None:
                raise
            raise CapabilityUnavailable(code, f"retrieval: {error.user_message}") from error
        return response.results
