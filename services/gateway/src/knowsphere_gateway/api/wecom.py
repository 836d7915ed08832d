"""WeCom's callbacks: ``GET|POST /api/v1/wecom/{tenant_id}/{application_id}/callback``, the URL given to
WeCom's console for a WeCom application (``callback_path`` in its JSON).

**Who may call.** These routes take no bearer token: WeCom's servers call them, and a callback is
authenticated by its ``msg_signature`` — SHA-1 over the channel's Token, the request's timestamp and
nonce and the encrypted message (``domain.wecom``) — and a timestamp within
``KS_GATEWAY_WECOM_TIMESTAMP_TOLERANCE_SECONDS``. Until the signature is checked nothing about the
application is told: an unknown application id, another tenant's (the URL names the tenant, and the
application is looked up in that tenant only), a switched-off application, one on another platform, a
body of the other platform's kind and a wrong signature all get the same 401 (and the same work: a
signature is computed for a missing application too). What is refused before the application is looked
up — a body over ``KS_GATEWAY_WECOM_MAX_CALLBACK_BYTES`` (413), a body that is neither WeCom's XML nor its
JSON, or hostile XML (400) — is refused alike for every URL. After the signature: a stale timestamp is a
401 naming it, a message that does not decrypt (padding, length, receive id) a 400 naming the check.
A callback replayed inside the window changes nothing: messages are taken once by their id, the URL
check and a stream's refresh only read.

**Self-built application** (``wework_traditional``, XML): GET answers the URL check with the decrypted
``echostr``. POST answers at once with an empty 200 (WeCom waits 5 s, then sends the message again, up
to three times): the message id is taken once (``ApplicationStore.claim_message``, shared by replicas),
a text message starts a turn in the background as the WeCom user (``api.wecom_turns``), and the answer is
sent with WeCom's ``message/send`` when the turn has ended, ``[[cN]]`` markers as numbered footnotes.

**AI bot** (``wework_aibot``, JSON ``{"encrypt": …}``): a text (or transcribed voice, or the text of a
mixed) message starts the turn and is answered with an encrypted ``stream`` message
``{"msgtype": "stream", "stream": {"id", "finish": false, "content"}}`` in WeCom's reply envelope
``{"encrypt", "msgsignature", "timestamp", "nonce"}``; WeCom then polls with ``msgtype: stream``
refreshes naming the stream id, answered with the text so far and ``finish: true`` once the turn has
ended. Streams live in this process (``domain.wecom_answers.StreamRegistry``: bounded in number and
time, found only under their own tenant and application): behind several replicas, route a bot's
callbacks to one replica (by the path's application id).

A message over the application's rate limit, or while this process runs
``KS_GATEWAY_WECOM_MAX_PENDING_TURNS`` WeCom turns, is answered as busy; events and other message kinds
start no turn.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

import structlog
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from knowsphere_clients import ConversationClient
from knowsphere_contracts.events import ChatTurnEvent
from knowsphere_egress import EgressClient, EgressPolicy
from knowsphere_gateway.adapters.wecom_api import WeComApi
from knowsphere_gateway.api.bus import GatewayBus
from knowsphere_gateway.api.errors import HttpError, as_json_errors, error_response
from knowsphere_gateway.api.limits import ApplicationLimits
from knowsphere_gateway.api.wecom_turns import BUSY_TEXT, EXPIRED_TEXT, UNSUPPORTED_TEXT, WeComTurns
from knowsphere_gateway.domain.applications import ApplicationRecord, ApplicationStore, Platform
from knowsphere_gateway.domain.channel_config import ChannelSecrets, MasterKeyMissing
from knowsphere_gateway.domain.wecom import (
    CallbackRefused,
    MalformedPlaintext,
    SignatureMismatch,
    StaleTimestamp,
    WeComCrypto,
    dummy_verify,
    xml_fields,
)
from knowsphere_gateway.domain.wecom_answers import StreamRegistry
from knowsphere_gateway.domain.wecom_options import WeComOptions
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.secrets import SecretError

log = structlog.get_logger(__name__)

CALLBACK_PATH: Final = "/api/v1/wecom/{tenant_id}/{application_id}/callback"
SIGNATURE_AUTHENTICATED_PATHS: Final = frozenset({CALLBACK_PATH})
"""Routes authenticated by WeCom's signature instead of a bearer token (no role, no caller limits)."""
MAX_MESSAGE_ID_CHARS: Final = 128
_LEADING_MENTION = re.compile(r"^\s*@\S+\s*")

