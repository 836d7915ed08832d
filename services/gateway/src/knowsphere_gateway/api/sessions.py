"""Sessions and their history (``/api/v1/sessions``), and cancelling a turn, backed by the
conversation service. Another user's session is a 404 like one that never was.

A session made with an application's token belongs to the application (``application_id``) and runs
its orchestrator; naming another agent or orchestrator then is a 400 naming the field."""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import Field

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere_clients import ConversationClient
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES, HttpError
from knowsphere_gateway.api.knowledge import PageSize
from knowsphere_gateway.api.protojson import RequestBody, from_json, json_model, to_json

SessionJson = json_model(pb.Session.DESCRIPTOR)
SessionListJson = json_model(pb.ListSessionsResponse.DESCRIPTOR)
MessageListJson = json_model(pb.ListMessagesResponse.DESCRIPTOR)
CancelJson = json_model(pb.CancelTurnResponse.DESCRIPTOR)


class SessionCreate(RequestBody):
    title: str = Field(default="", max_length=200, description="empty: the first question titles it")
    agent_id: str = Field(default="", max_length=128)
    orchestrator_id: str = Field(default="", max_length=128)
    metadata: dict[str, str] = Field(default_factory=dict, max_length=32)


class SessionUpdate(RequestBody):
    title: str | None = Field(default=None, max_length=200)


def build_sessions_router(conversation: ConversationClient, caller: Callable[..., Caller]) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["sessions"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    @router.post("/sessions", status_code=201, response_model=SessionJson)
    async def create_session(body: SessionCreate, who: Who) -> dict[str, Any]:
        """A new conversation; pass its id as ``session_id`` to ``POST /api/v1/chat/turns``. With an
        application's token, the application's session running its orchestrator."""
        fields: dict[str, Any] = body.model_dump(by_alias=True, exclude_unset=True)
        application = who.application
        if application is not None:
            for field, allowed in (("agent_id", ""), ("orchestrator_id", application.orchestrator_id)):
                if fields.get(field) and fields[field] != allowed:
                    raise HttpError(
                        400,
                        "invalid_argument",
                        f"{field}: a session of application {application.name} runs its orchestrator "
                        f"{application.orchestrator_id}; leave {field} out",
                        field=field,
                    )
            fields.update(application_id=application.id, orchestrator_id=application.orchestrator_id)
        with who.bound():
            return to_json(await conversation.create_session(from_json(pb.CreateSessionRequest, fields)))

    @router.get("/sessions", response_model=SessionListJson)
    async def list_sessions(
        who: Who, agent_id: str = "", page_size: PageSize = 0, page_token: str = ""
    ) -> dict[str, Any]:
        """The caller's sessions, most recently active first."""
        request = pb.ListSessionsRequest(agent_id=agent_id, page_size=page_size, page_token=page_token)
        with who.bound():
            return to_json(await conversation.list_sessions(request))

    @router.get("/sessions/{session_id}", response_model=SessionJson)
    async def get_session(session_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await conversation.get_session(session_id))

    @router.patch("/sessions/{session_id}", response_model=SessionJson)
    async def update_session(session_id: str, body: SessionUpdate, who: Who) -> dict[str, Any]:
        request = from_json(
            pb.UpdateSessionRequest, {**body.model_dump(exclude_unset=True), "session_id": session_id}
        )
        with who.bound():
            return to_json(await conversation.update_session(request))

    @router.delete("/sessions/{session_id}", status_code=204)
    async def delete_session(session_id: str, who: Who) -> Response:
        """The session with its history and session memory."""
        with who.bound():
            await conversation.delete_session(session_id)
        return Response(status_code=204)

    @router.get("/sessions/{session_id}/messages", response_model=MessageListJson)
    async def list_messages(
        session_id: str,
        who: Who,
        oldest_first: bool = False,
        include_tool_messages: bool = False,
        page_size: PageSize = 0,
        page_token: str = "",
    ) -> dict[str, Any]:
        """The session's questions and answers (and tool steps on request), newest first by default."""
        request = pb.ListMessagesRequest(
            session_id=session_id,
            oldest_first=oldest_first,
            include_tool_messages=include_tool_messages,
            page_size=page_size,
            page_token=page_token,
        )
        with who.bound():
            return to_json(await conversation.list_messages(request))

    @router.post("/chat/turns/{turn_id}/cancel", response_model=CancelJson)
    async def cancel_turn(turn_id: str, who: Who) -> dict[str, Any]:
        """Stops a running turn of the caller's; it ends with a ``cancelled`` event."""
        with who.bound():
            return {"cancelled": await conversation.cancel_turn(turn_id)}

    return router


__all__ = ["build_sessions_router"]
