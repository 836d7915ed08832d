"""The records memory stores, once: long-term items, cited-document hits, and a session's state.

Session summaries and working memory are kept as the contract's own messages (``HandoffDocument``,
``PlanStep``, ``QaPoint``): they cross the service boundary unchanged, so they are not copied into a
second shape here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import MemoryItemKind


@dataclass(frozen=True)
class Owner:
    """Whose memory: every record belongs to one user of one tenant."""

    tenant_id: str
    user_id: str


@dataclass(frozen=True)
class MemoryItemRecord:
    id: str
    kind: MemoryItemKind
    content: str
    normalised_content: str
    source_session_id: str
    source_message_id: str
    create_time: datetime
    update_time: datetime


@dataclass(frozen=True)
class NewItem:
    """An item to remember, already validated and normalised."""

    kind: MemoryItemKind
    content: str
    normalised_content: str


@dataclass(frozen=True)
class RememberOutcome:
    item: MemoryItemRecord
    created: bool


@dataclass(frozen=True)
class CitedDocumentRecord:
    document_id: str
    knowledge_base_id: str
    file_name: str


@dataclass(frozen=True)
class FrequentDocumentRecord:
    document_id: str
    knowledge_base_id: str
    file_name: str
    hit_count: int
    last_cited_time: datetime


@dataclass(frozen=True)
class StoredSummary:
    session_id: str
    handoff: mpb.HandoffDocument
    summary_upto_message_id: str
    revision: int
    trigger_prompt_tokens: int
    update_time: datetime


@dataclass(frozen=True)
class StoredWorkingMemory:
    session_id: str
    plan: tuple[mpb.PlanStep, ...]
    recent_qa: tuple[mpb.QaPoint, ...]
    update_time: datetime


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    records: list[T]
    next_page_token: str


@dataclass(frozen=True)
class BackgroundSources:
    """What the asker background is built from: the newest profile and interest items and the most
    cited documents, each list in its order (newest first; most hits, then latest citation, first)."""

    profile: list[MemoryItemRecord]
    interests: list[MemoryItemRecord]
    documents: list[FrequentDocumentRecord]
