"""The turns of WeCom users, run in the background of their callbacks (``api/wecom.py``).

A WeCom user asks as a user of the application's tenant of their own (``wecom_identity``), with the
*member* role, in a session of the application that runs its orchestrator: the user's newest session of
the application, or a new one (its metadata names the channel and the WeCom user), so the history is
kept from one message to the next. The turn is the same as any other: a ``ChatRequested`` on the bus,
its events read through ``api.chat.requested_turn_events``.

- A self-built application's answer (:meth:`WeComTurns.answer`) is sent when the turn has ended, with
  WeCom's ``message/send`` (``adapters.wecom_api``), in as few messages as WeCom's byte limit allows.
- An AI bot's answer (:meth:`WeComTurns.stream`) goes into its :class:`AnswerStream` as it is written;
  WeCom polls the stream and the callback route answers with what is there.

A turn that fails, times out or is cancelled is answered with a short apology (the conversation's own
friendly message when it wrote one); nothing the user sees names an internal error.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final

import structlog

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere_clients import ConversationClient
from knowsphere_contracts.events import MAX_MESSAGE_CHARS, ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_gateway.adapters.wecom_api import AppCredentials, WeComApi, WeComApiError
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.chat import BUS_UNAVAILABLE_CODE, TURN_TIMEOUT_CODE, requested_turn_events
from knowsphere_gateway.domain.applications import ApplicationRecord
from knowsphere_gateway.domain.channel_config import DEFAULT_MESSAGE_FORMAT, ChannelSecrets
from knowsphere_gateway.domain.tokens import Role
from knowsphere_gateway.domain.wecom_answers import AnswerStream, plain_answer, utf8_parts, wecom_identity
from knowsphere_gateway.domain.wecom_options import WeComOptions
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.identity import Identity

log = structlog.get_logger(__name__)

FAILED_TEXT: Final = "抱歉，这次没能回答，请稍后再试。(Sorry, the answer failed; please try again later.)"
BUSY_TEXT: Final = "当前提问较多，请稍后再试。(Too many questions at once; please try again shortly.)"
UNSUPPORTED_TEXT: Final = "目前只能回答文字消息。(Only text messages can be answered for now.)"
EXPIRED_TEXT: Final = "这条回答已不可用，请重新提问。(This answer is no longer available; please ask again.)"


def wecom_caller(application: ApplicationRecord, wecom_user_id: str) -> Caller:
    """A WeCom user of ``application`` as the services see them (a member of the application's tenant)."""
    identity = wecom_identity(application.tenant_id, application.id, wecom_user_id)
    return Caller(identity, None, Role.MEMBER, application.id, None, application)


GATEWAY_CODES: Final = frozenset({TURN_TIMEOUT_CODE, BUS_UNAVAILABLE_CODE})
"""The gateway's own turn errors: written for operators, not for a WeCom user."""


def failure_text(event: ChatTurnEvent) -> str:
    """What a user reads for a turn that ended without an answer: the conversation's friendly message,
    or the apology."""
    if event.kind is TurnEventKind.ERROR and event.error_message and event.error_code not in GATEWAY_CODES:
        return event.error_message
    return FAILED_TEXT


class WeComTurns:
    """Runs WeCom users' turns in the background, at most ``options.max_pending_turns`` at once."""

    def __init__(
        self,
        conversation: ConversationClient,
        bus: GatewayBus,
        events: Fanout[ChatTurnEvent],
        turn_timeout_seconds: float,
        api: Callable[[], WeComApi],
        secrets: ChannelSecrets,
        options: WeComOptions,
    ) -> None:
        self._conversation = conversation
        self._bus = bus
        self._events = events
        self._timeout = turn_timeout_seconds
        self._api = api
        self._secrets = secrets
        self._options = options
        self._tasks: set[asyncio.Task[None]] = set()
        # One session is made at a time per WeCom user (two quick messages share one session).
        self._session_locks: weakref.WeakValueDictionary[Identity, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @property
    def busy(self) -> bool:
        return len(self._tasks) >= self._options.max_pending_turns

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` in the background, holding it until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- one turn -----------------------------------------------------------------------------------

    async def _session(self, who: Caller, application: ApplicationRecord, wecom_user_id: str) -> str:
        """The WeCom user's newest session of the application running its orchestrator, or a new one."""
        lock = self._session_locks.get(who.identity)
        if lock is None:
            lock = self._session_locks[who.identity] = asyncio.Lock()
        async with lock:
            with who.bound():
                newest = await self._conversation.list_sessions(cpb.ListSessionsRequest(page_size=1))
                for session in newest.sessions:
                    if (session.application_id, session.orchestrator_id) == (
                        application.id,
                        application.orchestrator_id,
                    ):
                        return session.id
                created = await self._conversation.create_session(
                    cpb.CreateSessionRequest(
                        orchestrator_id=application.orchestrator_id,
                        application_id=application.id,
                        metadata={"channel": application.platform.value, "wecom_user": wecom_user_id},
                    )
                )
                return created.id

    async def _events_of(
        self, application: ApplicationRecord, wecom_user_id: str, question: str, turn_id: str
    ) -> AsyncIterator[ChatTurnEvent]:
        who = wecom_caller(application, wecom_user_id)
        session_id = await self._session(who, application, wecom_user_id)
        request = ChatRequested(turn_id=turn_id, session_id=session_id, message=question[:MAX_MESSAGE_CHARS])
        return requested_turn_events(self._bus, self._events, who, request, self._timeout)

    # --- a self-built application: the answer sent when the turn has ended -------------------------

    async def answer(
        self, application: ApplicationRecord, wecom_user_id: str, question: str, turn_id: str
    ) -> None:
        """Runs the turn and sends its answer to the WeCom user through WeCom's API."""
        text = FAILED_TEXT
        try:
            final: ChatTurnEvent | None = None
            async for event in await self._events_of(application, wecom_user_id, question, turn_id):
                final = event
            if final is not None and final.kind is TurnEventKind.COMPLETED:
                text = plain_answer(final.text or "", final.citations, self._options.sources_heading)
            elif final is not None:
                text = failure_text(final)
        except Exception:
            log.exception("wecom turn failed", application_id=application.id, turn_id=turn_id)
        await self.notify(application, wecom_user_id, text)

    async def notify(self, application: ApplicationRecord, wecom_user_id: str, text: str) -> None:
        """Sends ``text`` to the WeCom user as the application, in as many messages as it takes (up to
        ``max_message_parts``); a failure is logged (WeCom's errcode, never a secret)."""
        config = application.platform_config
        message_format = str(config.get("message_format", DEFAULT_MESSAGE_FORMAT))
        try:
            credentials = AppCredentials(
                corp_id=str(config["corp_id"]),
                agent_id=int(config["agent_id"]),
                secret=self._secrets.open(application, "secret"),
            )
            for part in utf8_parts(text, self._options.message_max_bytes, self._options.max_message_parts):
                await self._api().send(credentials, wecom_user_id, part, message_format)
        except WeComApiError as error:
            log.error(
                "wecom answer not delivered",
                application_id=application.id,
                operation=error.operation,
                errcode=error.errcode,
                reason=str(error),
            )
        except Exception:
            log.exception("wecom answer not delivered", application_id=application.id)

    # --- an AI bot: the answer streamed as it is written ---------------------------------------------

    async def stream(
        self,
        application: ApplicationRecord,
        wecom_user_id: str,
        question: str,
        turn_id: str,
        stream: AnswerStream,
    ) -> None:
        """Runs the turn, writing its answer into ``stream`` as it comes; the stream always ends."""
        try:
            async for event in await self._events_of(application, wecom_user_id, question, turn_id):
                if event.kind is TurnEventKind.SOURCES:
                    stream.sources = list(event.citations)
                elif event.kind is TurnEventKind.TEXT_DELTA:
                    stream.text += event.text or ""
                elif event.kind is TurnEventKind.COMPLETED:
                    sources = event.citations or stream.sources
                    stream.finish(plain_answer(event.text or "", sources, self._options.sources_heading))
                elif event.is_final:
                    stream.finish(failure_text(event))
        except Exception:
            log.exception("wecom bot turn failed", application_id=application.id, turn_id=turn_id)
        finally:
            if not stream.finished:
                stream.finish(FAILED_TEXT)


__all__ = [
    "BUSY_TEXT",
    "EXPIRED_TEXT",
    "FAILED_TEXT",
    "UNSUPPORTED_TEXT",
    "WeComTurns",
    "failure_text",
    "wecom_caller",
]