AUTHENTICATION: Final = (
    "Called by WeCom's servers, not by API clients: authenticated by WeCom's `msg_signature` (SHA-1 over "
    "the application's callback Token, `timestamp`, `nonce` and the encrypted message) and a fresh "
    "`timestamp`, never by a bearer token. An unknown, switched-off or other-platform application, "
    "another tenant's, and a wrong signature all answer the same 401."
)

TenantId = Annotated[str, Path(min_length=1, max_length=128, description="the application's tenant")]
ApplicationId = Annotated[str, Path(min_length=1, max_length=64, description="the WeCom application")]
Signature = Annotated[str, Query(min_length=1, max_length=64, description="WeCom's msg_signature")]
Timestamp = Annotated[str, Query(min_length=1, max_length=16, description="Unix seconds, as WeCom sent it")]
Nonce = Annotated[str, Query(min_length=1, max_length=64, description="WeCom's nonce")]
EchoStr = Annotated[
    str, Query(min_length=1, max_length=4096, description="the encrypted challenge of the URL check")
]

CALLBACK_ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_response(
        "the body is not a WeCom callback (or is hostile XML), or its message does not decrypt "
        "(error.code names the check)"
    ),
    401: error_response("the callback does not verify for this URL, or its timestamp is stale"),
    408: error_response("the request body did not arrive in time"),
    413: error_response("the body is over KS_GATEWAY_WECOM_MAX_CALLBACK_BYTES"),
    500: error_response("the gateway failed; error.correlation_id finds the details"),
}
REPLY_SCHEMA: Final = {
    "type": "object",
    "description": "an AI bot's encrypted reply (a stream message)",
    "properties": {
        "encrypt": {"type": "string"},
        "msgsignature": {"type": "string"},
        "timestamp": {"type": "integer"},
        "nonce": {"type": "string"},
    },
    "required": ["encrypt", "msgsignature", "timestamp", "nonce"],
}
CALLBACK_BODY: Final = {
    "requestBody": {
        "required": True,
        "description": "a self-built application's XML (`<xml><Encrypt>…</Encrypt>…</xml>`) or an AI bot's "
        'JSON (`{"encrypt": "…"}`)',
        "content": {
            "text/xml": {"schema": {"type": "string"}},
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"encrypt": {"type": "string", "minLength": 1}},
                    "required": ["encrypt"],
                }
            },
        },
    }
}


def refused() -> HttpError:
    """The one answer to a callback that does not verify, whatever the reason (nothing is told)."""
    return HttpError(
        401, "unauthenticated", "callback refused: unknown callback URL, or a signature that does not verify"
    )


def bad_body(message: str) -> HttpError:
    return HttpError(400, "invalid_argument", f"body: {message}", field="body")


@dataclass(frozen=True)
class Envelope:
    """The encrypted message of a callback body, and which platform's form the body has."""

    platform: Platform
    encrypted: str


def envelope_of(body: bytes) -> Envelope:
    """The encrypted message of a self-built application's XML or an AI bot's JSON."""
    start = body.lstrip()[:1]
    if start == b"<":
        try:
            fields = xml_fields(body)
        except CallbackRefused as error:
            raise HttpError(400, error.failure.value, f"body: {error}", field="body") from None
        encrypted = fields.get("Encrypt", "")
        if not encrypted:
            raise bad_body("the XML has no Encrypt element")
        return Envelope(Platform.WEWORK_TRADITIONAL, encrypted)
    if start == b"{":
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise bad_body("not valid JSON") from None
        encrypted = data.get("encrypt") if isinstance(data, dict) else None
        if not isinstance(encrypted, str) or not encrypted:
            raise bad_body('the JSON has no "encrypt" string')
        return Envelope(Platform.WEWORK_AIBOT, encrypted)
    raise bad_body("a WeCom callback is XML (self-built application) or JSON (AI bot) holding the message")


