"""Any A2A agent as an external orchestrator, through the ``a2a-sdk`` client (protocol 1.0, JSON-RPC or
HTTP+JSON as its card offers, streaming when the card says it streams).

The agent card is read from ``{base_url}/.well-known/agent-card.json`` on every turn (a changed agent is
seen at once). The key, when the orchestrator has one, is a bearer token sent to the card and to the
agent's interfaces on ``base_url``'s origin only: an interface the card places on another origin is not
used while there is a key, so a card cannot send the key elsewhere. Both go through the egress guard's
client, which also checks whatever origin the card names.

The turn's message goes out with the session's context id (kept from the previous turn's answer), so the
agent continues its own conversation. The answer is the text of the artifacts the task streams, piece
by piece; an agent that answers with a message, or puts its answer in the status message of a completed
task (or asks for input that way), is answered with that text. A failed, rejected or cancelled task
ends the turn with the agent's own reason; one that wants authentication, as a refused key. A
cancelled turn asks the agent to cancel its task (best effort).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Iterable
from typing import cast

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    AgentCardResolutionError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError

from knowsphere_conversation.adapters.peer_http import (
    PeerLimits,
    egress_failure,
    failure,
    label,
    malformed,
    peer_error,
    status_failure,
    timed_out,
    unreachable,
)
from knowsphere_conversation.domain.external import PeerCall, PeerEvent, Receive, with_transcript
from knowsphere_conversation.domain.graph import TurnError
from knowsphere_conversation.domain.turns import EXTERNAL_AUTH_FAILED, EXTERNAL_FAILED
from knowsphere_egress import EgressError

BINDINGS = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]
MAX_CAUSES = 8
"""How deep an SDK error's causes are searched for the HTTP or egress error under it."""
ENDED_WITH_ERROR = {
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_REJECTED: "rejected the task",
    TaskState.TASK_STATE_CANCELED: "cancelled the task",
}
ANSWERED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_INPUT_REQUIRED})


async def relay_a2a(http: httpx.AsyncClient, call: PeerCall, receive: Receive, limits: PeerLimits) -> None:
    headers = {"Authorization": f"Bearer {call.api_key}"} if call.api_key else {}
    card = await _card(http, call, headers, limits)
    factory = ClientFactory(
        ClientConfig(streaming=True, httpx_client=http, supported_protocol_bindings=BINDINGS)
    )
    try:
        client = factory.create(card)
    except ValueError:
        raise failure(
            call,
            EXTERNAL_FAILED,
            f"the external application {label(call)} offers no JSON-RPC or HTTP+JSON interface this "
            "platform can use" + (" on the origin of its base_url" if call.api_key else ""),
            detail="no interface",
        ) from None
    text = call.question if call.conversation_id else with_transcript(call.question, call.history)
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        context_id=call.conversation_id,
    )
    context = ClientCallContext(timeout=call.config.timeout_seconds, service_parameters=dict(headers))
    answer = _Answer(call, receive)
    events = cast(
        AsyncGenerator[StreamResponse, None],
        client.send_message(SendMessageRequest(message=message), context=context),
    )
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                await answer.take(event)
    except asyncio.CancelledError:
        if answer.task_id:
            await _cancel(client, answer.task_id, context, limits)
        raise
    except (A2AError, EgressError, httpx.HTTPError) as error:
        raise _failure(call, error, answering=answer.said) from None
    finally:
        await client.close()
    await answer.finish()


async def _card(
    http: httpx.AsyncClient, call: PeerCall, headers: dict[str, str], limits: PeerLimits
) -> AgentCard:
    """The agent's card; with a key, only its interfaces on ``base_url``'s origin."""
    resolver = A2ACardResolver(http, call.config.base_url)
    try:
        card = await resolver.get_agent_card(
            http_kwargs={"headers": headers, "timeout": httpx.Timeout(call.config.timeout_seconds)}
        )
    except (A2AError, EgressError, httpx.HTTPError) as error:
        raise _failure(call, error) from None
    if call.api_key:
        home = _origin(call.config.base_url)
        kept = [i for i in card.supported_interfaces if _origin(i.url) == home]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(kept)
    return card


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return ("", "", None)
    return (parsed.scheme, parsed.host, parsed.port)


