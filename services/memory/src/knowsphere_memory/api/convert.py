"""Memory's records to the contract's messages (and the one message the other way, a session message for
compaction): one conversion per shape, used by every handler."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere.memory.v1 import memory_pb2 as mpb
from knowsphere.memory.v1.memory_enums import SessionMessageRole
from knowsphere_memory.domain.handoff import SessionMessage
from knowsphere_memory.domain.records import (
    FrequentDocumentRecord,
    MemoryItemRecord,
    StoredSummary,
    StoredWorkingMemory,
)


def timestamp(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def memory_item(record: MemoryItemRecord) -> mpb.MemoryItem:
    return mpb.MemoryItem(
        id=record.id,
        kind=record.kind.to_proto(),
        content=record.content,
        source_session_id=record.source_session_id,
        source_message_id=record.source_message_id,
        create_time=timestamp(record.create_time),
    )


def frequent_document(record: FrequentDocumentRecord) -> mpb.FrequentDocument:
    return mpb.FrequentDocument(
        document_id=record.document_id,
        knowledge_base_id=record.knowledge_base_id,
        file_name=record.file_name,
        hit_count=record.hit_count,
        last_cited_time=timestamp(record.last_cited_time),
    )


def session_summary(session_id: str, stored: StoredSummary | None) -> mpb.SessionSummary:
    if stored is None:
        return mpb.SessionSummary(session_id=session_id)
    return mpb.SessionSummary(
        session_id=session_id,
        handoff=stored.handoff,
        summary_upto_message_id=stored.summary_upto_message_id,
        revision=stored.revision,
        trigger_prompt_tokens=stored.trigger_prompt_tokens,
        update_time=timestamp(stored.update_time),
    )


def working_memory(session_id: str, stored: StoredWorkingMemory | None) -> mpb.WorkingMemory:
    if stored is None:
        return mpb.WorkingMemory(session_id=session_id)
    return mpb.WorkingMemory(
        session_id=session_id,
        plan=list(stored.plan),
        recent_qa=list(stored.recent_qa),
        update_time=timestamp(stored.update_time),
    )


def session_message(message: mpb.SessionMessage, role: SessionMessageRole) -> SessionMessage:
    """A contract session message (its role already checked) as compaction reads it."""
    return SessionMessage(
        id=message.id,
        role=role.value,
        content=message.content,
        tool_call_ids=tuple(message.tool_call_ids),
        tool_call_id=message.tool_call_id,
        tool_name=message.tool_name,
    )
