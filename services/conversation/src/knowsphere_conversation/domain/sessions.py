"""Sessions: a user's conversations, each the thread of its checkpoints.

A session belongs to one tenant and user; every read is by owner, so another caller's session id reads
as missing. Its messages are not stored here: the checkpoint keeps the whole history
(:func:`thread_id` names the thread).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from knowsphere_runtime.identity import Identity

TITLE_CHARS = 60
"""A session without a title takes the first question's first characters."""


def thread_id(identity: Identity, session_or_turn_id: str) -> str:
    """The checkpoint thread of a session (or of a single turn without one) of ``identity``."""
    return f"{identity.tenant_id}/{identity.user_id}/{session_or_turn_id}"


def title_from(question: str) -> str:
    text = " ".join(question.split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


@dataclass(frozen=True)
class SessionRecord:
    id: str
    tenant_id: str
    user_id: str
    title: str
    agent_id: str
    orchestrator_id: str
    application_id: str
    turn_count: int
    create_time: datetime
    update_time: datetime
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionPage:
    sessions: list[SessionRecord]
    next_offset: int | None


class SessionStore(Protocol):
    async def create(self, record: SessionRecord) -> None: ...
    async def get(self, owner: Identity, session_id: str) -> SessionRecord | None: ...
    async def list_sessions(
        self,
        owner: Identity,
        *,
        agent_id: str,
        orchestrator_id: str,
        application_id: str,
        offset: int,
        limit: int,
    ) -> SessionPage: ...
    async def update_title(
        self, owner: Identity, session_id: str, title: str, when: datetime
    ) -> SessionRecord | None: ...
    async def count_turn(self, owner: Identity, session_id: str, title: str, when: datetime) -> None:
        """One more turn; the title is set from ``title`` only while the session has none."""
        ...

    async def delete(self, owner: Identity, session_id: str) -> bool: ...


__all__ = ["TITLE_CHARS", "SessionPage", "SessionRecord", "SessionStore", "thread_id", "title_from"]