class _Answer:
    """The agent's answer as its events arrive: artifact text relayed at once, the final state (and its
    status message) kept for the end."""

    def __init__(self, call: PeerCall, receive: Receive) -> None:
        self._call = call
        self._receive = receive
        self.task_id = ""
        self._context_id = ""
        self._state: TaskState = TaskState.TASK_STATE_UNSPECIFIED
        self._status_text = ""
        self._artifacts: list[str] = []
        self.said = False
        """Some of the answer was relayed."""
        self._replied = False

    async def _say(self, text: str, artifact_id: str = "") -> None:
        if not text:
            return
        if artifact_id and self._artifacts and artifact_id != self._artifacts[-1]:
            text = "\n\n" + text  # a second artifact is a paragraph of its own
        if artifact_id and (not self._artifacts or artifact_id != self._artifacts[-1]):
            self._artifacts.append(artifact_id)
        self.said = True
        await self._receive(PeerEvent(text=text, conversation_id=self._context_id))

    def _ids(self, task_id: str, context_id: str) -> None:
        self.task_id = self.task_id or task_id
        self._context_id = self._context_id or context_id

    async def take(self, event: StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "message":
            self._ids(event.message.task_id, event.message.context_id)
            self._replied = True
            await self._say(_text(event.message.parts))
        elif kind == "task":
            task = event.task
            self._ids(task.id, task.context_id)
            self._status(task.status)
            if not self.said:  # an agent that does not stream answers with the whole task
                for artifact in task.artifacts:
                    await self._say(_text(artifact.parts), artifact.artifact_id or "artifact")
        elif kind == "artifact_update":
            update = event.artifact_update
            self._ids(update.task_id, update.context_id)
            await self._say(_text(update.artifact.parts), update.artifact.artifact_id or "artifact")
        elif kind == "status_update":
            status = event.status_update
            self._ids(status.task_id, status.context_id)
            self._status(status.status)

    def _status(self, status: TaskStatus) -> None:
        self._state = status.state
        if status.HasField("message"):
            self._status_text = _text(status.message.parts)

    async def finish(self) -> None:
        if self._replied:
            return
        if self._state in ENDED_WITH_ERROR:
            raise peer_error(
                self._call,
                self._status_text or ENDED_WITH_ERROR[self._state],
                detail=f"a2a {TaskState.Name(self._state)}",
            )
        if self._state == TaskState.TASK_STATE_AUTH_REQUIRED:
            raise failure(
                self._call,
                EXTERNAL_AUTH_FAILED,
                f"the external application {label(self._call)} wants authentication; check the "
                "orchestrator's api_key",
                detail="a2a auth required",
            )
        if self._state not in ANSWERED:
            raise malformed(self._call, "its answer ended before its task did", detail="a2a unfinished")
        if not self.said:
            # The answer (or the agent's question, when it needs input) is the final status message.
            await self._say(self._status_text)
        if not self.said:
            raise malformed(self._call, "a finished task without any text", detail="a2a empty")
        await self._receive(PeerEvent(conversation_id=self._context_id))


def _text(parts: Iterable[Part]) -> str:
    return "".join(part.text for part in parts if part.HasField("text"))


def _failure(call: PeerCall, error: BaseException, *, answering: bool = False) -> TurnError:
    """What an SDK error (and the HTTP or egress error under it) means for the user; ``answering``:
    part of the answer was relayed already (a connection lost now broke the answer off)."""
    seen: BaseException | None = error
    for _ in range(MAX_CAUSES):
        if seen is None:
            break
        if isinstance(seen, EgressError):
            return egress_failure(call, seen, answering=answering)
        if isinstance(seen, httpx.HTTPStatusError):
            return status_failure(call, seen.response.status_code)
        if isinstance(seen, A2AClientTimeoutError | httpx.TimeoutException):
            return timed_out(call, type(seen).__name__)
        if isinstance(seen, httpx.TransportError):
            if answering:
                return malformed(call, "its answer broke off", detail=type(seen).__name__)
            return unreachable(call, type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    if isinstance(error, AgentCardResolutionError):
        if error.status_code:
            return status_failure(call, error.status_code)
        return malformed(call, "an agent card that cannot be read", detail="card")
    if isinstance(error, A2AClientError):
        return malformed(call, "an answer that does not follow the A2A protocol", detail=type(error).__name__)
    if isinstance(error, A2AError):
        return peer_error(call, error.message, detail=type(error).__name__)
    return unreachable(call, type(error).__name__)


async def _cancel(client: Client, task_id: str, context: ClientCallContext, limits: PeerLimits) -> None:
    """Asks the agent to cancel the task of a cancelled turn; whatever happens, the turn is cancelled."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(limits.stop_seconds):
            await client.cancel_task(CancelTaskRequest(id=task_id), context=context)


__all__ = ["relay_a2a"]
