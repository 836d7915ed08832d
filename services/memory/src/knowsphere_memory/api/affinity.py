"""Document affinity and the asker background over gRPC.

Cited documents arrive twice by design — ``RecordCitedDocuments`` and the ``TurnCompleted`` event
(``api/bus.py``) — and both go through :func:`record_turn`: keyed by turn id, so the second is a no-op.
``GetAskerBackground`` reads the newest profile and interest items and the most cited documents and
renders them within ``background_token_budget`` (``knowsphere_memory.domain.background``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere_memory.api import convert
from knowsphere_memory.api.requests import Clock, caller, optional_id, page_size, required_id, utc_now
from knowsphere_memory.domain.background import build_background, language_of
from knowsphere_memory.domain.ports import MemoryStore
from knowsphere_memory.domain.records import CitedDocumentRecord, Owner
from knowsphere_memory.settings import Settings
from knowsphere_runtime.identity import LANGUAGE_KEY
from knowsphere_runtime.rpc.errors import answer, invalid


def cited_documents(
    settings: Settings, documents: Sequence[Any], field: str = "documents"
) -> list[CitedDocumentRecord]:
    """Checked cited documents (anything with document_id, knowledge_base_id, file_name), each once."""
    if len(documents) > settings.max_cited_documents:
        raise invalid(field, f"{len(documents)} documents; the limit is {settings.max_cited_documents}")
    limit = settings.max_id_chars
    records: dict[str, CitedDocumentRecord] = {}
    for i, doc in enumerate(documents):
        document_id = required_id(f"{field}[{i}].document_id", doc.document_id, limit)
        kb = required_id(f"{field}[{i}].knowledge_base_id", doc.knowledge_base_id, limit)
        records.setdefault(document_id, CitedDocumentRecord(document_id, kb, doc.file_name))
    return list(records.values())


async def record_turn(
    store: MemoryStore,
    settings: Settings,
    owner: Owner,
    turn_id: str,
    documents: Sequence[CitedDocumentRecord],
    cited_at: datetime,
) -> bool:
    """One hit per cited document for the turn; False when the turn was recorded before."""
    required_id("turn_id", turn_id, settings.max_id_chars)
    return await store.record_citations(owner, turn_id, documents, cited_at)


def call_language(context: Any) -> str:
    """The call's ``accept-language`` metadata, or empty."""
    for key, value in context.invocation_metadata() or ():
        if key == LANGUAGE_KEY and value:
            return str(value)
    return ""


class AffinityServicer:
    """RecordCitedDocuments, ListFrequentDocuments, GetAskerBackground."""

    def __init__(self, *, settings: Settings, store: MemoryStore, clock: Clock = utc_now) -> None:
        self._settings = settings
        self._store = store
        self._clock = clock

    async def RecordCitedDocuments(self, request: mpb.RecordCitedDocumentsRequest, context: Any) -> Any:
        async def work() -> mpb.RecordCitedDocumentsResponse:
            optional_id("session_id", request.session_id, self._settings.max_id_chars)
            documents = cited_documents(self._settings, request.documents)
            recorded = await record_turn(
                self._store, self._settings, caller(), request.turn_id, documents, self._clock()
            )
            return mpb.RecordCitedDocumentsResponse(recorded=recorded)

        return await answer(context, work)

    async def ListFrequentDocuments(self, request: mpb.ListFrequentDocumentsRequest, context: Any) -> Any:
        async def work() -> mpb.ListFrequentDocumentsResponse:
            min_hits = request.min_hits if request.HasField("min_hits") else self._settings.frequent_min_hits
            if min_hits < 1:
                raise invalid("min_hits", f"{min_hits}; must be at least 1")
            size = page_size(
                "page_size", request.page_size, self._settings.default_page_size, self._settings.max_page_size
            )
            page = await self._store.frequent_documents(
                caller(), min_hits, list(request.knowledge_base_ids), size, request.page_token
            )
            return mpb.ListFrequentDocumentsResponse(
                documents=[convert.frequent_document(r) for r in page.records],
                next_page_token=page.next_page_token,
            )

        return await answer(context, work)

    async def GetAskerBackground(self, request: mpb.GetAskerBackgroundRequest, context: Any) -> Any:
        async def work() -> mpb.GetAskerBackgroundResponse:
            settings = self._settings
            owner = caller()
            language = language_of(request.language or call_language(context), settings.default_language)
            sources = await self._store.background_sources(
                owner,
                profile_limit=settings.background_max_profile_items,
                interest_limit=settings.background_max_interest_items,
                min_hits=settings.frequent_min_hits,
                knowledge_base_ids=list(request.knowledge_base_ids),
                document_limit=settings.background_max_frequent_documents,
            )
            background = build_background(
                sources.profile,
                sources.interests,
                sources.documents,
                language=language,
                token_budget=settings.background_token_budget,
            )
            return mpb.GetAskerBackgroundResponse(
                background=mpb.AskerBackground(
                    profile=[convert.memory_item(r) for r in background.profile],
                    interests=[convert.memory_item(r) for r in background.interests],
                    frequent_documents=[convert.frequent_document(r) for r in background.frequent_documents],
                    rendered=background.rendered,
                )
            )

        return await answer(context, work)
