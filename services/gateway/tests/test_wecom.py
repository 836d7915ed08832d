"""The WeCom channels: the callback crypto (``domain/wecom.py``), the applications' channel settings
(``domain/channel_config.py``, ``api/applications.py``) and the callbacks (``api/wecom.py``).

The crypto is held to WeCom's published sample vectors (its WXBizMsgCrypt samples), to a fixed vector
computed once by the step-by-step reference below, and to that reference both ways. The callbacks go
through the real gateway app over the conversation's real servicers (agents, orchestrators, sessions)
on SQLite, with chat turns on FastStream's in-memory broker and a scripted conversation stand-in, and
with the answers sent to a scripted WeCom API (gettoken, message/send) on a real loopback socket.

What WeCom, its users and an admin notice: a message sent three times makes one turn and one answer,
which reaches the right user with its sources as footnotes; the access token is fetched once; the same
user's messages share a session; an AI bot answers with a stream that grows until it finishes; a
callback for another tenant's application, a switched-off one, one on the other platform or with a wrong
signature gets the same 401 as one for no application; stale, tampered, hostile or oversized callbacks
are refused; channel secrets are never answered, only masked hints, and are stored encrypted.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sqlite3
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from ipaddress import ip_network
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from faststream.nats import NatsBroker, TestNatsBroker

from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, Citation, TurnEventKind
from knowsphere_egress import EgressClient, EgressPolicy
from knowsphere_gateway.adapters.applications_sql import SqlApplicationStore
from knowsphere_gateway.adapters.wecom_api import AppCredentials, WeComApi
from knowsphere_gateway.api.bus import build_bus
from knowsphere_gateway.api.wecom_turns import BUSY_TEXT, EXPIRED_TEXT, UNSUPPORTED_TEXT
from knowsphere_gateway.domain.applications import ApplicationRecord, Platform, SealedSecret
from knowsphere_gateway.domain.channel_config import ChannelSecrets
from knowsphere_gateway.domain.tokens import Role, TokenService
from knowsphere_gateway.domain.wecom import (
    BadLength,
    BadPadding,
    HostileXml,
    MalformedCiphertext,
    MalformedTimestamp,
    MalformedXml,
    SignatureMismatch,
    StaleTimestamp,
    WeComCrypto,
    WrongReceiveId,
    signature,
    xml_fields,
)
from knowsphere_gateway.domain.wecom_answers import (
    StreamRegistry,
    plain_answer,
    progress_text,
    utf8_parts,
    wecom_identity,
)
from knowsphere_gateway.domain.wecom_options import WeComOptions
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity, require_identity
from knowsphere_runtime.secrets import KeyRing, MasterKeyError, SecretError, mask
from knowsphere_runtime.streams import CHAT_REQUESTS

# The conversation service's own code, served as the gateway's peer: a gateway-only install skips.
conversation_api = pytest.importorskip(
    "knowsphere_conversation.api.grpc", reason="the conversation service is not installed"
)
sessions_sql = pytest.importorskip("knowsphere_conversation.adapters.sessions_sql")

OWNER, STRANGER = Identity("acme", "alice"), Identity("globex", "mallory")
MASTER_KEY = base64.b64encode(bytes(range(101, 133))).decode()  # 32 distinct bytes: a random key's form
CORP_ID, AGENT_ID = "ww5823bf96d3bd56c7", 1000002
TOKEN = "KnowSphereWeComToken42"
AES_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
SECRET = "wecom-app-secret-of-the-gateway-tests-0123456789"
BOT_TOKEN, BOT_AES_KEY = "BotToken0123456789", "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
HANDBOOK = Citation(handle="c1", document_id="doc-handbook", file_name="handbook.pdf", page=4)
POLICY = Citation(handle="c2", document_id="doc-policy", file_name="policy.pdf", page=1)
ANSWER = ["Employees get 27 days", " of leave [[c1]]", " and carry it over [[c2]]."]
WECOM_ANSWER = (
    "Employees get 27 days of leave [1] and carry it over [2].\n\n来源\n"
    "[1] handbook.pdf, p. 4\n[2] policy.pdf, p. 1"
)
WAIT_SECONDS = 10.0
POLL_SECONDS = 0.01
T = TypeVar("T")
Headers = dict[str, str]


# --- WeCom's scheme, written out step by step as an independent reference ---------------------------


def reference_encrypt(message: str, receive_id: str, encoding_aes_key: str, random16: bytes) -> str:
    """random(16) + length(4, big-endian) + message + receive id, PKCS#7 to 32-byte blocks (cryptography's
    own padder with a 256-bit block), AES-256-CBC with the key's first 16 bytes as IV, base64."""
    key = base64.b64decode(encoding_aes_key + "=")
    body = message.encode("utf-8")
    plain = random16 + struct.pack(">I", len(body)) + body + receive_id.encode("utf-8")
    padder = padding.PKCS7(256).padder()
    padded = padder.update(plain) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(padded) + encryptor.finalize()).decode("ascii")


def reference_decrypt(encrypted: str, encoding_aes_key: str) -> tuple[str, str]:
    """(message, receive id) of a ciphertext, by the same steps backwards."""
    key = base64.b64decode(encoding_aes_key + "=")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    unpadder = padding.PKCS7(256).unpadder()
    plain = unpadder.update(padded) + unpadder.finalize()
    (length,) = struct.unpack(">I", plain[16:20])
    return plain[20 : 20 + length].decode("utf-8"), plain[20 + length :].decode("utf-8")


def reference_signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def raw_encrypt(plain: bytes, encoding_aes_key: str) -> str:
    """AES-256-CBC of bytes already a whole number of blocks (to forge bad padding and lengths)."""
    key = base64.b64decode(encoding_aes_key + "=")
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(plain) + encryptor.finalize()).decode("ascii")


# --- the crypto ---------------------------------------------------------------------------------------

# WeCom's published samples (WXBizMsgCrypt, Sample.py / Sample.cs of its callback libraries, 2014): the
# URL check and one encrypted message, under token QDG6eK and CorpID wx5823bf96d3bd56c7.
SAMPLE_TOKEN, SAMPLE_KEY, SAMPLE_CORP = (
    "QDG6eK",
    "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C",
    "wx5823bf96d3bd56c7",
)
SAMPLE_ECHO = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
SAMPLE_MESSAGE = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W"
    "/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+H"
    "MZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB"
    "3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVK"
    "n28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
)