async def bounded_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is over ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    too_large = HttpError(
        413,
        "payload_too_large",
        f"body: over {limit} bytes, the most a WeCom callback may be (KS_GATEWAY_WECOM_MAX_CALLBACK_BYTES)",
        field="body",
    )
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class Channel:
    application: ApplicationRecord
    crypto: WeComCrypto


def turn_id_of(application: ApplicationRecord, message_id: str) -> str:
    """The turn (and stream) id of a WeCom message: the same on every replica and every retry."""
    digest = hashlib.sha256(f"{application.tenant_id}\0{application.id}\0{message_id}".encode()).hexdigest()
    return digest[:32]


def bot_question(message: dict[str, Any]) -> str | None:
    """The question of an AI bot's message: its text, a voice message's transcript, or a mixed
    message's text parts (a group chat's leading @mention of the bot removed); None for other kinds."""
    kind = message.get("msgtype")
    body = message.get(kind) if isinstance(kind, str) else None
    texts: list[str] = []
    if kind in ("text", "voice") and isinstance(body, dict):
        texts = [str(body.get("content", ""))]
    elif kind == "mixed" and isinstance(body, dict):
        for item in body.get("msg_item", []) or []:
            if (
                isinstance(item, dict)
                and item.get("msgtype") == "text"
                and isinstance(item.get("text"), dict)
            ):
                texts.append(str(item["text"].get("content", "")))
    question = "\n".join(texts)
    if message.get("chattype") == "group":
        question = _LEADING_MENTION.sub("", question, count=1)
    return question.strip() or None


