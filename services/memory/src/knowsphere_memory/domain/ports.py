"""The port memory's storage implements (one SQL adapter for SQLite and PostgreSQL), and its errors.

Every method takes the :class:`~knowsphere_memory.domain.records.Owner` first and reads or writes only
that user's rows: another user's session or item id behaves as if it did not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import MemoryItemKind
from knowsphere_memory.domain.records import (
    BackgroundSources,
    CitedDocumentRecord,
    FrequentDocumentRecord,
    MemoryItemRecord,
    NewItem,
    Owner,
    Page,
    RememberOutcome,
    StoredSummary,
    StoredWorkingMemory,
)


class ItemConflict(Exception):
    """An edit would make a memory item equal to another item of its owner."""


class RevisionConflict(Exception):
    """A summary write expected a revision that is no longer the stored one."""

    def __init__(self, expected: int, stored: int) -> None:
        super().__init__(f"expected revision {expected}, stored revision is {stored}")
        self.expected = expected
        self.stored = stored


class MemoryStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    # --- per session --------------------------------------------------------------------------------

    async def get_summary(self, owner: Owner, session_id: str) -> StoredSummary | None: ...

    async def put_summary(
        self,
        owner: Owner,
        session_id: str,
        handoff: mpb.HandoffDocument,
        summary_upto_message_id: str,
        trigger_prompt_tokens: int,
        expected_revision: int | None,
        now: datetime,
    ) -> StoredSummary:
        """Writes the summary (revision + 1) unless its content equals the stored one (then unchanged).
        Raises :class:`RevisionConflict` when ``expected_revision`` is set and differs from the stored
        revision — except for a content-equal retry whose expectation the same content superseded."""
        ...

    async def get_working_memory(self, owner: Owner, session_id: str) -> StoredWorkingMemory | None: ...

    async def put_working_memory(
        self,
        owner: Owner,
        session_id: str,
        plan: Sequence[mpb.PlanStep],
        recent_qa: Sequence[mpb.QaPoint],
        now: datetime,
    ) -> StoredWorkingMemory: ...

    async def delete_session(self, owner: Owner, session_id: str) -> None: ...

    # --- long-term items ------------------------------------------------------------------------------

    async def remember(
        self,
        owner: Owner,
        items: Sequence[NewItem],
        source_session_id: str,
        source_message_id: str,
        now: datetime,
        new_id: Callable[[], str],
    ) -> list[RememberOutcome]:
        """Stores ``items`` in one transaction; an item equal (kind, normalised content) to one the owner
        has updates that one (wording and source) and comes back with ``created=False``."""
        ...

    async def list_items(
        self,
        owner: Owner,
        kinds: Sequence[MemoryItemKind],
        page_size: int,
        page_token: str,
    ) -> Page[MemoryItemRecord]:
        """Newest first. Raises ValueError naming ``page_token`` for a token it did not issue."""
        ...

    async def update_item(
        self, owner: Owner, item_id: str, kind: MemoryItemKind, content: str, normalised: str, now: datetime
    ) -> MemoryItemRecord | None: ...

    async def delete_item(self, owner: Owner, item_id: str) -> bool: ...

    async def background_sources(
        self,
        owner: Owner,
        *,
        profile_limit: int,
        interest_limit: int,
        min_hits: int,
        knowledge_base_ids: Sequence[str],
        document_limit: int,
    ) -> BackgroundSources:
        """The newest ``profile_limit`` profile and ``interest_limit`` interest items, and the
        ``document_limit`` most cited documents with at least ``min_hits`` hits (of these knowledge bases
        when any are given), read together for the asker background."""
        ...

    # --- document affinity ------------------------------------------------------------------------------

    async def record_citations(
        self,
        owner: Owner,
        turn_id: str,
        documents: Sequence[CitedDocumentRecord],
        cited_at: datetime,
    ) -> bool:
        """One hit per document for the turn, in the transaction that records ``turn_id``; False (nothing
        changed) when the owner's turn was recorded before. Documents forgotten with
        :meth:`forget_document` are not counted again."""
        ...

    async def frequent_documents(
        self,
        owner: Owner,
        min_hits: int,
        knowledge_base_ids: Sequence[str],
        page_size: int,
        page_token: str,
    ) -> Page[FrequentDocumentRecord]:
        """Most hits first (then most recently cited). ValueError naming ``page_token`` for a bad token."""
        ...

    async def forget_document(self, tenant_id: str, document_id: str) -> int:
        """Removes a deleted document from every user's affinity in the tenant, and keeps later
        citations of it from counting; returns the rows removed."""
        ...