# A fixed vector of our own: these inputs, encrypted once with reference_encrypt and signed with
# reference_signature above (python, cryptography 50), the outputs pasted here.
FIXED_KEY, FIXED_TOKEN = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR", "KnowSphereFixedVector7"
FIXED_TIMESTAMP, FIXED_NONCE, FIXED_RANDOM = "1700000000", "1319472066", b"0123456789abcdef"
FIXED_RECEIVE_ID = "ww1234567890abcdef"
FIXED_MESSAGE = "<xml><Content><![CDATA[年假有几天？]]></Content><MsgId>7300000000000000001</MsgId></xml>"
FIXED_CIPHERTEXT = (
    "pxDvIKtJjb6ivztGO70jSvwohNpUNsRELa6ltMx/1nGc92m7Sp0OYkJFLZeTCeLog2iy1mzkhrDDPnsa3eGCmrxaWlhauC/RLwiVh"
    "SXhINM8NImv++T9hr5YoEri/OCxHx+2IMSDDOmm2DZ52S7VRXu3bOFawd+BB1BksPRfiQl7tjXQcfRT6IJ1qcvSpmm45+V64QlA14"
    "ILpM3TszIqgg=="
)
FIXED_SIGNATURE = "3faf4dc738a739cb7e305a946a9bc0d91a3d2e45"


def crypto_at(now: float, token: str = TOKEN, key: str = AES_KEY, receive_id: str = CORP_ID) -> WeComCrypto:
    return WeComCrypto(token, key, receive_id, timestamp_tolerance_seconds=300, clock=lambda: now)


def test_wecoms_published_samples_verify_and_decrypt() -> None:
    url_check = crypto_at(1409659589, SAMPLE_TOKEN, SAMPLE_KEY, SAMPLE_CORP)
    opened = url_check.open(
        "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3", "1409659589", "263014780", SAMPLE_ECHO
    )
    assert opened == "1616140317555161061"

    message = crypto_at(1409659813, SAMPLE_TOKEN, SAMPLE_KEY, SAMPLE_CORP)
    plain = message.open(
        "477715d11cdb4164915debcba66cb864d751f3e6", "1409659813", "1372623149", SAMPLE_MESSAGE
    )
    assert xml_fields(plain) == {
        "ToUserName": SAMPLE_CORP,
        "FromUserName": "mycreate",
        "CreateTime": "1409659813",
        "MsgType": "text",
        "Content": "hello",
        "MsgId": "4561255354251345929",
        "AgentID": "218",
    }


def test_the_fixed_vector_is_reproduced_both_ways() -> None:
    crypto = crypto_at(1_700_000_000, FIXED_TOKEN, FIXED_KEY, FIXED_RECEIVE_ID)
    assert crypto.encrypt(FIXED_MESSAGE, random_prefix=FIXED_RANDOM) == FIXED_CIPHERTEXT
    assert signature(FIXED_TOKEN, FIXED_TIMESTAMP, FIXED_NONCE, FIXED_CIPHERTEXT) == FIXED_SIGNATURE
    assert crypto.open(FIXED_SIGNATURE, FIXED_TIMESTAMP, FIXED_NONCE, FIXED_CIPHERTEXT) == FIXED_MESSAGE


@pytest.mark.parametrize(
    "message", ["", "hello", "年假有几天？" * 50, "x" * 31, "y" * 32, "z" * 4000, "<xml>&amp;</xml>"]
)
@pytest.mark.parametrize("receive_id", [CORP_ID, ""])
def test_a_round_trip_matches_the_reference_both_ways(message: str, receive_id: str) -> None:
    crypto = crypto_at(time.time(), receive_id=receive_id)
    theirs = reference_encrypt(message, receive_id, AES_KEY, b"R" * 16)
    assert crypto.decrypt(theirs) == message
    assert reference_decrypt(crypto.encrypt(message), AES_KEY) == (message, receive_id)
    timestamp, nonce = str(int(time.time())), "8877"
    encrypted, signed = crypto.seal(message, timestamp, nonce)
    assert signed == reference_signature(TOKEN, timestamp, nonce, encrypted)
    assert crypto.open(signed, timestamp, nonce, encrypted) == message


