"""One A2A message, one KnowSphere turn: the A2A SDK's agent executor for every application.

The SDK's request handler calls, per ``message/send`` or ``message/stream``:

1. :class:`ApplicationSessions` (its request-context builder), which maps the message's ``contextId``
   to a KnowSphere session of the application: none starts a new session, whose id becomes the
   ``contextId`` the answer carries; one given must be a session of this application that the caller
   can read — the conversation service looks it up as the caller, so another tenant's (or user's)
   session, or any other id, is refused as unknown, never reached. A message naming an existing
   ``taskId`` is refused too: each answer is a task of its own, and the conversation goes on in the
   context. Refusals are JSON-RPC ``invalid params`` errors before any task exists.
2. :class:`ApplicationTurns.execute`, which runs the turn in that session as the caller (the session
   runs the application's orchestrator and holds the history the model sees), and turns its events into
   the task's: ``submitted``, ``working``, the answer's text deltas appended to the ``answer`` artifact
   (a ``[[cN]]`` marker never split across two), then ``completed`` with the ``answer`` artifact
   replaced by the whole answer — a text part and a data part ``{"sources": […]}``
   (``domain.agent_cards.sources_of``) — and the same parts as the status message. A turn that fails is
   ``failed`` with the turn's friendly message (its code in the status metadata); one cancelled
   elsewhere (``POST /api/v1/chat/turns/{turn_id}/cancel``) is ``canceled``.

``tasks/cancel`` of a running task cancels its turn as the caller (:meth:`ApplicationTurns.cancel`, the
same call as the cancel route's) and ends the task ``canceled``. A turn's id is its task's id.

The executor keeps only the tasks running in this process (to end a cancelled one exactly once); a
client that goes away does not stop its turn: the task runs to its end and ``tasks/get`` reads it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

import grpc
import structlog
from a2a.auth.user import User
from a2a.helpers import get_message_text, new_data_part, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext, RequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Part, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InternalError, InvalidParamsError
from opentelemetry import trace

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere_clients import ConversationClient
from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.events import MAX_MESSAGE_CHARS, ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.chat import requested_turn_events
from knowsphere_gateway.domain.agent_cards import SOURCES_MEDIA_TYPE, sources_of
from knowsphere_gateway.domain.annotations import AnnotatedStream, DocumentUrl
from knowsphere_gateway.domain.applications import ApplicationRecord
from knowsphere_runtime.bus import Fanout
from knowsphere_telemetry import attributes

tracer = trace.get_tracer(__name__)
log = structlog.get_logger(__name__)

ANSWER_ARTIFACT: Final = "answer"
"""The id and name of the artifact holding a task's answer."""
SESSION_CHANNEL: Final = {"channel": "a2a"}
"""The metadata of a session an A2A context started (what the session list shows it came through)."""
CANCELLED_TEXT: Final = "the answer was cancelled"
FAILED_TEXT: Final = "the answer failed"


class ApplicationCall(User):
    """Who calls which application's agent, as the A2A SDK's user of a call: the gateway's caller, the
    application (already found to be theirs and switched on) and the gateway's base URL (for links to
    cited documents). Its ``user_name`` owns the call's tasks: tenant, user and application."""

    def __init__(self, who: Caller, application: ApplicationRecord, base_url: str) -> None:
        self.who = who
        self.application = application
        self.base_url = base_url.rstrip("/")

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        identity = self.who.identity
        return json.dumps([identity.tenant_id, identity.user_id, self.application.id])

    def document_url(self) -> DocumentUrl:
        return lambda source: (
            f"{self.base_url}/api/v1/documents/{source.document_id}" if source.document_id else ""
        )


def call_of(context: ServerCallContext) -> ApplicationCall:
    """The application call of an SDK call context (the A2A routes always set one)."""
    if not isinstance(context.user, ApplicationCall):
        raise InternalError(message="an A2A call reached the agent without its caller")
    return context.user


def question_of(message: Message) -> str:
    """The text of a message's text parts; refused (invalid params) when empty or too long."""
    question = get_message_text(message).strip()
    if not question:
        raise InvalidParamsError(message="message.parts: no text; this agent answers text questions")
    if len(question) > MAX_MESSAGE_CHARS:
        raise InvalidParamsError(
            message=f"message.parts: {len(question)} characters of text; at most {MAX_MESSAGE_CHARS}"
        )
    return question


def _unknown(error: ServiceError) -> bool:
    return error.status in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


class ApplicationSessions(RequestContextBuilder):
    """Resolves a message's ``contextId`` to a session of the application (see the module's doc)."""

    def __init__(self, conversation: ConversationClient) -> None:
        self._conversation = conversation

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        if params is not None:
            if task_id:
                raise InvalidParamsError(
                    message=f"message.taskId: task {task_id} has ended; every message starts a task of "
                    "its own — continue the conversation with its contextId instead"
                )
            question_of(params.message)
            context_id = await self.session(call_of(context), context_id)
        return RequestContext(
            call_context=context, request=params, task_id=task_id, context_id=context_id, task=task
        )

    async def session(self, call: ApplicationCall, context_id: str | None) -> str:
        """The session of ``context_id`` (checked to be the caller's, of this application), or a new
        session of the application when there is none."""
        application = call.application
        if context_id:
            found: cpb.Session | None
            try:
                with call.who.bound():
                    found = await self._conversation.get_session(context_id)
            except ServiceError as error:
                if not _unknown(error):
                    raise
                found = None
            if found is None or found.application_id != application.id:
                raise InvalidParamsError(
                    message=f"message.contextId: {context_id} is no conversation of yours with this "
                    "agent; leave contextId out to start one (the answer carries its contextId)"
                )
            return context_id
        request = cpb.CreateSessionRequest(
            application_id=application.id,
            orchestrator_id=application.orchestrator_id,
            metadata=SESSION_CHANNEL,
        )
        with call.who.bound():
            created = await self._conversation.create_session(request)
        return created.id


