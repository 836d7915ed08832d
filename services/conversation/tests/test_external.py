"""External orchestrators: turns answered by a Dify app, an n8n workflow or an A2A agent, through the
conversation's real gRPC server and session store (SQLite and PostgreSQL), the turn runner and the HTTP
adapters, against the peers of ``external_peers.py`` on loopback sockets (scripted Dify and n8n, a real
a2a-sdk agent).

What a user notices: the application's answer streams into the turn and the next turn continues its
conversation; the API key, once saved, never comes back (only a masked hint) and is not stored in
clear; another tenant sees nothing; a base URL pointing inside the platform's network is refused, when
saved and when called; any failure of the application ends the turn once, with a message that says what
to do; a cancelled turn stops the application's answer; a turn whose replica died shows no text twice.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import structlog
from external_peers import PeerServer, Reply, closed_port, dify_answer, eventually, n8n_stream, sse
from google.protobuf import json_format, struct_pb2
from peers import CALLER, Memory, Models, Search, Tools, text
from sqlalchemy import select
from world import World

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere_contracts.events import ChatRequested, ChatTurnEvent, TurnEventKind
from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation.adapters import sessions_sql
from knowsphere_conversation.adapters.external import HttpPeers
from knowsphere_conversation.adapters.sessions_sql import SqlSessionStore
from knowsphere_conversation.api.grpc import (
    AgentServicer,
    ConversationServicer,
    OrchestratorServicer,
    build_binding,
)
from knowsphere_conversation.domain.external import (
    Diverged,
    ExternalSupport,
    OrchestratorKeys,
    ResumeGate,
    exchanges,
    rotate_keys,
)
from knowsphere_conversation.domain.graph import TurnLimits
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.orchestrators import ConfigError, ExternalConfig, Mode, parse_config
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_egress import StaticResolver
from knowsphere_runtime.identity import Identity, bound_identity
from knowsphere_runtime.rpc.testing import serving
from knowsphere_runtime.secrets import KeyRing, MasterKeyError, verify_master_key

STRANGER = Identity("globex", "mallory")
DIFY_KEY = "app-Dify0123456789abcdefXYZ"
N8N_KEY = "n8n-header-secret-0123456789"
A2A_KEY = "a2a-bearer-token-0123456789"
MASTER = base64.b64encode(os.urandom(32)).decode("ascii")
# Names the orchestrators' base URLs use: resolved when saved by one table, at call time by another (a
# name that changes its answer between the two is checked again at every call).
SAVED_NAMES = {"peer.example": ["127.0.0.1"], "inside.example": ["10.1.2.3"]}
CALLED_NAMES = {"peer.example": ["127.0.0.1"], "rebound.example": ["169.254.169.254"]}


class Crash(BaseException):
    """The process dying in the middle of a turn (nothing in the turn catches it)."""


def config(values: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(values)
    return out


@pytest.fixture(scope="module")
def peer_server() -> Iterator[PeerServer]:
    server = PeerServer()
    server.start()
    yield server
    server.stop()


@dataclass
class Rig:
    stub: Any
    world: World
    store: SqlSessionStore
    peers: PeerServer
    http: HttpPeers
    keys: OrchestratorKeys

    def dify(self, **more: Any) -> dict[str, Any]:
        return {"provider": "dify", "base_url": f"{self.peers.url}/dify/v1", "api_key": DIFY_KEY, **more}

    def n8n(self, **more: Any) -> dict[str, Any]:
        return {"provider": "n8n", "base_url": f"{self.peers.url}/n8n/hook", **more}

    def a2a(self, **more: Any) -> dict[str, Any]:
        return {"provider": "a2a", "base_url": f"{self.peers.url}/a2a", **more}

    async def orchestrator(self, name: str, values: dict[str, Any]) -> pb.Orchestrator:
        request = pb.CreateOrchestratorRequest(
            name=name, mode=pb.ORCHESTRATION_MODE_EXTERNAL, config=config(values), active=True
        )
        return (await self.stub.CreateOrchestrator(request)).orchestrator

    async def session(self, name: str, values: dict[str, Any]) -> tuple[pb.Orchestrator, str]:
        orchestrator = await self.orchestrator(name, values)
        request = pb.CreateSessionRequest(orchestrator_id=orchestrator.id)
        return orchestrator, (await self.stub.CreateSession(request)).session.id

    def runner(self, **overrides: Any) -> TurnRunner:
        """A turn runner wired as the service wires it (a fresh one: a restarted replica)."""
        options: dict[str, Any] = {
            "models": self.world.models,
            "tools": Tools(),
            "memory": Memory(),
            "search": Search(),
            "publish": self.world.runner._publish,  # type: ignore[attr-defined]
            "publish_completed": self.world.runner._publish_completed,  # type: ignore[attr-defined]
            "limits": TurnLimits(),
            "sessions": self.store,
            "agents": self.store,
            "external": ExternalSupport(self.http, self.store, self.keys),
        }
        return TurnRunner(lambda: self.world.graph, **(options | overrides))


async def make_rig(
    store: SqlSessionStore, peers: PeerServer, keys: OrchestratorKeys, *more_ports: int
) -> AsyncIterator[Rig]:
    peers.reset()
    world = World(store, Models(lambda request: text("the graph answered")))
    http = HttpPeers(peers.egress(*more_ports), resolver=StaticResolver(CALLED_NAMES), answer_seconds=20)
    rig = Rig(None, world, store, peers, http, keys)
    world.runner = rig.runner()
    servicer = ConversationServicer(store, world.history, world.cancel, world.forget, bindings=store)
    orchestrators = OrchestratorServicer(
        store, keys=keys, egress=peers.egress(*more_ports), resolver=StaticResolver(SAVED_NAMES)
    )
    binding = build_binding(servicer, AgentServicer(store), orchestrators)
    async with serving("conversation", binding=binding) as channel:
        rig.stub = CONTRACTS["conversation"].stub(channel)
        yield rig
    await http.stop()


@pytest.fixture
async def rig(store: SqlSessionStore, peer_server: PeerServer) -> AsyncIterator[Rig]:
    async for made in make_rig(store, peer_server, OrchestratorKeys(KeyRing.from_strings(MASTER))):
        yield made


async def refused(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    assert error.value.code() == code, error.value.details()
    return error.value.details() or ""


def streamed(events: list[ChatTurnEvent]) -> str:
    return "".join(e.text or "" for e in events if e.kind is TurnEventKind.TEXT_DELTA)


def finals(events: list[ChatTurnEvent]) -> list[ChatTurnEvent]:
    return [e for e in events if e.is_final]


# --- configuration -----------------------------------------------------------------------------------


def test_an_external_configuration_is_checked_field_by_field() -> None:
    parsed = parse_config(
        Mode.EXTERNAL,
        {"provider": "n8n", "base_url": "https://flows.example/webhook/abc/", "api_key": "n8n-value-4711"},
    )
    assert isinstance(parsed, ExternalConfig)
    assert (parsed.base_url, parsed.auth_header, parsed.timeout_seconds) == (
        "https://flows.example/webhook/abc",
        "Authorization",
        60.0,
    )
    assert parsed.api_key == "n8n-value-4711" and "4711" not in repr(parsed)  # nor in a log, through a repr
    for bad, field in (
        ({"base_url": "https://x.example"}, "config.provider"),
        ({"provider": "flowise", "base_url": "https://x.example"}, "config.provider"),
        ({"provider": "dify"}, "config.base_url"),
        ({"provider": "dify", "base_url": "https://x.example/v1?key=1"}, "config.base_url"),
        ({"provider": "dify", "base_url": "https://user:pw@x.example/v1"}, "config.base_url"),
        ({"provider": "dify", "base_url": "ftp://x.example"}, "config.base_url"),
        ({"provider": "dify", "base_url": "https://x.example", "api_key": "a\nb"}, "config.api_key"),
        ({"provider": "dify", "base_url": "https://x.example", "api_key": 7}, "config.api_key"),
        ({"provider": "dify", "base_url": "https://x.example", "auth_header": "X-Key"}, "config.auth_header"),
        ({"provider": "n8n", "base_url": "https://x.example", "auth_header": "Host"}, "config.auth_header"),
        ({"provider": "n8n", "base_url": "https://x.example", "auth_header": "X Key"}, "config.auth_header"),
        (
            {"provider": "a2a", "base_url": "https://x.example", "timeout_seconds": 0.5},
            "config.timeout_seconds",
        ),
        (
            {"provider": "a2a", "base_url": "https://x.example", "timeout_seconds": 601},
            "config.timeout_seconds",
        ),
        (
            {"provider": "a2a", "base_url": "https://x.example", "integration_type": "a2a"},
            "config.integration_type",
        ),
    ):
        with pytest.raises(ConfigError) as error:
            parse_config(Mode.EXTERNAL, bad)
        assert error.value.field == field, bad


def test_a_re_asked_answer_may_only_repeat_what_was_shown_before_it_goes_on() -> None:
    gate = ResumeGate("Hello wor")
    for piece in ("Hel", "lo wo", "rld", "!"):
        gate.admit(piece)
    gate.finish()
    with pytest.raises(Diverged):
        ResumeGate("Hello wor").admit("Help")
    short = ResumeGate("Hello wor")
    short.admit("Hello")
    with pytest.raises(Diverged):
        short.finish()


def test_only_finished_exchanges_of_the_last_turns_go_to_a_peer_without_memory() -> None:
    messages = [
        Message(id="1", turn_id="t1", role="user", content="one?"),
        Message(id="2", turn_id="t1", role="assistant", content="", tool_calls=[]),
        Message(id="3", turn_id="t1", role="tool", content="tool says"),
        Message(id="4", turn_id="t1", role="assistant", content="one.", final=True),
        Message(id="5", turn_id="t2", role="user", content="unanswered?"),
        Message(id="6", turn_id="t3", role="user", content="three?"),
        Message(id="7", turn_id="t3", role="assistant", content="three.", final=True),
    ]
    assert [(e.role, e.text) for e in exchanges(messages, 1)] == [("user", "three?"), ("assistant", "three.")]
    assert len(exchanges(messages, 8)) == 4 and exchanges(messages, 0) == ()


async def test_the_api_key_is_write_only_and_stored_encrypted(rig: Rig) -> None:
    with bound_identity(CALLER):
        created = await rig.orchestrator("helpdesk", rig.dify())
        assert "api_key" not in created.config.fields
        assert created.config["api_key_hint"] == "app-…fXYZ"
        got = (
            await rig.stub.GetOrchestrator(pb.GetOrchestratorRequest(orchestrator_id=created.id))
        ).orchestrator
        listed = (await rig.stub.ListOrchestrators(pb.ListOrchestratorsRequest())).orchestrators
        for seen in (created, got, *listed):
            assert DIFY_KEY not in str(seen) and DIFY_KEY not in json_format.MessageToJson(seen)
        assert json_format.MessageToDict(got.config) == {
            "provider": "dify",
            "base_url": f"{rig.peers.url}/dify/v1",
            "api_key_hint": "app-…fXYZ",
        }
    # Nowhere in the database in clear: the record has no key, its own row holds a bound ciphertext.
    async with rig.store._db.engine.connect() as conn:  # type: ignore[attr-defined]
        dumped = []
        for table in sessions_sql.metadata.sorted_tables:
            dumped += [str(tuple(row)) for row in (await conn.execute(select(table))).all()]
        [sealed] = (
            (await conn.execute(select(sessions_sql.orchestrator_secrets.c.ciphertext))).scalars().all()
        )
    assert not any(DIFY_KEY in row for row in dumped)
    assert sealed.startswith("v2:")
    assert rig.keys.open(CALLER.tenant_id, created.id, sealed) == DIFY_KEY
    # Bound to its record: the same ciphertext does not open as another orchestrator's.
    with pytest.raises(Exception, match="another record"):
        rig.keys.open(CALLER.tenant_id, "someone-else", sealed)


async def test_an_update_without_the_key_keeps_it_and_a_new_key_replaces_it(rig: Rig) -> None:
    rig.peers.dify.extend([dify_answer(["one"]), dify_answer(["two"])])
    with bound_identity(CALLER):
        orchestrator, session = await rig.session("helpdesk", rig.dify())
        # A client sends back what it read (the hint too): the key stays.
        echoed = json_format.MessageToDict(orchestrator.config) | {"timeout_seconds": 30}
        updated = (
            await rig.stub.UpdateOrchestrator(
                pb.UpdateOrchestratorRequest(
                    orchestrator_id=orchestrator.id, config=config(echoed), display_name="Help desk"
                )
            )
        ).orchestrator
        assert updated.config["api_key_hint"] == "app-…fXYZ" and updated.config["timeout_seconds"] == 30
        await rig.world.ask(session, "first?", "t-key-1")
        fresh = "app-Another0123456789key"
        values = rig.dify(api_key=fresh)
        updated = (
            await rig.stub.UpdateOrchestrator(
                pb.UpdateOrchestratorRequest(orchestrator_id=orchestrator.id, config=config(values))
            )
        ).orchestrator
        assert updated.config["api_key_hint"] == "app-…9key"
        await rig.world.ask(session, "second?", "t-key-2")
        # Dify's key is required: removing it is refused.
        message = await refused(
            rig.stub.UpdateOrchestrator(
                pb.UpdateOrchestratorRequest(
                    orchestrator_id=orchestrator.id, config=config(rig.dify(api_key=""))
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "config.api_key" in message
        # Pointed elsewhere, the orchestrator needs its key again: the stored one stays with its server.
        moved = {k: v for k, v in rig.dify(base_url="https://dify.example/v1").items() if k != "api_key"}
        message = await refused(
            rig.stub.UpdateOrchestrator(
                pb.UpdateOrchestratorRequest(orchestrator_id=orchestrator.id, config=config(moved))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "config.api_key" in message and "base_url" in message
    sent = [r.headers["authorization"] for r in rig.peers.seen("/dify/v1/chat-messages")]
    assert sent == [f"Bearer {DIFY_KEY}", f"Bearer {fresh}"]


async def test_another_tenant_sees_nothing_and_a_session_names_only_its_own(rig: Rig) -> None:
    with bound_identity(CALLER):
        orchestrator = await rig.orchestrator("helpdesk", rig.dify())
    with bound_identity(STRANGER):
        for call in (
            rig.stub.GetOrchestrator(pb.GetOrchestratorRequest(orchestrator_id=orchestrator.id)),
            rig.stub.UpdateOrchestrator(
                pb.UpdateOrchestratorRequest(orchestrator_id=orchestrator.id, config=config(rig.dify()))
            ),
            rig.stub.DeleteOrchestrator(pb.DeleteOrchestratorRequest(orchestrator_id=orchestrator.id)),
            rig.stub.CreateSession(pb.CreateSessionRequest(orchestrator_id=orchestrator.id)),
        ):
            await refused(call, grpc.StatusCode.NOT_FOUND)
        assert not (await rig.stub.ListOrchestrators(pb.ListOrchestratorsRequest())).orchestrators


async def test_a_base_url_inside_the_network_is_refused_when_saved(rig: Rig) -> None:
    with bound_identity(CALLER):
        for url in (
            "http://169.254.169.254/latest",
            "http://10.0.0.5/v1",
            "http://metadata.google.internal/v1",
            "http://inside.example/v1",  # a name that resolves inside
            f"{rig.peers.url.replace(str(rig.peers.port), '8081')}/v1",  # a port outside the policy
        ):
            message = await refused(
                rig.stub.CreateOrchestrator(
                    pb.CreateOrchestratorRequest(
                        name="inside",
                        mode=pb.ORCHESTRATION_MODE_EXTERNAL,
                        config=config(rig.dify(base_url=url)),
                    )
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
            )
            assert message.startswith("config.base_url:"), message
            assert "10.1.2.3" not in message
        assert not (await rig.stub.ListOrchestrators(pb.ListOrchestratorsRequest())).orchestrators


async def test_a_name_that_resolves_inside_when_called_is_refused_then(rig: Rig) -> None:
    with bound_identity(CALLER):
        # Unknown when saved (names are checked at every call), metadata's address when called.
        _, session = await rig.session("rebound", rig.dify(base_url="http://rebound.example/v1"))
        with structlog.testing.capture_logs() as logs:
            events = await rig.world.ask(session, "hello?", "t-rebound")
    [final] = finals(events)
    assert final.kind is TurnEventKind.ERROR and final.error_code == "external_unreachable"
    assert "base_url" in (final.error_message or "") and "169.254" not in (final.error_message or "")
    assert not rig.peers.requests
    assert DIFY_KEY not in str(logs)


async def test_an_application_that_does_not_answer_reads_like_a_refused_address(
    store: SqlSessionStore, peer_server: PeerServer
) -> None:
    closed = closed_port()
    async for rig in make_rig(store, peer_server, OrchestratorKeys(KeyRing.from_strings(MASTER)), closed):
        with bound_identity(CALLER):
            _, session = await rig.session("down", rig.dify(base_url=f"http://127.0.0.1:{closed}/v1"))
            [final] = finals(await rig.world.ask(session, "hello?", "t-down"))
        assert final.kind is TurnEventKind.ERROR and final.error_code == "external_unreachable"
        assert str(closed) not in (final.error_message or "")


# --- Dify ------------------------------------------------------------------------------------------


async def test_a_dify_answer_streams_into_the_turn_and_the_next_turn_continues_its_conversation(
    rig: Rig,
) -> None:
    rig.peers.dify.extend(
        [
            dify_answer(["Annual leave ", "is 25 days."], conversation_id="conv-42"),
            dify_answer(["Yes, ", "also for part-timers."], conversation_id="conv-42", usage=(30, 7)),
        ]
    )
    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify())
        first = await rig.world.ask(session, "How much leave do I get?", "t-dify-1")
        second = await rig.world.ask(session, "Also part-time?", "t-dify-2")
        history = await rig.stub.ListMessages(pb.ListMessagesRequest(session_id=session, oldest_first=True))
    assert [e.kind for e in first[:1]] == [TurnEventKind.STARTED]
    assert [e.text for e in first if e.kind is TurnEventKind.TEXT_DELTA] == ["Annual leave ", "is 25 days."]
    [final] = finals(first)
    assert final.kind is TurnEventKind.COMPLETED and final.text == "Annual leave is 25 days."
    assert (final.prompt_tokens, final.completion_tokens) == (12, 5)
    assert finals(second)[0].text == "Yes, also for part-timers." and finals(second)[0].prompt_tokens == 30
    asked = [r.body for r in rig.peers.seen("/dify/v1/chat-messages")]
    assert asked[0]["conversation_id"] == "" and asked[0]["query"] == "How much leave do I get?"
    assert asked[0]["response_mode"] == "streaming" and asked[0]["user"].startswith("ks-")
    assert CALLER.user_id not in asked[0]["user"]
    # Dify keeps the conversation: the next turn continues it, with the question alone.
    assert asked[1]["conversation_id"] == "conv-42" and asked[1]["query"] == "Also part-time?"
    assert asked[1]["user"] == asked[0]["user"]
    # The session's history holds both exchanges.
    assert [(m.role, m.content[0].text) for m in history.messages] == [
        (pb.MESSAGE_ROLE_USER, "How much leave do I get?"),
        (pb.MESSAGE_ROLE_ASSISTANT, "Annual leave is 25 days."),
        (pb.MESSAGE_ROLE_USER, "Also part-time?"),
        (pb.MESSAGE_ROLE_ASSISTANT, "Yes, also for part-timers."),
    ]


async def test_a_conversation_dify_no_longer_knows_starts_again_with_the_history(rig: Rig) -> None:
    rig.peers.dify.extend(
        [
            dify_answer(["25 days."], conversation_id="conv-old"),
            Reply(
                status=404, body={"code": "not_found", "message": "Conversation Not Exists.", "status": 404}
            ),
            dify_answer(["Yes."], conversation_id="conv-new"),
            dify_answer(["Fine."], conversation_id="conv-new"),
        ]
    )
    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify())
        await rig.world.ask(session, "Leave?", "t-stale-1")
        events = await rig.world.ask(session, "Part-time too?", "t-stale-2")
        await rig.world.ask(session, "Thanks", "t-stale-3")
    assert finals(events)[0].text == "Yes."
    asked = [r.body for r in rig.peers.seen("/dify/v1/chat-messages")]
    assert [a["conversation_id"] for a in asked] == ["", "conv-old", "", "conv-new"]
    assert (
        asked[2]["query"] == "Conversation so far:\nUser: Leave?\nAssistant: 25 days.\n\nUser: Part-time too?"
    )


@pytest.mark.parametrize(
    ("reply", "code", "says"),
    [
        (
            Reply(
                chunks=[
                    sse({"event": "message", "task_id": "t", "conversation_id": "c", "answer": "Part"}),
                    'data: {"event": "error", "status": 400, "code": "provider_quota", '
                    f'"message": "Your quota ran out (key {DIFY_KEY})"}}\n\n',
                ],
                content_type="text/event-stream",
            ),
            "external_failed",
            "reported an error: Your quota ran out (key ***)",
        ),
        (
            Reply(status=401, body={"code": "unauthorized", "message": "Access token is invalid"}),
            "external_auth_failed",
            "refused the orchestrator's API key (HTTP 401); check its api_key",
        ),
        (Reply(status=429, body={"message": "slow down"}), "external_rate_limited", "try again in a moment"),
        (Reply(status=302, body={}), "external_failed", "redirect"),
        (
            Reply(chunks=["data: not json\n\n"], content_type="text/event-stream"),
            "external_bad_response",
            "cannot be read",
        ),
        (
            Reply(chunks=[dify_answer(["cut"]).chunks[1]], content_type="text/event-stream"),
            "external_bad_response",
            "before message_end",
        ),
        (
            Reply(chunks=["event: ping\n\n"], delay=3, content_type="text/event-stream"),
            "external_timeout",
            "took too long",
        ),
    ],
)
async def test_a_failing_dify_ends_the_turn_once_with_a_message_that_says_what_to_do(
    rig: Rig, reply: Reply, code: str, says: str
) -> None:
    rig.peers.dify.append(reply)
    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify(timeout_seconds=1))
        with structlog.testing.capture_logs() as logs:
            events = await rig.world.ask(session, "hello?", "t-fail")
    [final] = finals(events)
    assert final is events[-1] and final.kind is TurnEventKind.ERROR
    assert final.error_code == code and says in (final.error_message or ""), final.error_message
    assert "helpdesk (Dify application)" in (final.error_message or "")
    assert DIFY_KEY not in str(events) and DIFY_KEY not in str(logs)


async def test_cancelling_a_turn_stops_the_dify_answer(rig: Rig) -> None:
    rig.peers.dify.append(
        Reply(
            chunks=dify_answer(["Let me think", " about it"]).chunks,
            hang_after=2,
            content_type="text/event-stream",
        )
    )
    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify())
        turn = asyncio.create_task(rig.world.ask(session, "A long question", "t-cancel"))
        await eventually(lambda: any(e.kind is TurnEventKind.TEXT_DELTA for e in rig.world.events))
        assert rig.world.runner.cancel("t-cancel", CALLER)
        events = await asyncio.wait_for(turn, 5)
    [final] = finals(events)
    assert final.kind is TurnEventKind.CANCELLED and final.text == "Let me think"
    await eventually(rig.peers.closed_early.is_set)
    assert rig.peers.stops == ["task-1"]  # Dify is told to stop generating


async def test_a_turn_delivered_again_after_a_crash_shows_no_text_twice(rig: Rig) -> None:
    pieces = ["Annual ", "leave ", "is 25 days."]
    rig.peers.dify.extend([dify_answer(pieces), dify_answer(pieces)])
    published = rig.world.runner._publish  # type: ignore[attr-defined]

    async def dies_at_the_second_piece(event: ChatTurnEvent) -> None:
        if event.kind is TurnEventKind.TEXT_DELTA and streamed(rig.world.events) == "Annual ":
            raise Crash
        await published(event)

    class Log:
        async def read(self, turn_id: str) -> list[ChatTurnEvent]:
            return [e for e in rig.world.events if e.turn_id == turn_id]

    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify())
        request = ChatRequested(turn_id="t-crash", session_id=session, message="Leave?")
        with pytest.raises(Crash):
            await rig.runner(publish=dies_at_the_second_piece).run(request)
        assert streamed(rig.world.events) == "Annual "
        await rig.runner(event_log=Log()).run(request, redelivered=True)
    events = [e for e in rig.world.events if e.turn_id == "t-crash"]
    assert streamed(events) == "Annual leave is 25 days."
    assert [e.sequence for e in events] == list(range(len(events)))
    [final] = finals(events)
    assert final.kind is TurnEventKind.COMPLETED and final.text == "Annual leave is 25 days."
    assert len(rig.peers.seen("/dify/v1/chat-messages")) == 2  # asked again: no peer resumes an answer


async def test_a_turn_delivered_again_whose_peer_answers_differently_ends_cleanly(rig: Rig) -> None:
    rig.peers.dify.extend([dify_answer(["Annual ", "leave"]), dify_answer(["Holidays: ", "25 days."])])
    published = rig.world.runner._publish  # type: ignore[attr-defined]

    async def dies_at_the_second_piece(event: ChatTurnEvent) -> None:
        if event.kind is TurnEventKind.TEXT_DELTA and streamed(rig.world.events):
            raise Crash
        await published(event)

    class Log:
        async def read(self, turn_id: str) -> list[ChatTurnEvent]:
            return [e for e in rig.world.events if e.turn_id == turn_id]

    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify())
        request = ChatRequested(turn_id="t-diverge", session_id=session, message="Leave?")
        with pytest.raises(Crash):
            await rig.runner(publish=dies_at_the_second_piece).run(request)
        await rig.runner(event_log=Log()).run(request, redelivered=True)
    events = [e for e in rig.world.events if e.turn_id == "t-diverge"]
    assert streamed(events) == "Annual "  # never "Annual Holidays: …"
    [final] = finals(events)
    assert final.kind is TurnEventKind.ERROR and final.error_code == "external_interrupted"


async def test_a_turn_answered_before_its_replica_died_is_not_asked_again(rig: Rig) -> None:
    rig.peers.dify.append(dify_answer(["25 days."]))
    published = rig.world.runner._publish  # type: ignore[attr-defined]

    async def dies_at_the_final_event(event: ChatTurnEvent) -> None:
        if event.is_final:
            raise Crash
        await published(event)

    class Log:
        async def read(self, turn_id: str) -> list[ChatTurnEvent]:
            return [e for e in rig.world.events if e.turn_id == turn_id]

    with bound_identity(CALLER):
        _, session = await rig.session("helpdesk", rig.dify())
        request = ChatRequested(turn_id="t-late", session_id=session, message="Leave?")
        with pytest.raises(Crash):
            await rig.runner(publish=dies_at_the_final_event).run(request)
        await rig.runner(event_log=Log()).run(request, redelivered=True)
    events = [e for e in rig.world.events if e.turn_id == "t-late"]
    assert streamed(events) == "25 days." and finals(events)[0].text == "25 days."
    assert len(rig.peers.seen("/dify/v1/chat-messages")) == 1


# --- n8n -------------------------------------------------------------------------------------------


async def test_an_n8n_workflow_streams_or_answers_at_once(rig: Rig) -> None:
    rig.peers.n8n.extend(
        [
            n8n_stream(["Your ticket ", "is open."]),
            Reply(body={"output": "Closed it."}),
            Reply(body=[{"output": "Reopened."}]),
            Reply(body="Plain words.", content_type="text/plain"),
        ]
    )
    with bound_identity(CALLER):
        _, session = await rig.session(
            "flows", rig.n8n(api_key=N8N_KEY, auth_header="X-N8N-Key", timeout_seconds=5)
        )
        answers = []
        for n, question in enumerate(["Status?", "Close it", "Reopen it", "Say it plainly"]):
            events = await rig.world.ask(session, question, f"t-n8n-{n}")
            answers.append((streamed(events), finals(events)[0].text))
    assert answers == [
        ("Your ticket is open.", "Your ticket is open."),
        ("Closed it.", "Closed it."),
        ("Reopened.", "Reopened."),
        ("Plain words.", "Plain words."),
    ]
    first, second = rig.peers.seen("/n8n/hook")[:2]
    assert first.headers["x-n8n-key"] == N8N_KEY and "authorization" not in first.headers
    assert first.body == {"action": "sendMessage", "sessionId": session, "chatInput": "Status?"}
    assert second.body["sessionId"] == session and second.body["chatInput"] == "Close it"
    assert second.body["history"] == [
        {"role": "user", "content": "Status?"},
        {"role": "assistant", "content": "Your ticket is open."},
    ]


async def test_an_n8n_answer_without_text_or_with_an_error_item_fails_the_turn(rig: Rig) -> None:
    rig.peers.n8n.extend(
        [
            Reply(body={"result": "no output field"}),
            Reply(
                chunks=[
                    '{"type":"begin"}\n',
                    '{"type":"item","content":"Work"}\n',
                    '{"type":"error","content":"node failed"}\n',
                ],
            ),
        ]
    )
    with bound_identity(CALLER):
        _, session = await rig.session("flows", rig.n8n())
        one = finals(await rig.world.ask(session, "a", "t-n8n-bad-1"))
        two = finals(await rig.world.ask(session, "b", "t-n8n-bad-2"))
    assert [(f.kind, f.error_code) for f in one + two] == [
        (TurnEventKind.ERROR, "external_bad_response"),
        (TurnEventKind.ERROR, "external_failed"),
    ]
    assert "node failed" in (two[0].error_message or "")


# --- A2A -------------------------------------------------------------------------------------------


async def test_an_a2a_agent_streams_its_answer_and_keeps_its_context_across_turns(rig: Rig) -> None:
    rig.peers.agent.pieces = ["Leave ", "is ", "25 days."]
    with bound_identity(CALLER):
        _, session = await rig.session("agent", rig.a2a(api_key=A2A_KEY))
        first = await rig.world.ask(session, "How much leave?", "t-a2a-1")
        second = await rig.world.ask(session, "And sick days?", "t-a2a-2")
    assert [e.text for e in first if e.kind is TurnEventKind.TEXT_DELTA] == ["Leave ", "is ", "25 days."]
    assert finals(first)[0].kind is TurnEventKind.COMPLETED and finals(first)[0].text == "Leave is 25 days."
    assert finals(second)[0].kind is TurnEventKind.COMPLETED
    assert rig.peers.agent.questions == ["How much leave?", "And sick days?"]
    # The agent's context goes on: the second message names the context of the first.
    assert len(rig.peers.agent.contexts) == 2 and len(set(rig.peers.agent.contexts)) == 1
    calls = rig.peers.seen("/a2a")
    assert {r.path for r in calls} == {"/a2a/.well-known/agent-card.json", "/a2a/"}
    assert all(r.headers.get("authorization") == f"Bearer {A2A_KEY}" for r in calls)


async def test_an_a2a_task_that_fails_ends_the_turn_with_the_agents_reason(rig: Rig) -> None:
    rig.peers.agent.failure = "the HR system is down"
    with bound_identity(CALLER):
        _, session = await rig.session("agent", rig.a2a())
        [final] = finals(await rig.world.ask(session, "Leave?", "t-a2a-fail"))
    assert final.kind is TurnEventKind.ERROR and final.error_code == "external_failed"
    assert "the HR system is down" in (final.error_message or "")
    assert "authorization" not in rig.peers.seen("/a2a/")[0].headers  # no key, no bearer


# --- without MASTER_KEY, and the key ring's start-up check -------------------------------------------


async def test_without_master_key_a_key_cannot_be_saved_but_the_rest_works(
    store: SqlSessionStore, peer_server: PeerServer
) -> None:
    async for rig in make_rig(store, peer_server, OrchestratorKeys(None)):
        rig.peers.n8n.append(Reply(body={"output": "Done."}))
        with bound_identity(CALLER):
            message = await refused(
                rig.stub.CreateOrchestrator(
                    pb.CreateOrchestratorRequest(
                        name="helpdesk", mode=pb.ORCHESTRATION_MODE_EXTERNAL, config=config(rig.dify())
                    )
                ),
                grpc.StatusCode.FAILED_PRECONDITION,
            )
            assert "config.api_key" in message and "MASTER_KEY" in message
            _, session = await rig.session("flows", rig.n8n())
            [final] = finals(await rig.world.ask(session, "Run it", "t-nokey"))
        assert final.kind is TurnEventKind.COMPLETED and final.text == "Done."


async def test_a_passphrase_master_key_keeps_its_salt_and_a_wrong_key_stops_the_start(
    store: SqlSessionStore,
) -> None:
    ring = KeyRing.from_strings("a passphrase of more than sixteen characters")
    assert ring.needs_salt
    report = await verify_master_key(store, ring, lambda: rotate_keys(store, ring), owner="conversation")
    assert report.rotated == 0 and await store.get_setting("master_key_salt")
    sealed = OrchestratorKeys(ring).seal("acme", "o1", "secret-value")
    again = KeyRing.from_strings("a passphrase of more than sixteen characters")
    await verify_master_key(store, again, lambda: rotate_keys(store, again), owner="conversation")
    assert OrchestratorKeys(again).open("acme", "o1", sealed) == "secret-value"
    wrong = KeyRing.from_strings("another passphrase, also long enough")
    with pytest.raises(MasterKeyError):
        await verify_master_key(store, wrong, lambda: rotate_keys(store, wrong), owner="conversation")