def test_a_callback_that_is_not_authentic_fresh_or_well_formed_is_refused_naming_the_check() -> None:
    now = 1_700_000_000
    crypto = crypto_at(now)
    good = reference_encrypt("<xml/>", CORP_ID, AES_KEY, b"r" * 16)
    sign = reference_signature(TOKEN, str(now), "n1", good)

    tampered = ("0" if sign[0] != "0" else "1") + sign[1:]
    with pytest.raises(SignatureMismatch):
        crypto.open(tampered, str(now), "n1", good)
    with pytest.raises(SignatureMismatch):  # another ciphertext under the same signature
        crypto.open(sign, str(now), "n1", reference_encrypt("<xml>x</xml>", CORP_ID, AES_KEY, b"r" * 16))
    for stale in (now - 301, now + 301):
        old = reference_signature(TOKEN, str(stale), "n1", good)
        with pytest.raises(StaleTimestamp, match="301 s away"):
            crypto.open(old, str(stale), "n1", good)
    assert crypto.open(reference_signature(TOKEN, str(now - 299), "n1", good), str(now - 299), "n1", good)
    with pytest.raises(MalformedTimestamp):
        crypto.open(reference_signature(TOKEN, "soon", "n1", good), "soon", "n1", good)

    def signed(encrypted: str) -> str:
        return crypto.open(reference_signature(TOKEN, str(now), "n1", encrypted), str(now), "n1", encrypted)

    with pytest.raises(WrongReceiveId):
        signed(reference_encrypt("<xml/>", "ww-another-corp", AES_KEY, b"r" * 16))
    with pytest.raises(WrongReceiveId):  # an AI bot's message (receive id "") at an application
        signed(reference_encrypt("<xml/>", "", AES_KEY, b"r" * 16))
    header = b"r" * 16 + struct.pack(">I", 6) + b"<xml/>" + CORP_ID.encode()
    for bad_pad in (b"\x00", b"\x21", b"\x03\x03\x02"):
        block = header + b"\x01" * (64 - len(header) - len(bad_pad)) + bad_pad
        with pytest.raises(BadPadding):
            signed(raw_encrypt(block, AES_KEY))
    too_long = b"r" * 16 + struct.pack(">I", 1000) + b"<xml/>"
    with pytest.raises(BadLength, match="declares a 1000-byte message"):
        signed(raw_encrypt(too_long + bytes([32 - len(too_long) % 32]) * (32 - len(too_long) % 32), AES_KEY))
    with pytest.raises(BadLength, match="shorter than its 20-byte header"):
        signed(raw_encrypt(b"r" * 8 + bytes([24]) * 24, AES_KEY))
    with pytest.raises(MalformedCiphertext):
        signed("not base64!")
    with pytest.raises(MalformedCiphertext):
        signed(base64.b64encode(b"x" * 20).decode())
    with pytest.raises(ValueError, match="43 characters"):
        WeComCrypto(TOKEN, AES_KEY[:-1], CORP_ID)


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<xml><Encrypt>&lol4;</Encrypt></xml>"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE xml [<!ENTITY secret SYSTEM "file:///etc/passwd">]><xml><Encrypt>&secret;</Encrypt></xml>"""
PARAMETER_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE xml [<!ENTITY % remote SYSTEM "http://169.254.169.254/x.dtd"> %remote;]><xml/>"""
JUST_A_DOCTYPE = '<!DOCTYPE xml SYSTEM "http://example.com/wecom.dtd"><xml><Encrypt>a</Encrypt></xml>'


@pytest.mark.parametrize("document", [BILLION_LAUGHS, EXTERNAL_ENTITY, PARAMETER_ENTITY, JUST_A_DOCTYPE])
def test_hostile_xml_is_refused_before_anything_is_expanded_or_fetched(document: str) -> None:
    with pytest.raises(HostileXml):
        xml_fields(document)


def test_xml_fields_reads_wecoms_flat_xml_and_refuses_anything_else() -> None:
    envelope = "<xml><ToUserName><![CDATA[ww1]]></ToUserName><Encrypt><![CDATA[a+b/c==]]></Encrypt></xml>"
    assert xml_fields(envelope) == {"ToUserName": "ww1", "Encrypt": "a+b/c=="}
    assert xml_fields("<xml><A>1<B>2</B>3</A></xml>") == {"A": "13"}  # deeper elements are not fields
    for broken in ("<xml><A>1</xml>", "<xml>&undefined;</xml>", "", "<xml><A/><A/></xml>"):
        with pytest.raises(MalformedXml):
            xml_fields(broken)
    with pytest.raises(MalformedXml, match="deeper"):
        xml_fields("<a>" * 20 + "</a>" * 20)
    with pytest.raises(MalformedXml, match="more than 256 elements"):
        xml_fields("<xml><A>" + "<B/>" * 300 + "</A></xml>")


# --- answers as WeCom shows them ----------------------------------------------------------------------


def test_markers_become_numbered_footnotes_and_a_cut_marker_is_held_back() -> None:
    text = "".join(ANSWER) + " Also [[c9]] and again [[c1]]."
    assert plain_answer(text, [HANDBOOK, POLICY], "来源") == (
        "Employees get 27 days of leave [1] and carry it over [2]. Also  and again [1].\n\n来源\n"
        "[1] handbook.pdf, p. 4\n[2] policy.pdf, p. 1"
    )
    web = Citation(handle="c1", url="https://example.com/leave", title="Leave rules")
    assert plain_answer("See [[c1]].", [web], "Sources") == (
        "See [1].\n\nSources\n[1] Leave rules https://example.com/leave"
    )
    assert plain_answer("No sources here.", [], "来源") == "No sources here."
    assert progress_text("Employees get [[c2]] days [[c", [HANDBOOK, POLICY]) == "Employees get [1] days "
    assert progress_text("Employees get [[c2]] days [[c2]") == "Employees get [1] days "


def test_long_answers_are_cut_into_whole_characters_within_wecoms_byte_limit() -> None:
    text = "\n".join(["年假" * 200] * 6)  # 6 lines of 1,200 bytes
    parts = utf8_parts(text, 2048, 10)
    assert all(len(part.encode()) <= 2048 for part in parts)
    assert "".join(parts).replace("\n", "") == text.replace("\n", "")
    assert len(utf8_parts(text * 10, 2048, 2)) == 2 and utf8_parts(text * 10, 2048, 2)[-1].endswith("…")
    assert utf8_parts("short", 2048, 5) == ["short"]


def test_streams_are_bounded_in_number_and_time_and_found_only_under_their_application() -> None:
    now = [0.0]
    streams = StreamRegistry(ttl_seconds=60, max_streams=2, clock=lambda: now[0])
    first = streams.open("acme", "app_1", "s1")
    assert first is not None and streams.open("acme", "app_1", "s1") is first
    assert streams.get("globex", "app_1", "s1") is None and streams.get("acme", "app_2", "s1") is None
    second = streams.open("acme", "app_1", "s2")
    assert second is not None
    assert streams.open("acme", "app_1", "s3") is None  # full of unfinished answers: refused
    first.finish("done")
    assert streams.open("acme", "app_1", "s3") is not None  # a finished one gave way
    assert streams.get("acme", "app_1", "s1") is None
    now[0] = 61
    assert len(streams) == 0


def test_a_wecom_user_is_a_user_of_the_applications_tenant_of_their_own() -> None:
    assert wecom_identity("acme", "app_1", "zhangsan") == Identity("acme", "wecom:app_1:zhangsan")
    odd = wecom_identity("acme", "app_1", "张三 with spaces")
    assert odd.tenant_id == "acme" and odd.user_id.startswith("wecom:app_1:h")


# --- the channels through the gateway -----------------------------------------------------------------


@dataclass
class WeComApiServer:
    """WeCom's API as far as the gateway uses it, scripted, on a loopback socket."""

    base_url: str = ""
    token_fetches: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def next_messages(self, count: int) -> list[dict[str, Any]]:
        async with asyncio.timeout(WAIT_SECONDS):
            while len(self.sent) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.sent[:count]


@asynccontextmanager
async def wecom_api_server() -> AsyncIterator[WeComApiServer]:
    server = WeComApiServer()

    async def gettoken(request: web.Request) -> web.Response:
        server.token_fetches += 1
        if (request.query.get("corpid"), request.query.get("corpsecret")) != (CORP_ID, SECRET):
            return web.json_response({"errcode": 40001, "errmsg": "invalid credential"})
        return web.json_response(
            {"errcode": 0, "errmsg": "ok", "access_token": "ACCESS-1", "expires_in": 7200}
        )

    async def send(request: web.Request) -> web.Response:
        if request.query.get("access_token") != "ACCESS-1":
            return web.json_response({"errcode": 40014, "errmsg": "invalid access_token"})
        server.sent.append(await request.json())
        server.arrived.set()
        return web.json_response({"errcode": 0, "errmsg": "ok", "msgid": f"m{len(server.sent)}"})

    app = web.Application()
    app.router.add_get("/cgi-bin/gettoken", gettoken)
    app.router.add_post("/cgi-bin/message/send", send)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.base_url = f"http://{host}:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