def build_wecom_router(
    applications: ApplicationStore,
    channel_secrets: ChannelSecrets,
    turns: WeComTurns,
    streams: StreamRegistry,
    options: WeComOptions,
    application_limits: ApplicationLimits | None = None,
    clock: Callable[[], float] = time.time,
) -> APIRouter:
    """The callback routes. ``application_limits``: the applications' own rate limits, shared with the
    other routes that count requests against an application; ``clock``: Unix time (timestamps)."""
    router = APIRouter(tags=["wecom"])
    limits = application_limits or ApplicationLimits()

    async def channel_of(tenant_id: str, application_id: str) -> Channel | None:
        application = await applications.get(tenant_id, application_id)
        if application is None or not application.active or not application.platform.is_wecom:
            return None
        try:
            crypto = WeComCrypto(
                token=channel_secrets.open(application, "token"),
                encoding_aes_key=channel_secrets.open(application, "encoding_aes_key"),
                receive_id=str(application.platform_config.get("corp_id", "")),
                timestamp_tolerance_seconds=options.timestamp_tolerance_seconds,
                clock=clock,
            )
        except (MasterKeyMissing, KeyError, SecretError, ValueError) as error:
            log.error(
                "wecom channel secrets cannot be read", application_id=application.id, reason=str(error)
            )
            return None
        return Channel(application, crypto)

    def opened(
        channel: Channel | None,
        kind: Platform | None,
        msg_signature: str,
        timestamp: str,
        nonce: str,
        encrypted: str,
    ) -> tuple[Channel, str]:
        """The channel and the message of an authentic callback (``kind``: the body's platform)."""
        if channel is None or kind not in (None, channel.application.platform):
            dummy_verify(msg_signature, timestamp, nonce, encrypted)
            raise refused()
        try:
            return channel, channel.crypto.open(msg_signature, timestamp, nonce, encrypted)
        except SignatureMismatch:
            raise refused() from None
        except StaleTimestamp as error:
            raise HttpError(401, error.failure.value, f"callback refused: {error}") from None
        except CallbackRefused as error:
            raise HttpError(400, error.failure.value, f"callback refused: {error}") from None

    async def claim(application: ApplicationRecord, message_id: str) -> bool:
        if len(message_id) > MAX_MESSAGE_ID_CHARS:
            message_id = hashlib.sha256(message_id.encode()).hexdigest()
        keep = timedelta(seconds=options.message_claim_seconds)
        return await applications.claim_message(
            application.tenant_id, application.id, message_id, datetime.now(UTC), keep
        )

    def over_limits(application: ApplicationRecord) -> bool:
        if turns.busy:
            log.warning("wecom message refused: too many turns running", application_id=application.id)
            return True
        try:
            limits.take(application)
        except HttpError:
            log.warning("wecom message refused: the application's rate limit", application_id=application.id)
            return True
        return False

    def empty() -> Response:
        return PlainTextResponse("")

    # --- a self-built application -------------------------------------------------------------------

    async def classic(channel: Channel, plaintext: str) -> Response:
        application = channel.application
        try:
            fields = xml_fields(plaintext)
        except CallbackRefused as error:
            raise HttpError(400, error.failure.value, f"callback refused: {error}") from None
        agent_id = fields.get("AgentID", "")
        if agent_id and agent_id != str(application.platform_config.get("agent_id", "")):
            log.warning("wecom message for another AgentId ignored", application_id=application.id)
            return empty()
        user, kind = fields.get("FromUserName", ""), fields.get("MsgType", "")
        if kind == "event" or not user:
            return empty()
        message_id = fields.get("MsgId") or f"{user}:{fields.get('CreateTime', '')}"
        if not await claim(application, message_id):
            return empty()  # WeCom sent it again: its turn is already running
        question = fields.get("Content", "").strip() if kind == "text" else ""
        if not question:
            turns.start(turns.notify(application, user, UNSUPPORTED_TEXT))
        elif over_limits(application):
            turns.start(turns.notify(application, user, BUSY_TEXT))
        else:
            turns.start(turns.answer(application, user, question, turn_id_of(application, message_id)))
        return empty()

    # --- an AI bot ----------------------------------------------------------------------------------

    def stream_reply(channel: Channel, stream_id: str, content: str, finish: bool) -> JSONResponse:
        message = {"msgtype": "stream", "stream": {"id": stream_id, "finish": finish, "content": content}}
        timestamp, nonce = str(int(clock())), secrets.token_hex(8)
        encrypted, signature = channel.crypto.seal(json.dumps(message, ensure_ascii=False), timestamp, nonce)
        return JSONResponse(
            {"encrypt": encrypted, "msgsignature": signature, "timestamp": int(timestamp), "nonce": nonce}
        )

    async def bot(channel: Channel, plaintext: str) -> Response:
        application = channel.application
        try:
            message = json.loads(plaintext)
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict):
            failure = MalformedPlaintext("the message is not a JSON object")
            raise HttpError(400, failure.failure.value, f"callback refused: {failure}")
        bot_id = application.platform_config.get("bot_id")
        if bot_id and message.get("aibotid") != bot_id:
            log.warning("wecom callback for another bot ignored", application_id=application.id)
            return empty()
        kind = message.get("msgtype")
        sender = message.get("from")
        user = str(sender.get("userid", "")) if isinstance(sender, dict) else ""
        tenant_id, max_bytes = application.tenant_id, options.stream_max_bytes
        if kind == "stream":
            refresh = message.get("stream")
            stream_id = str(refresh.get("id", "")) if isinstance(refresh, dict) else ""
            stream = streams.get(tenant_id, application.id, stream_id)
            if stream is None:
                return stream_reply(channel, stream_id, EXPIRED_TEXT, True)
            return stream_reply(channel, stream.stream_id, stream.content(max_bytes), stream.finished)
        if kind == "event" or not user:
            return empty()
        message_id = str(message.get("msgid") or f"{user}:{message.get('chatid', '')}:{clock():.0f}")
        stream_id = turn_id_of(application, message_id)
        known = streams.get(tenant_id, application.id, stream_id)
        if known is not None:  # WeCom sent it again: the stream is already running here
            return stream_reply(channel, stream_id, known.content(max_bytes), known.finished)
        if not await claim(application, message_id):
            return stream_reply(channel, stream_id, "", False)  # another replica took it
        # A stream even for a message that starts no turn, so WeCom's retries and refreshes read its answer.
        stream = streams.open(tenant_id, application.id, stream_id)
        if stream is None:
            log.warning("wecom message refused: too many streams", application_id=application.id)
            return stream_reply(channel, stream_id, BUSY_TEXT, True)
        question = bot_question(message)
        if question is None:
            stream.finish(UNSUPPORTED_TEXT)
        elif over_limits(application):
            stream.finish(BUSY_TEXT)
        else:
            turns.start(turns.stream(application, user, question, stream_id, stream))
        return stream_reply(channel, stream_id, stream.content(max_bytes), stream.finished)

    # --- the routes ---------------------------------------------------------------------------------

    @router.get(
        CALLBACK_PATH,
        response_class=PlainTextResponse,
        summary="WeCom's URL check of a WeCom application's callback URL",
        description=f"{AUTHENTICATION} Answers the decrypted `echostr` as plain text.",
        responses={
            200: {
                "description": "the decrypted echostr",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **as_json_errors(CALLBACK_ERRORS),
        },
    )
    async def verify_callback_url(
        tenant_id: TenantId,
        application_id: ApplicationId,
        msg_signature: Signature,
        timestamp: Timestamp,
        nonce: Nonce,
        echostr: EchoStr,
    ) -> PlainTextResponse:
        channel = await channel_of(tenant_id, application_id)
        _, challenge = opened(channel, None, msg_signature, timestamp, nonce, echostr)
        return PlainTextResponse(challenge)

    @router.post(
        CALLBACK_PATH,
        summary="A WeCom message or event for a WeCom application",
        description=f"{AUTHENTICATION} A self-built application's message is answered with an empty 200 at "
        "once and its answer sent through WeCom's API; an AI bot's with an encrypted stream message.",
        responses={
            200: {
                "description": "empty (a self-built application, an event), or an AI bot's encrypted reply",
                "content": {
                    "text/plain": {"schema": {"type": "string", "maxLength": 0}},
                    "application/json": {"schema": REPLY_SCHEMA},
                },
            },
            **CALLBACK_ERRORS,
        },
        openapi_extra=CALLBACK_BODY,
    )
    async def receive_callback(
        tenant_id: TenantId,
        application_id: ApplicationId,
        request: Request,
        msg_signature: Signature,
        timestamp: Timestamp,
        nonce: Nonce,
    ) -> Response:
        envelope = envelope_of(await bounded_body(request, options.max_callback_bytes))
        channel = await channel_of(tenant_id, application_id)
        channel, plaintext = opened(
            channel, envelope.platform, msg_signature, timestamp, nonce, envelope.encrypted
        )
        if channel.application.platform is Platform.WEWORK_TRADITIONAL:
            return await classic(channel, plaintext)
        return await bot(channel, plaintext)

    return router


def build_wecom_channels(
    applications: ApplicationStore,
    channel_secrets: ChannelSecrets | None,
    conversation: ConversationClient,
    bus: GatewayBus,
    events: Fanout[ChatTurnEvent],
    turn_timeout_seconds: float,
    api: WeComApi | None,
    options: WeComOptions,
    application_limits: ApplicationLimits | None = None,
) -> APIRouter:
    """The callback routes with what they run on: ``api`` is WeCom's API (None: WeCom's own address
    through the default egress guard, made on first use)."""
    made: list[WeComApi] = []

    def wecom_api() -> WeComApi:
        if api is not None:
            return api
        if not made:
            made.append(WeComApi(EgressClient(EgressPolicy())))
        return made[0]

    sealed = channel_secrets or ChannelSecrets(None)
    turns = WeComTurns(conversation, bus, events, turn_timeout_seconds, wecom_api, sealed, options)
    streams = StreamRegistry(options.stream_ttl_seconds, options.max_streams)
    return build_wecom_router(applications, sealed, turns, streams, options, application_limits)


__all__ = [
    "CALLBACK_PATH",
    "SIGNATURE_AUTHENTICATED_PATHS",
    "Envelope",
    "bot_question",
    "build_wecom_channels",
    "build_wecom_router",
    "envelope_of",
    "turn_id_of",
]