async def _once(update: Awaitable[None]) -> None:
    """Publishes a terminal update unless the task has already ended (a cancel and the turn's own end
    may race; the first one wins)."""
    try:
        await update
    except RuntimeError:  # TaskUpdater: "already in a terminal state"
        log.debug("a2a task already ended")


class ApplicationTurns(AgentExecutor):
    """Runs a message as a turn of the application's session and reports it as the task's events.

    ``events`` is fed by the bus's subscriber of turn events; ``turn_timeout_seconds`` is the longest
    wait for a turn's next event."""

    def __init__(
        self,
        bus: GatewayBus,
        events: Fanout[ChatTurnEvent],
        conversation: ConversationClient,
        turn_timeout_seconds: float,
    ) -> None:
        self._bus = bus
        self._events = events
        self._conversation = conversation
        self._timeout = turn_timeout_seconds
        self._running: dict[str, TaskUpdater] = {}  # the tasks running here, by task id

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = call_of(context.call_context)
        task_id, context_id, message = context.task_id, context.context_id, context.message
        if not task_id or not context_id or message is None:
            raise InternalError(message="an A2A message reached the agent without its task and context")
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=[message])
            )
        self._running[task_id] = updater
        try:
            await updater.start_work()
            turn = ChatRequested(turn_id=task_id, session_id=context_id, message=question_of(message))
            with tracer.start_as_current_span("gateway.a2a.turn") as span:
                span.set_attribute(attributes.TURN_ID, task_id)
                span.set_attribute(attributes.SESSION_ID, context_id)
                await self._answer(call, turn, updater, span.set_attribute)
        finally:
            self._running.pop(task_id, None)

    async def _answer(
        self,
        call: ApplicationCall,
        turn: ChatRequested,
        updater: TaskUpdater,
        set_attribute: Callable[[str, Any], None],
    ) -> None:
        url = call.document_url()
        annotated = AnnotatedStream(url)
        streamed = False
        async for event in requested_turn_events(self._bus, self._events, call.who, turn, self._timeout):
            if event.kind is TurnEventKind.SOURCES:
                annotated.add_sources(event.citations)
            elif event.kind is TurnEventKind.TEXT_DELTA:
                for piece in annotated.feed(event.text or ""):
                    await updater.add_artifact(
                        [new_text_part(piece.content)],
                        artifact_id=ANSWER_ARTIFACT,
                        name=ANSWER_ARTIFACT,
                        append=streamed,
                        last_chunk=False,
                    )
                    streamed = True
            elif event.kind is TurnEventKind.COMPLETED:
                await self._completed(updater, event, url)
            elif event.kind is TurnEventKind.CANCELLED:
                await _once(updater.cancel(updater.new_agent_message([new_text_part(CANCELLED_TEXT)])))
            elif event.kind is TurnEventKind.ERROR:
                code = event.error_code or "turn_failed"
                set_attribute(attributes.ERROR_CODE, code)
                text = event.error_message or FAILED_TEXT
                await _once(
                    updater.update_status(
                        TaskState.TASK_STATE_FAILED,
                        message=updater.new_agent_message([new_text_part(text)]),
                        metadata={"error_code": code},
                    )
                )

    async def _completed(self, updater: TaskUpdater, event: ChatTurnEvent, url: DocumentUrl) -> None:
        text = event.text or ""
        parts: list[Part] = [
            new_text_part(text),
            new_data_part({"sources": sources_of(text, event.citations, url)}, SOURCES_MEDIA_TYPE),
        ]
        # Replaces what was streamed: the whole answer as the conversation keeps it, with its sources.
        await updater.add_artifact(
            parts, artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT, append=False, last_chunk=True
        )
        usage = {
            "answer_kind": event.answer_kind.value if event.answer_kind else None,
            "prompt_tokens": event.prompt_tokens,
            "completion_tokens": event.completion_tokens,
        }
        await _once(
            updater.update_status(
                TaskState.TASK_STATE_COMPLETED,
                message=updater.new_agent_message(parts),
                metadata={key: value for key, value in usage.items() if value is not None},
            )
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancels the task's turn as its caller and ends the task ``canceled`` (when it runs here; the
        SDK closes one that does not)."""
        call = call_of(context.call_context)
        task_id = context.task_id or ""
        try:
            with call.who.bound():
                await self._conversation.cancel_turn(task_id)
        except ServiceError as error:  # the turn already ended: the task ends all the same
            log.warning("a2a task's turn not cancelled", turn_id=task_id, error=str(error))
        updater = self._running.get(task_id)
        if updater is not None:
            await _once(updater.cancel(updater.new_agent_message([new_text_part(CANCELLED_TEXT)])))


__all__ = [
    "ANSWER_ARTIFACT",
    "ApplicationCall",
    "ApplicationSessions",
    "ApplicationTurns",
    "call_of",
    "question_of",
]
