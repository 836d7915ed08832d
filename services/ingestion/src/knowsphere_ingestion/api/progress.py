"""WatchDocumentProgress: the progress of some documents until each is ready or failed, or of every
document of a knowledge base until the caller hangs up.

The workers publish document events on the bus; the API's one subscriber per subject hands them to
this process's watches through a :class:`~knowsphere_runtime.bus.Fanout`, so a thousand watchers cost
no more NATS subscriptions than one. A watch opens its view of the fanout first and reads the current
state second, so no change between the two is lost; each event is answered with the document as the
database holds it then (events only say that something changed, and are not tenant-scoped).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from knowsphere.ingestion.v1 import ingestion_pb2 as pb
from knowsphere_contracts.vocabulary import TERMINAL_STATUSES
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api import lookup
from knowsphere_ingestion.api.bus import DocumentEvent
from knowsphere_ingestion.api.convert import progress_pb
from knowsphere_ingestion.domain.records import Document
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, abort, invalid

MAX_KNOWLEDGE_BASE_DOCUMENTS = 10_000
"""Most documents whose current state a knowledge-base watch starts with."""


class ProgressWatch:
    """WatchDocumentProgress."""

    def __init__(self, *, settings: Settings, store: IngestionStore, events: Fanout[DocumentEvent]) -> None:
        self._settings = settings
        self._store = store
        self._events = events

    async def _target(self, request: pb.WatchDocumentProgressRequest) -> tuple[list[str], str]:
        """(document ids, "") for a watch of documents; ([], knowledge base id) for a knowledge base."""
        target = request.WhichOneof("target")
        if target is None:
            raise invalid("target", "documents or knowledge_base_id is required")
        if target == "knowledge_base_id":
            kb = await lookup.knowledge_base(self._store, request.knowledge_base_id, with_counts=False)
            return [], kb.id
        ids = list(dict.fromkeys(request.documents.document_ids))
        if not ids:
            raise invalid("documents.document_ids", "at least one id is required")
        if len(ids) > self._settings.max_watch_documents:
            raise invalid(
                "documents.document_ids", f"{len(ids)} ids; the limit is {self._settings.max_watch_documents}"
            )
        return ids, ""

    async def _current(self, tenant: str, ids: list[str], kb_id: str) -> list[Document]:
        if not ids:
            return await self._store.list_documents(
                tenant, kb_id, statuses=[], limit=MAX_KNOWLEDGE_BASE_DOCUMENTS, after=None
            )
        found = await self._store.get_documents(tenant, ids)
        missing = set(ids) - {d.id for d in found}
        if missing:
            raise RequestError(
                grpc.StatusCode.NOT_FOUND, f"documents not found: {', '.join(sorted(missing))}"
            )
        return found

    async def WatchDocumentProgress(
        self, request: pb.WatchDocumentProgressRequest, context: Any
    ) -> AsyncIterator[pb.WatchDocumentProgressResponse]:
        tenant = require_identity().tenant_id
        try:
            ids, kb_id = await self._target(request)
        except RequestError as error:
            await abort(context, error)
        watched = frozenset(ids)
        accept: Callable[[DocumentEvent], bool] = (
            (lambda event: not watched.isdisjoint(event.document_ids))
            if ids
            else (lambda event: event.knowledge_base_id == kb_id)
        )
        async with self._events.watch(accept) as events:
            try:
                current = await self._current(tenant, ids, kb_id)
            except RequestError as error:
                await abort(context, error)
            waiting = {d.id for d in current if d.status not in TERMINAL_STATUSES}
            for document in current:
                yield pb.WatchDocumentProgressResponse(progress=progress_pb(document))
            if ids and not waiting:
                return
            async for event in events:
                # Ended ones already had their last state sent.
                changed = [d for d in dict.fromkeys(event.document_ids) if not ids or d in waiting]
                if not changed:
                    continue
                # Deleted meanwhile, or another tenant's documents of the same ids: not found, skipped.
                for document in await self._store.get_documents(tenant, changed):
                    yield pb.WatchDocumentProgressResponse(progress=progress_pb(document))
                    if ids and document.status in TERMINAL_STATUSES:
                        waiting.discard(document.id)
                if ids and not waiting:
                    return
