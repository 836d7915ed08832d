"""The gRPC face of the conversation service.

Sessions (CreateSession … DeleteSession), their history (ListMessages, read from the checkpoint) and
CancelTurn are served here; chat turns arrive on the bus (``api/bus.py``). The methods not built yet —
the streaming Chat RPC, agents and orchestrators — answer UNIMPLEMENTED naming the capability. Another
caller's session is NOT_FOUND, never "forbidden".
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere_contracts.events import MAX_SESSION_ID_CHARS
from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.sessions import SessionRecord, SessionStore, thread_id
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_runtime.rpc.errors import answer, invalid, not_found
from knowsphere_sqlstore import decode_page_token, encode_page_token

PENDING_CAPABILITY = "agents, orchestrators and the streaming Chat RPC (chat turns go through the bus)"
MAX_TITLE_CHARS = 200
MAX_METADATA_ENTRIES = 32

History = Callable[[str], Awaitable[Sequence[Message]]]
"""Every message of a checkpoint thread, oldest first."""
Cancel = Callable[[str], Awaitable[bool]]
"""Asks every replica to cancel a turn; True when one was running it."""
Forget = Callable[[str, str], Awaitable[None]]
"""Removes what is kept of a session elsewhere (checkpoint thread, session memory): (thread, session)."""


def _timestamp(when: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def session_message(record: SessionRecord) -> pb.Session:
    return pb.Session(
        id=record.id,
        title=record.title,
        agent_id=record.agent_id,
        orchestrator_id=record.orchestrator_id,
        application_id=record.application_id,
        turn_count=record.turn_count,
        create_time=_timestamp(record.create_time),
        update_time=_timestamp(record.update_time),
        metadata=record.metadata,
    )


ROLES = {"user": pb.MESSAGE_ROLE_USER, "assistant": pb.MESSAGE_ROLE_ASSISTANT, "tool": pb.MESSAGE_ROLE_TOOL}


def history_message(session_id: str, message: Message) -> pb.Message:
    out = pb.Message(
        id=message["id"],
        session_id=session_id,
        turn_id=message["turn_id"],
        role=ROLES[message["role"]],
        status=pb.MESSAGE_STATUS_COMPLETED,
    )
    if message["content"]:
        out.content.append(pb.ContentPart(text=message["content"]))
    for call in message.get("tool_calls", ()):
        out.tool_calls.append(pb.ToolCall(id=call["id"], name=call["name"], arguments_json=call["arguments"]))
    out.tool_call_id = message.get("tool_call_id", "")
    out.tool_name = message.get("name", "")
    return out


def _page(token: str, page_size: int, default: int, maximum: int) -> tuple[int, int]:
    if page_size < 0:
        raise invalid("page_size", "must not be negative")
    try:
        offset = int(decode_page_token(token, 1)[0]) if token else 0
    except ValueError as error:
        raise invalid("page_token", "not a token from a previous response") from error
    return offset, min(page_size or default, maximum)


class ConversationServicer:
    def __init__(
        self,
        sessions: SessionStore,
        history: History,
        cancel: Cancel,
        forget: Forget,
        *,
        default_page_size: int = 50,
        max_page_size: int = 200,
    ) -> None:
        self._sessions = sessions
        self._history = history
        self._cancel = cancel
        self._forget = forget
        self._default_page = default_page_size
        self._max_page = max_page_size

    async def _owned(self, session_id: str) -> SessionRecord:
        if not session_id:
            raise invalid("session_id", "required")
        found = await self._sessions.get(require_identity(), session_id)
        if found is None:
            raise not_found("session", session_id)
        return found

    async def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> pb.CreateSessionResponse:
        async def work() -> pb.CreateSessionResponse:
            if len(request.title) > MAX_TITLE_CHARS:
                raise invalid("title", f"{len(request.title)} characters; the limit is {MAX_TITLE_CHARS}")
            if len(request.metadata) > MAX_METADATA_ENTRIES:
                raise invalid(
                    "metadata", f"{len(request.metadata)} entries; the limit is {MAX_METADATA_ENTRIES}"
                )
            identity = require_identity()
            now = datetime.now(UTC)
            record = SessionRecord(
                id=uuid.uuid4().hex,
                tenant_id=identity.tenant_id,
                user_id=identity.user_id,
                title=request.title.strip(),
                agent_id=request.agent_id,
                orchestrator_id=request.orchestrator_id,
                application_id=request.application_id,
                turn_count=0,
                create_time=now,
                update_time=now,
                metadata=dict(request.metadata),
            )
            await self._sessions.create(record)
            return pb.CreateSessionResponse(session=session_message(record))

        return await answer(context, work)

    async def GetSession(self, request: pb.GetSessionRequest, context: Any) -> pb.GetSessionResponse:
        async def work() -> pb.GetSessionResponse:
            return pb.GetSessionResponse(session=session_message(await self._owned(request.session_id)))

        return await answer(context, work)

    async def ListSessions(self, request: pb.ListSessionsRequest, context: Any) -> pb.ListSessionsResponse:
        async def work() -> pb.ListSessionsResponse:
            offset, size = _page(request.page_token, request.page_size, self._default_page, self._max_page)
            page = await self._sessions.list(
                require_identity(),
                agent_id=request.agent_id,
                orchestrator_id=request.orchestrator_id,
                application_id=request.application_id,
                offset=offset,
                limit=size,
            )
            return pb.ListSessionsResponse(
                sessions=[session_message(r) for r in page.sessions],
                next_page_token=encode_page_token([str(page.next_offset)]) if page.next_offset else "",
            )

        return await answer(context, work)

    async def UpdateSession(self, request: pb.UpdateSessionRequest, context: Any) -> pb.UpdateSessionResponse:
        async def work() -> pb.UpdateSessionResponse:
            record = await self._owned(request.session_id)
            if request.HasField("title"):
                if len(request.title) > MAX_TITLE_CHARS:
                    raise invalid("title", f"{len(request.title)} characters; the limit is {MAX_TITLE_CHARS}")
                updated = await self._sessions.update_title(
                    require_identity(), record.id, request.title.strip(), datetime.now(UTC)
                )
                record = updated or record
            return pb.UpdateSessionResponse(session=session_message(record))

        return await answer(context, work)

    async def DeleteSession(self, request: pb.DeleteSessionRequest, context: Any) -> pb.DeleteSessionResponse:
        async def work() -> pb.DeleteSessionResponse:
            record = await self._owned(request.session_id)
            identity = require_identity()
            await self._forget(thread_id(identity, record.id), record.id)
            await self._sessions.delete(identity, record.id)
            return pb.DeleteSessionResponse()

        return await answer(context, work)

    async def ListMessages(self, request: pb.ListMessagesRequest, context: Any) -> pb.ListMessagesResponse:
        async def work() -> pb.ListMessagesResponse:
            record = await self._owned(request.session_id)
            offset, size = _page(request.page_token, request.page_size, self._default_page, self._max_page)
            messages = [
                m
                for m in await self._history(thread_id(require_identity(), record.id))
                if request.include_tool_messages or m["role"] == "user" or m.get("final", False)
            ]
            if not request.oldest_first:
                messages.reverse()
            page = messages[offset : offset + size]
            more = offset + size < len(messages)
            return pb.ListMessagesResponse(
                messages=[history_message(record.id, m) for m in page],
                next_page_token=encode_page_token([str(offset + size)]) if more else "",
            )

        return await answer(context, work)

    async def CancelTurn(self, request: pb.CancelTurnRequest, context: Any) -> pb.CancelTurnResponse:
        async def work() -> pb.CancelTurnResponse:
            if not request.turn_id or len(request.turn_id) > MAX_SESSION_ID_CHARS:
                raise invalid("turn_id", f"required, at most {MAX_SESSION_ID_CHARS} characters")
            if request.session_id:
                await self._owned(request.session_id)
            return pb.CancelTurnResponse(cancelled=await self._cancel(request.turn_id))

        return await answer(context, work)


def build_binding(servicer: ConversationServicer | None = None) -> ServiceBinding:
    return bind_service(CONTRACTS["conversation"].descriptor, servicer, pending=PENDING_CAPABILITY)


__all__ = ["PENDING_CAPABILITY", "ConversationServicer", "build_binding"]
