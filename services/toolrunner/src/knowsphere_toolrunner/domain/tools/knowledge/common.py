"""What the knowledge-base tools (doc_retrieval, grep_chunks, list_chunks, get_document_info,
query_knowledge_graph) share: the port to retrieval, its error mapping and the shaping of results.

Each tool is one call to retrieval's RPC of the same purpose. The knowledge bases read are always the
turn's selected ones (``ToolContext.switches``), never ids the model writes; retrieval scopes every
read to the caller's tenant, which travels with the call. Every chunk a tool shows is cited through
the turn's :class:`SourceBook`, so the model sees ``cN`` labels and the same chunk keeps its number
within the turn. A request retrieval refuses for good (a bad pattern, a document it does not know)
reaches the model as an in-band problem; anything else is retried by the executor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import grpc

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1.toolrunner_enums import SourceKind
from knowsphere_clients.errors import ServiceError
from knowsphere_toolrunner.domain.sources import Source
from knowsphere_toolrunner.domain.tools.base import BadArguments, NothingFound

T = TypeVar("T")

MAX_DOCUMENT_IDS = 20
MAX_QUERY_CHARS = 1000
MAX_PATTERN_CHARS = 512
MAX_GREP_MATCHES = 200
CITE_NOTE = "Cite a fact with its source label right after it, e.g. [[c3]]."


class KnowledgeReader(Protocol):
    """The read RPCs of retrieval (``knowsphere_clients.RetrievalClient`` implements them)."""

    async def search(
        self,
        query: str,
        knowledge_base_ids: Sequence[str],
        *,
        top_k: int = 0,
        document_ids: Sequence[str] = (),
        options: rpb.SearchOptions | None = None,
    ) -> rpb.SearchResponse: ...

    async def grep_chunks(self, request: rpb.GrepChunksRequest) -> rpb.GrepChunksResponse: ...

    async def list_chunks(self, request: rpb.ListChunksRequest) -> rpb.ListChunksResponse: ...

    async def get_document_info(self, document_ids: Sequence[str]) -> rpb.GetDocumentInfoResponse: ...

    async def query_knowledge_graph(
        self, request: rpb.QueryKnowledgeGraphRequest
    ) -> rpb.QueryKnowledgeGraphResponse: ...


async def read(call: Callable[[], Awaitable[T]]) -> T:
    """A retrieval call; a refusal that a retry cannot change becomes a problem the model reads."""
    try:
        return await call()
    except ServiceError as error:
        if error.status == grpc.StatusCode.NOT_FOUND:
            raise NothingFound(error.message) from error
        if error.permanent:
            raise BadArguments(error.message) from error
        raise


def headings(path: Sequence[str]) -> str:
    return " > ".join(path)


def chunk_source(item: Any, snippet: str) -> Source:
    return Source(
        kind=SourceKind.CHUNK,
        handle=item.handle,
        chunk_id=item.chunk_id,
        document_id=item.document_id,
        file_name=item.file_name,
        knowledge_base_id=item.knowledge_base_id,
        title=item.file_name,
        snippet=snippet,
    )


def drop_empty(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if v not in ("", None, [], 0) or k in ("position",)}


DOCUMENT_IDS_SCHEMA = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "maxItems": MAX_DOCUMENT_IDS,
    "description": "Only these documents (document_id values from earlier results); omit for all.",
}