def loopback_api(server: WeComApiServer) -> WeComApi:
    port = int(server.base_url.rsplit(":", 1)[1])
    policy = EgressPolicy(allow_networks=(ip_network("127.0.0.0/8"),), allowed_ports=frozenset({port}))
    return WeComApi(EgressClient(policy), server.base_url)


@dataclass
class Script:
    """The conversation stand-in: records each turn with its asker and answers it, pausing before each
    text delta past the first while ``gated`` (the test opens one gate per delta)."""

    heard: list[tuple[Identity, ChatRequested]] = field(default_factory=list)
    gated: bool = False
    gates: asyncio.Queue[None] = field(default_factory=asyncio.Queue)

    def events(self, turn_id: str) -> list[ChatTurnEvent]:
        kinds: list[dict[str, Any]] = [
            {"kind": TurnEventKind.STARTED},
            {"kind": TurnEventKind.SOURCES, "citations": [HANDBOOK, POLICY]},
            *({"kind": TurnEventKind.TEXT_DELTA, "text": piece} for piece in ANSWER),
            {"kind": TurnEventKind.COMPLETED, "text": "".join(ANSWER), "citations": [HANDBOOK, POLICY]},
        ]
        return [ChatTurnEvent(turn_id=turn_id, sequence=n, **kind) for n, kind in enumerate(kinds)]


@asynccontextmanager
async def scripted_bus(script: Script) -> AsyncIterator[tuple[Any, Fanout[ChatTurnEvent]]]:
    broker: NatsBroker = build_broker("nats://unused:4222", client_name="test")
    events: Fanout[ChatTurnEvent] = Fanout()
    bus = build_bus(events)
    broker.include_router(bus.router)
    running: set[asyncio.Task[None]] = set()

    async def answer(request: ChatRequested) -> None:
        subject = ChatTurnEvent.subject_for(require_identity().tenant_id, request.turn_id)
        deltas = 0
        for event in script.events(request.turn_id):
            if event.kind is TurnEventKind.TEXT_DELTA:
                deltas += 1
                if script.gated and deltas > 1:
                    await script.gates.get()
            if event.kind is TurnEventKind.COMPLETED and script.gated:
                await script.gates.get()
            await broker.publish(event.model_dump(mode="json"), subject=subject)

    @broker.subscriber(ChatRequested.subject, stream=CHAT_REQUESTS)
    async def conversation(request: ChatRequested) -> None:
        script.heard.append((require_identity(), request))
        task = asyncio.create_task(answer(request))  # the turn goes on after the request is queued
        running.add(task)
        task.add_done_callback(running.discard)

    async with TestNatsBroker(broker):
        yield bus, events
        for task in running:
            task.cancel()


async def _no_history(thread: str) -> list[Any]:
    return []


async def _no_cancel(turn_id: str) -> bool:
    return False


async def _no_forget(thread: str, session_id: str) -> None:
    return None


@dataclass
class WeCom:
    """WeCom's side of one application: encrypts, signs and posts callbacks as WeCom does (with the
    reference above), and opens the bot's replies."""

    http: httpx.AsyncClient
    path: str
    token: str
    key: str
    receive_id: str
    counter: int = 0

    def query(self, encrypted: str, timestamp: int | None = None, nonce: str | None = None) -> dict[str, str]:
        self.counter += 1
        stamp, once = str(timestamp or int(time.time())), nonce or f"{self.counter:09d}"
        signed = reference_signature(self.token, stamp, once, encrypted)
        return {"msg_signature": signed, "timestamp": stamp, "nonce": once}

    def encrypt(self, message: str) -> str:
        return reference_encrypt(message, self.receive_id, self.key, self.counter.to_bytes(16, "big"))

    async def check_url(self, challenge: str) -> httpx.Response:
        echo = self.encrypt(challenge)
        return await self.http.get(self.path, params={**self.query(echo), "echostr": echo})

    async def post(self, body: str | bytes, encrypted: str, **signing: Any) -> httpx.Response:
        return await self.http.post(self.path, params=self.query(encrypted, **signing), content=body)

    async def text(self, user: str, content: str, msg_id: str, **signing: Any) -> httpx.Response:
        inner = (
            f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><FromUserName><![CDATA[{user}]]>"
            f"</FromUserName><CreateTime>{int(time.time())}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{content}]]></Content><MsgId>{msg_id}</MsgId><AgentID>{AGENT_ID}</AgentID></xml>"
        )
        encrypted = self.encrypt(inner)
        envelope = (
            f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt>"
            f"<AgentID><![CDATA[{AGENT_ID}]]></AgentID></xml>"
        )
        return await self.post(envelope, encrypted, **signing)

    async def bot(self, message: dict[str, Any], **signing: Any) -> httpx.Response:
        encrypted = self.encrypt(json.dumps(message, ensure_ascii=False))
        return await self.post(json.dumps({"encrypt": encrypted}), encrypted, **signing)

    def opened(self, reply: httpx.Response) -> dict[str, Any]:
        """The bot's reply, its signature checked and decrypted as WeCom would."""
        assert reply.status_code == 200, reply.text
        body = reply.json()
        signed = reference_signature(self.token, str(body["timestamp"]), body["nonce"], body["encrypt"])
        assert body["msgsignature"] == signed
        message, receive_id = reference_decrypt(body["encrypt"], self.key)
        assert receive_id == self.receive_id
        opened: dict[str, Any] = json.loads(message)
        return opened


