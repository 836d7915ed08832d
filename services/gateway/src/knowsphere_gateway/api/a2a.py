"""Every application of a tenant as an A2A agent (the Agent2Agent protocol, served by the ``a2a-sdk``).

- ``GET /a2a/{application_id}/.well-known/agent-card.json``: the application's agent card
  (``domain.agent_cards``).
- ``POST /a2a/{application_id}``: its JSON-RPC endpoint, A2A 1.0 (``SendMessage``,
  ``SendStreamingMessage``, ``GetTask``, ``ListTasks``, ``CancelTask`` with the ``A2A-Version: 1.0``
  header) and 0.3 (``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``). A message
  runs a turn of the application's orchestrator (``api.a2a_turns``).

Both are API routes like the others: the caller is the bearer token's (a token of the application's
tenant, or one of the application's own), the role table applies (the card is read-only, a call is
a member's), so do the caller's limits and the application's own rate limit — whatever the token, a
request to an application's agent takes one from the application's bucket, the one its tokens share
everywhere (``api.limits.ApplicationLimits``). An unknown application, another tenant's, one that is
switched off, or (for an application's token) any application but its own is a 404, all alike.

One SDK request handler serves every application: the route finds the application for the path
and caller, and hands the call to the SDK's JSON-RPC dispatcher with them as the call's user
(:class:`~knowsphere_gateway.api.a2a_turns.ApplicationCall`), so nothing is built or kept per
application. Tasks live in a bounded in-memory store (``adapters.a2a_tasks``), each owned by its
caller and application.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final

import grpc
from a2a.auth.user import User
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from starlette.requests import Request as StarletteRequest

from knowsphere_clients import ConversationClient
from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.events import ChatTurnEvent
from knowsphere_gateway.adapters.a2a_tasks import DEFAULT_MAX_A2A_TASKS, BoundedTaskStore
from knowsphere_gateway.api.a2a_turns import ApplicationCall, ApplicationSessions, ApplicationTurns
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES, HttpError, error_response
from knowsphere_gateway.api.limits import ApplicationLimits
from knowsphere_gateway.domain.agent_cards import A2A_PATH_PREFIX, agent_card, handler_card
from knowsphere_gateway.domain.applications import ApplicationRecord, ApplicationStore
from knowsphere_runtime.bus import Fanout

CALL_STATE: Final = "a2a_call"
"""Where the route leaves the call's :class:`ApplicationCall` for the dispatcher (``request.state``)."""

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: error_response("no such application of the caller's (or it is switched off)")
}
CARD_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the application's A2A agent card",
        "content": {"application/json": {"schema": {"type": "object", "title": "AgentCard"}}},
    }
}
RPC_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "a JSON-RPC 2.0 response (errors too, as JSON-RPC errors); for message/stream "
        "(SendStreamingMessage), server-sent events each carrying one",
        "content": {
            "application/json": {"schema": {"type": "object", "title": "JSONRPCResponse"}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    }
}
RPC_REQUEST: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "an A2A JSON-RPC 2.0 request",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "title": "JSONRPCRequest",
                    "required": ["jsonrpc", "method"],
                    "properties": {
                        "jsonrpc": {"type": "string", "enum": ["2.0"]},
                        "id": {"type": ["string", "integer", "null"]},
                        "method": {
                            "type": "string",
                            "examples": ["message/send", "message/stream", "tasks/get", "tasks/cancel"],
                        },
                        "params": {"type": "object"},
                    },
                }
            }
        },
    }
}


class _CallContexts(DefaultServerCallContextBuilder):
    """The SDK's call context of a request the route has let through: its user is the route's
    :class:`ApplicationCall` (headers and requested extensions as the SDK reads them)."""

    def build_user(self, request: StarletteRequest) -> User:
        call = getattr(request.state, CALL_STATE, None)
        if not isinstance(call, ApplicationCall):
            raise RuntimeError("an A2A request reached the dispatcher without passing its route")
        return call


def build_a2a_router(
    applications: ApplicationStore,
    application_limits: ApplicationLimits,
    conversation: ConversationClient,
    bus: GatewayBus,
    events: Fanout[ChatTurnEvent],
    caller: Callable[..., Awaitable[Caller]],
    turn_timeout_seconds: float,
    max_tasks: int = DEFAULT_MAX_A2A_TASKS,
) -> APIRouter:
    """``application_limits`` are the applications' buckets shared with the other routes; ``events`` is
    fed by the bus's subscriber of turn events; ``turn_timeout_seconds`` is the longest wait for a
    turn's next event; ``max_tasks`` bounds the tasks kept in memory."""
    handler = DefaultRequestHandler(
        agent_executor=ApplicationTurns(bus, events, conversation, turn_timeout_seconds),
        task_store=BoundedTaskStore(max_tasks),
        agent_card=handler_card(),
        request_context_builder=ApplicationSessions(conversation),
    )
    dispatcher = JsonRpcDispatcher(handler, context_builder=_CallContexts(), enable_v0_3_compat=True)
    router = APIRouter(prefix=A2A_PATH_PREFIX, tags=["a2a"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    async def served(who: Caller, application_id: str) -> ApplicationRecord:
        """The caller's switched-on application of that id, counted against its rate limit."""
        own = who.application
        if own is not None:  # an application's token reaches its own agent only
            found = own if own.id == application_id else None
        else:
            found = await applications.get(who.identity.tenant_id, application_id)
        if found is None or not found.active:
            raise HttpError(404, "not_found", f"application {application_id} not found")
        if own is None:  # an application's token already took from the bucket (api/limits.py)
            application_limits.take(found)
        return found

    async def description_of(who: Caller, application: ApplicationRecord) -> str:
        """The orchestrator's description ("" when it has none, or no longer exists)."""
        try:
            with who.bound():
                orchestrator = await conversation.get_orchestrator(application.orchestrator_id)
        except ServiceError as error:
            if error.status not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise
            return ""
        return orchestrator.description

    def base_url(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    @router.get(
        "/{application_id}/.well-known/agent-card.json",
        response_class=JSONResponse,
        responses={**CARD_RESPONSE, **NOT_FOUND},
    )
    async def get_agent_card(application_id: str, request: Request, who: Who) -> JSONResponse:
        """The application's A2A agent card: its name and description, its JSON-RPC endpoint,
        streaming, text in and out, bearer tokens."""
        application = await served(who, application_id)
        description = await description_of(who, application)
        return JSONResponse(agent_card_to_dict(agent_card(application, base_url(request), description)))

    @router.post(
        "/{application_id}",
        response_class=JSONResponse,
        responses={**RPC_RESPONSE, **NOT_FOUND},
        openapi_extra=RPC_REQUEST,
    )
    async def call_agent(application_id: str, request: Request, who: Who) -> Response:
        """The application's A2A JSON-RPC endpoint: a message is a turn of its orchestrator, in the
        session its contextId names (a new one without); the answer cites its sources."""
        application = await served(who, application_id)
        setattr(request.state, CALL_STATE, ApplicationCall(who, application, base_url(request)))
        return await dispatcher.handle_requests(request)

    return router


__all__ = ["build_a2a_router"]