@dataclass
class Channels:
    http: httpx.AsyncClient
    admin: Headers
    stranger: Headers
    script: Script
    api: WeComApiServer
    made: int = 0

    async def orchestrator(self, headers: Headers | None = None) -> str:
        headers = headers or self.admin
        self.made += 1
        agent = await self.http.post("/api/v1/agents", headers=headers, json={"name": f"agent-{self.made}"})
        assert agent.status_code == 201, agent.text
        created = await self.http.post(
            "/api/v1/orchestrators",
            headers=headers,
            json={"name": f"desk-{self.made}", "mode": "single", "config": {"agent_id": agent.json()["id"]}},
        )
        assert created.status_code == 201, created.text
        orchestrator_id: str = created.json()["id"]
        return orchestrator_id

    async def application(
        self, platform: str, config: dict[str, Any], headers: Headers | None = None, **fields: Any
    ) -> dict[str, Any]:
        headers = headers or self.admin
        body = {
            "name": f"{platform.replace('_', '-')}-{self.made + 1}",
            "platform": platform,
            "orchestrator_id": await self.orchestrator(headers),
            "platform_config": config,
            **fields,
        }
        created = await self.http.post("/api/v1/applications", headers=headers, json=body)
        assert created.status_code == 201, created.text
        application: dict[str, Any] = created.json()
        return application

    async def classic(self, **fields: Any) -> tuple[dict[str, Any], WeCom]:
        config = {"corp_id": CORP_ID, "agent_id": AGENT_ID, "token": TOKEN, "encoding_aes_key": AES_KEY}
        app = await self.application("wework_traditional", {**config, "secret": SECRET}, **fields)
        return app, WeCom(self.http, app["callback_path"], TOKEN, AES_KEY, CORP_ID)

    async def aibot(self, **fields: Any) -> tuple[dict[str, Any], WeCom]:
        config = {"token": BOT_TOKEN, "encoding_aes_key": BOT_AES_KEY, "bot_id": "bot-hr"}
        app = await self.application("wework_aibot", config, **fields)
        return app, WeCom(self.http, app["callback_path"], BOT_TOKEN, BOT_AES_KEY, "")


async def bearer(tokens: TokenService, identity: Identity, role: Role) -> Headers:
    issued = await tokens.issue(identity, role, name=f"{role} of {identity.tenant_id}", ttl=timedelta(days=1))
    return {"authorization": f"Bearer {issued.token}"}


ChannelsFactory = Callable[..., Any]


@pytest.fixture
async def channels(
    gateway: Any, client: Any, tokens: TokenService, tmp_path: Path
) -> AsyncIterator[ChannelsFactory]:
    """``async with channels(**context) as c:`` the gateway with a key ring, the scripted WeCom API and
    conversation; ``context`` overrides fields of its ``GatewayContext``."""

    built = 0

    @asynccontextmanager
    async def build(script: Script | None = None, **context: Any) -> AsyncIterator[Channels]:
        nonlocal built
        built += 1
        sessions = sessions_sql.SqlSessionStore(f"sqlite+aiosqlite:///{tmp_path}/conversation-{built}.db")
        await sessions.open()
        servicers = [
            conversation_api.AgentServicer(sessions),
            conversation_api.OrchestratorServicer(sessions),
            conversation_api.ConversationServicer(
                sessions, _no_history, _no_cancel, _no_forget, bindings=sessions
            ),
        ]
        script = script or Script()
        try:
            async with wecom_api_server() as api, scripted_bus(script) as (bus, events):
                app = await gateway(
                    conversation=servicers,
                    local_identity=None,
                    bus=bus,
                    chat_events=events,
                    channel_secrets=ChannelSecrets(KeyRing.from_strings(MASTER_KEY)),
                    wecom_api=loopback_api(api),
                    **context,
                )
                async with client(app) as http:
                    yield Channels(
                        http,
                        await bearer(tokens, OWNER, Role.ADMIN),
                        await bearer(tokens, STRANGER, Role.ADMIN),
                        script,
                        api,
                    )
        finally:
            await sessions.close()

    yield build


async def polled(read: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
    """``read()`` again every 10 ms until ``done`` says yes (at most ``WAIT_SECONDS``)."""
    for _ in range(int(WAIT_SECONDS / POLL_SECONDS)):
        value = await read()
        if done(value):
            return value
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError(f"not done after {WAIT_SECONDS} s: {value!r}")


async def test_wecom_checks_the_callback_url_of_each_platform(channels: ChannelsFactory) -> None:
    async with channels() as c:
        _, classic = await c.classic()
        checked = await classic.check_url("1616140317555161061")
        assert (checked.status_code, checked.text) == (200, "1616140317555161061")
        assert checked.headers["content-type"].startswith("text/plain")
        _, bot = await c.aibot()
        checked = await bot.check_url("echo-of-the-bot")
        assert (checked.status_code, checked.text) == (200, "echo-of-the-bot")


async def test_a_message_sent_three_times_makes_one_turn_and_its_answer_reaches_the_user(
    channels: ChannelsFactory,
) -> None:
    async with channels() as c:
        app, wecom = await c.classic()
        for _ in range(3):  # WeCom sends a message again when the first answer is late
            posted = await wecom.text("zhangsan", "年假有几天？", "7300000000000000001")
            assert (posted.status_code, posted.text) == (200, "")
        [sent] = await c.api.next_messages(1)
        assert sent == {
            "touser": "zhangsan",
            "msgtype": "text",
            "agentid": AGENT_ID,
            "text": {"content": WECOM_ANSWER},
            "safe": 0,
        }
        [(asker, turn)] = c.script.heard
        assert asker == Identity(OWNER.tenant_id, f"wecom:{app['id']}:zhangsan")
        assert turn.message == "年假有几天？" and turn.session_id

        # The user's next message: the same session (history kept), the access token reused.
        await wecom.text("zhangsan", "能结转吗？", "7300000000000000002")
        await wecom.text("lisi", "How many days?", "7300000000000000003")
        await c.api.next_messages(3)
        assert [m["touser"] for m in c.api.sent] == ["zhangsan", "zhangsan", "lisi"]
        sessions = [request.session_id for _, request in c.script.heard]
        assert sessions[0] == sessions[1] != sessions[2]
        assert c.api.token_fetches == 1
        await asyncio.sleep(0.2)
        assert len(c.script.heard) == 3 and len(c.api.sent) == 3  # nothing more came of the retries


async def test_other_messages_get_a_short_answer_and_events_nothing(channels: ChannelsFactory) -> None:
    async with channels() as c:
        _, wecom = await c.classic()
        image = (
            f"<xml><ToUserName>{CORP_ID}</ToUserName><FromUserName>zhangsan</FromUserName><CreateTime>1"
            f"</CreateTime><MsgType>image</MsgType><PicUrl>https://example.com/a.png</PicUrl><MsgId>81</MsgId>"
            f"<AgentID>{AGENT_ID}</AgentID></xml>"
        )
        event = (
            f"<xml><FromUserName>zhangsan</FromUserName><MsgType>event</MsgType><Event>enter_agent</Event>"
            f"<AgentID>{AGENT_ID}</AgentID></xml>"
        )
        for inner in (event, image):
            encrypted = wecom.encrypt(inner)
            posted = await wecom.post(f"<xml><Encrypt>{encrypted}</Encrypt></xml>", encrypted)
            assert (posted.status_code, posted.text) == (200, "")
        [sent] = await c.api.next_messages(1)
        assert (sent["touser"], sent["text"]["content"]) == ("zhangsan", UNSUPPORTED_TEXT)

        _, bot = await c.aibot()
        picture = {"msgid": "p1", "aibotid": "bot-hr", "from": {"userid": "wangwu"}, "msgtype": "image"}
        assert bot.opened(await bot.bot(picture))["stream"] == {
            "id": bot.opened(await bot.bot(picture))["stream"]["id"],
            "finish": True,
            "content": UNSUPPORTED_TEXT,
        }
        other_bot = {
            **picture,
            "msgid": "p2",
            "aibotid": "bot-sales",
            "msgtype": "text",
            "text": {"content": "hi"},
        }
        assert (await bot.bot(other_bot)).text == ""
        await asyncio.sleep(0.2)
        assert c.script.heard == [] and len(c.api.sent) == 1


async def test_an_ai_bot_streams_its_answer_until_it_finishes(channels: ChannelsFactory) -> None:
    async with channels(Script(gated=True)) as c:
        app, wecom = await c.aibot()
        message = {
            "msgid": "CAIQ16HMjQYY/NGagIOAgAMgq4KM0AI=",
            "aibotid": "bot-hr",
            "chatid": "chat-1",
            "chattype": "group",
            "from": {"userid": "wangwu"},
            "msgtype": "text",
            "text": {"content": "@HR-bot 年假有几天？"},
        }
        first = wecom.opened(await wecom.bot(message))
        assert first["msgtype"] == "stream" and first["stream"]["finish"] is False
        stream_id = first["stream"]["id"]

        async def heard() -> list[tuple[Identity, ChatRequested]]:
            return c.script.heard

        [(asker, turn)] = await polled(heard, bool)
        assert turn.message == "年假有几天？"  # the group's @mention of the bot is not part of the question
        assert asker == Identity(OWNER.tenant_id, f"wecom:{app['id']}:wangwu")

        async def refreshed() -> dict[str, Any]:
            refresh = {**message, "msgtype": "stream", "stream": {"id": stream_id}}
            refresh.pop("text")
            stream: dict[str, Any] = wecom.opened(await wecom.bot(refresh))["stream"]
            assert stream["id"] == stream_id
            return stream

        seen: list[str] = []
        for _ in ANSWER:
            before = seen[-1] if seen else ""
            stream = await polled(refreshed, lambda stream, before=before: stream["content"] != before)
            assert stream["finish"] is False
            seen.append(stream["content"])
            c.script.gates.put_nowait(None)
        assert seen == [
            "Employees get 27 days",
            "Employees get 27 days of leave [1]",
            progress_text("".join(ANSWER)),
        ]
        stream = await polled(refreshed, lambda stream: stream["finish"])
        assert stream["content"] == WECOM_ANSWER

        again = wecom.opened(await wecom.bot(message))  # WeCom sends the message again: the same stream
        assert again["stream"] == {"id": stream_id, "finish": True, "content": WECOM_ANSWER}
        assert len(c.script.heard) == 1
        lost = {**message, "msgtype": "stream", "stream": {"id": "no-such-stream"}}
        assert wecom.opened(await wecom.bot(lost))["stream"]["content"] == EXPIRED_TEXT


async def test_another_tenants_application_gets_nothing_and_the_same_answer_as_a_missing_one(
    channels: ChannelsFactory,
) -> None:
    async with channels() as c:
        app, wecom = await c.classic()
        # The stranger has a WeCom application of their own, with the same token even.
        theirs, _ = await c.classic(headers=c.stranger)
        assert theirs["tenant_id"] == STRANGER.tenant_id
        missing = WeCom(
            c.http, app["callback_path"].replace(app["id"], "app_0000000000000000"), TOKEN, AES_KEY, CORP_ID
        )
        # The owner's application under another tenant's path: WeCom's signature is right, the tenant is not.
        foreign = WeCom(c.http, app["callback_path"].replace("/acme/", "/globex/"), TOKEN, AES_KEY, CORP_ID)
        forged = WeCom(c.http, app["callback_path"], "WrongToken123", AES_KEY, CORP_ID)
        # The bot's JSON at the application's URL, signed with the application's own token.
        other_kind = WeCom(c.http, app["callback_path"], TOKEN, AES_KEY, CORP_ID)
        answers = [
            await missing.text("zhangsan", "hi", "1"),
            await foreign.text("zhangsan", "hi", "2"),
            await forged.text("zhangsan", "hi", "3"),
            await other_kind.bot({"msgtype": "text", "from": {"userid": "x"}, "text": {"content": "hi"}}),
            await missing.check_url("echo"),
            await foreign.check_url("echo"),
            await forged.check_url("echo"),
        ]
        off = await c.http.patch(f"/api/v1/applications/{app['id']}", headers=c.admin, json={"active": False})
        assert off.status_code == 200
        answers += [await wecom.text("zhangsan", "hi", "4"), await wecom.check_url("echo")]
        assert {(a.status_code, a.text) for a in answers} == {
            (
                401,
                '{"error":{"code":"unauthenticated","message":"callback refused: unknown callback URL, or a '
                'signature that does not verify"}}',
            )
        }
        assert c.script.heard == [] and c.api.sent == []


async def test_stale_tampered_hostile_and_oversized_callbacks_are_refused(channels: ChannelsFactory) -> None:
    async with channels() as c:
        app, wecom = await c.classic()
        missing = WeCom(
            c.http, app["callback_path"].replace(app["id"], "app_0000000000000000"), TOKEN, AES_KEY, CORP_ID
        )
        # A recorded callback played back an hour later (its signature is right for its old timestamp).
        stale = await wecom.text("zhangsan", "hi", "11", timestamp=int(time.time()) - 3600)
        assert stale.status_code == 401 and stale.json()["error"]["code"] == "stale_timestamp"
        # A message that is not for this company (a right signature over another CorpID's message).
        other_corp = WeCom(c.http, app["callback_path"], TOKEN, AES_KEY, "ww-another-corp")
        wrong_corp = await other_corp.text("zhangsan", "hi", "12")
        assert wrong_corp.status_code == 400 and wrong_corp.json()["error"]["code"] == "wrong_receive_id"
        # Hostile or oversized bodies are refused alike for every URL, before the application is looked up.
        for target in (wecom, missing):
            hostile = await target.post(BILLION_LAUGHS, "x")
            assert hostile.status_code == 400 and hostile.json()["error"]["code"] == "hostile_xml"
            external = await target.post(EXTERNAL_ENTITY, "x")
            assert external.status_code == 400 and external.json()["error"]["code"] == "hostile_xml"
            huge = await target.post(b"<xml><Encrypt>" + b"A" * 70_000 + b"</Encrypt></xml>", "x")
            assert huge.status_code == 413 and huge.json()["error"]["field"] == "body"
            deep = await target.post("[" * 30_000 + "]" * 30_000, "x")
            assert deep.status_code == 400
            nested = await target.post('{"encrypt": ' + "[" * 30_000 + "]" * 30_000 + "}", "x")
            assert nested.status_code == 400
            neither = await target.post("encrypt=abc", "x")
            assert neither.status_code == 400 and neither.json()["error"]["field"] == "body"
        assert c.script.heard == [] and c.api.sent == []


async def test_messages_over_the_applications_limits_get_a_busy_answer_and_make_no_turn(
    channels: ChannelsFactory,
) -> None:
    async with channels(wecom=WeComOptions(max_streams=1)) as c:
        _, wecom = await c.classic(rate_limit_per_second=0.001, rate_limit_burst=1)
        for n in range(3):
            assert (await wecom.text("zhangsan", f"question {n}", f"9{n}")).status_code == 200
        sent = await c.api.next_messages(3)
        assert sorted(m["text"]["content"] for m in sent) == sorted([WECOM_ANSWER, BUSY_TEXT, BUSY_TEXT])
        assert len(c.script.heard) == 1

    async with channels(Script(gated=True), wecom=WeComOptions(max_streams=1)) as c:
        _, bot = await c.aibot()

        def text(n: int) -> dict[str, Any]:
            return {
                "msgid": f"m{n}",
                "aibotid": "bot-hr",
                "chattype": "single",
                "from": {"userid": "wangwu"},
                "msgtype": "text",
                "text": {"content": f"question {n}"},
            }

        running = bot.opened(await bot.bot(text(1)))["stream"]
        assert running["finish"] is False
        busy = bot.opened(await bot.bot(text(2)))["stream"]  # one stream at most, and it is still running
        assert (busy["finish"], busy["content"]) == (True, BUSY_TEXT)

        async def refreshed() -> dict[str, Any]:
            refresh = {**text(1), "msgtype": "stream", "stream": {"id": running["id"]}}
            stream: dict[str, Any] = bot.opened(await bot.bot(refresh))["stream"]
            return stream

        for _ in range(len(ANSWER)):
            c.script.gates.put_nowait(None)
        assert (await polled(refreshed, lambda stream: stream["finish"]))["content"] == WECOM_ANSWER
        assert [request.message for _, request in c.script.heard] == ["question 1"]


# --- channel settings and their secrets --------------------------------------------------------------


async def test_channel_settings_are_checked_naming_the_field(channels: ChannelsFactory) -> None:
    async with channels() as c:
        desk = await c.orchestrator()
        good = {
            "corp_id": CORP_ID,
            "agent_id": AGENT_ID,
            "token": TOKEN,
            "encoding_aes_key": AES_KEY,
            "secret": SECRET,
        }
        cases: list[tuple[str, dict[str, Any], str, str]] = [
            (
                "wework_traditional",
                {**good, "encoding_aes_key": AES_KEY[:40]},
                "encoding_aes_key",
                "43 characters",
            ),
            ("wework_traditional", {**good, "encoding_aes_key": "!" * 43}, "encoding_aes_key", "base64"),
            ("wework_traditional", {**good, "token": "no"}, "token", "3-32 letters and digits"),
            ("wework_traditional", {**good, "agent_id": 0}, "agent_id", "AgentId"),
            ("wework_traditional", {**good, "corp_id": "ww 1"}, "corp_id", "CorpID"),
            ("wework_traditional", {**good, "message_format": "html"}, "message_format", "text, markdown"),
            ("wework_traditional", {**good, "bot_id": "b"}, "bot_id", "not a setting of wework_traditional"),
            ("wework_traditional", {k: v for k, v in good.items() if k != "secret"}, "secret", "required"),
            ("wework_aibot", {"token": BOT_TOKEN}, "encoding_aes_key", "required"),
            ("wework_aibot", {**good}, "agent_id", "not a setting of wework_aibot"),
        ]
        for platform, config, name, words in cases:
            body = {"name": "desk", "platform": platform, "orchestrator_id": desk, "platform_config": config}
            refused = await c.http.post("/api/v1/applications", headers=c.admin, json=body)
            assert refused.status_code == 400, (config, refused.text)
            error = refused.json()["error"]
            assert error["field"] == f"platform_config.{name}" and words in error["message"], error
            for value in (TOKEN, AES_KEY, SECRET, BOT_TOKEN):
                assert value not in refused.text
        plain = {
            "name": "web",
            "platform": "webclient",
            "orchestrator_id": desk,
            "platform_config": {"token": TOKEN},
        }
        refused = await c.http.post("/api/v1/applications", headers=c.admin, json=plain)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "platform_config"
        assert (await c.http.get("/api/v1/applications", headers=c.admin)).json() == {"applications": []}


async def test_secrets_are_write_only_stored_encrypted_and_changed_one_at_a_time(
    channels: ChannelsFactory, tmp_path: Path
) -> None:
    async with channels() as c:
        app, wecom = await c.classic()
        path = f"/api/v1/applications/{app['id']}"
        answers = [
            app,
            (await c.http.get(path, headers=c.admin)).json(),
            (await c.http.get("/api/v1/applications", headers=c.admin)).json(),
        ]
        assert app["platform_config"] == {"corp_id": CORP_ID, "agent_id": AGENT_ID}
        assert app["platform_secrets"] == {
            "token": mask(TOKEN),
            "encoding_aes_key": mask(AES_KEY),
            "secret": mask(SECRET),
        }
        assert mask(SECRET) == "…6789"
        assert app["callback_path"] == f"/api/v1/wecom/{OWNER.tenant_id}/{app['id']}/callback"

        # A new app secret alone: the callback token and key stay, and the callback still verifies.
        new_secret = "another-wecom-app-secret-0000000000"
        changed = await c.http.patch(path, headers=c.admin, json={"platform_config": {"secret": new_secret}})
        assert changed.status_code == 200, changed.text
        answers.append(changed.json())
        assert changed.json()["platform_secrets"]["secret"] == mask(new_secret)
        assert changed.json()["platform_secrets"]["token"] == mask(TOKEN)
        assert (await wecom.check_url("still-me")).text == "still-me"
        moved = await c.http.patch(path, headers=c.admin, json={"platform": "webclient"})
        answers.append(moved.json())
        assert (moved.json()["platform_config"], moved.json()["platform_secrets"]) == ({}, {})
        assert moved.json()["callback_path"] is None

        for answer in answers:
            text = json.dumps(answer, ensure_ascii=False)
            for secret in (TOKEN, AES_KEY, SECRET, new_secret):
                assert secret not in text
        # At rest: only ciphertexts (the row as the database holds it).
        app2, _ = await c.aibot()
        with sqlite3.connect(tmp_path / "tokens.db") as db:
            [(stored,)] = db.execute("select platform_secrets from applications where id = ?", (app2["id"],))
        assert BOT_TOKEN not in stored and BOT_AES_KEY not in stored and '"ciphertext":"v2:' in stored


def test_a_secret_copied_to_another_application_or_field_does_not_decrypt() -> None:
    secrets = ChannelSecrets(KeyRing.from_strings(MASTER_KEY))
    now = datetime.now(UTC)
    sealed = secrets.seal("acme", "app_a", {"token": TOKEN, "secret": SECRET})

    def record(
        application_id: str, tenant_id: str, platform_secrets: dict[str, SealedSecret]
    ) -> ApplicationRecord:
        return ApplicationRecord(
            id=application_id,
            tenant_id=tenant_id,
            name=application_id,
            display_name=application_id,
            platform=Platform.WEWORK_TRADITIONAL,
            orchestrator_id="o",
            active=True,
            rate_limit_per_second=1.0,
            rate_limit_burst=1,
            created_by="u",
            create_time=now,
            update_time=now,
            platform_secrets=platform_secrets,
        )

    assert secrets.open(record("app_a", "acme", sealed), "token") == TOKEN
    for copy in (
        record("app_b", "acme", {"token": sealed["token"]}),  # another application
        record("app_a", "globex", {"token": sealed["token"]}),  # another tenant
        record("app_a", "acme", {"token": sealed["secret"]}),  # another field
    ):
        with pytest.raises(SecretError):
            secrets.open(copy, "token")


async def test_master_key_is_checked_at_start_and_a_rotation_re_encrypts_channel_secrets(
    applications: SqlApplicationStore,
) -> None:
    old = ChannelSecrets(KeyRing.from_strings(MASTER_KEY))
    await old.verify(applications)
    now = datetime.now(UTC)
    record = ApplicationRecord(
        id="app_r",
        tenant_id="acme",
        name="bot",
        display_name="bot",
        platform=Platform.WEWORK_AIBOT,
        orchestrator_id="o",
        active=True,
        rate_limit_per_second=1.0,
        rate_limit_burst=1,
        created_by="u",
        create_time=now,
        update_time=now,
        platform_secrets=old.seal("acme", "app_r", {"token": BOT_TOKEN}),
    )
    await applications.add(record)
    wrong = ChannelSecrets(KeyRing.from_strings(base64.b64encode(bytes(range(50, 82))).decode()))
    with pytest.raises(MasterKeyError):
        await wrong.verify(applications)

    new_key = base64.b64encode(bytes(range(150, 182))).decode()
    rotating = ChannelSecrets(KeyRing.from_strings(new_key, MASTER_KEY))
    report = await rotating.verify(applications)
    assert report.rotated == 1
    only_new = ChannelSecrets(KeyRing.from_strings(new_key))
    await only_new.verify(applications)
    stored = await applications.get("acme", "app_r")
    assert stored is not None and only_new.open(stored, "token") == BOT_TOKEN


async def test_an_applications_table_of_an_earlier_gateway_gets_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "create table applications (id varchar primary key, tenant_id varchar not null, "
            "name varchar not null, display_name varchar not null, platform varchar not null, "
            "orchestrator_id varchar not null, active boolean not null, "
            "rate_limit_per_second float not null, rate_limit_burst integer not null, "
            "created_by varchar not null, create_time datetime not null, update_time datetime not null)"
        )
        db.execute(
            "insert into applications values ('app_1', 'acme', 'web', 'web', 'webclient', 'o', 1, 1.0, 1, "
            "'u', '2024-01-01 00:00:00.000000', '2024-01-01 00:00:00.000000')"
        )
    store = SqlApplicationStore(f"sqlite+aiosqlite:///{path}")
    await store.open()
    try:
        old = await store.get("acme", "app_1")
        assert old is not None and (old.platform_config, old.platform_secrets) == ({}, {})
        first = await store.claim_message("acme", "app_1", "m1", datetime.now(UTC), timedelta(hours=1))
        again = await store.claim_message("acme", "app_1", "m1", datetime.now(UTC), timedelta(hours=1))
        assert (first, again) == (True, False)
        later = datetime.now(UTC) + timedelta(hours=2)  # a claim older than the window is forgotten
        assert await store.claim_message("acme", "app_1", "m1", later, timedelta(hours=1))
    finally:
        await store.close()
    reopened = SqlApplicationStore(f"sqlite+aiosqlite:///{path}")
    await reopened.open()  # the columns are there now: nothing to add
    await reopened.close()


async def test_the_access_token_is_fetched_again_when_wecom_no_longer_takes_it() -> None:
    async with wecom_api_server() as server:
        api = loopback_api(server)
        app = AppCredentials(corp_id=CORP_ID, agent_id=AGENT_ID, secret=SECRET)
        assert await api.access_token(app) == "ACCESS-1"
        api._tokens[app.cache_key].value = "EXPIRED"  # WeCom dropped it before its expiry
        await api.send(app, "zhangsan", "hello")
        assert server.token_fetches == 2 and server.sent[0]["text"] == {"content": "hello"}
        assert "secret" not in repr(app) and SECRET not in repr(app)
        await api.aclose()
