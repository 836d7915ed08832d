"""NATS authentication and permissions over the real stack: its nats-server admits only the nkeys of
``knowsphere_runtime.nats_permissions``, each to the subjects its service needs and no others.

nats-py reports a refused publish or subscription only to the connection's error callback (the server
answers ``-ERR 'Permissions Violation …'`` and the message is dropped), so each check records those
and also shows what a user would notice: the message never arrives.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from knowsphere_contracts.events import (
    CHAT_EVENTS_STREAM,
    ChatRequested,
    ChatTurnEvent,
    DocumentsProgress,
    ModelChange,
    ModelChanged,
    ProgressUpdate,
)
from knowsphere_contracts.vocabulary import DocumentStatus
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.identity_token import token_headers
from knowsphere_runtime.nats_permissions import new_user_seed
from knowsphere_runtime.streams import MSG_ID_HEADER, read_subject
from knowsphere_stack import Stack

pytestmark = pytest.mark.e2e

QUIET_SECONDS = 1.0
"""How long a subscription that must hear nothing is listened to."""
TURN_SECONDS = 60.0


class Connection:
    """A connection as one identity, with the errors the server sent it."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.client: Client | None = None

    async def on_error(self, error: Exception) -> None:
        self.errors.append(str(error))

    @property
    def violations(self) -> list[str]:
        return [e for e in self.errors if "permissions violation" in e.lower()]

    @property
    def nc(self) -> Client:
        assert self.client is not None
        return self.client


@asynccontextmanager
async def connected(stack: Stack, identity: str) -> AsyncIterator[Connection]:
    connection = Connection()
    connection.client = await nats.connect(
        stack.nats_url,
        error_cb=connection.on_error,
        allow_reconnect=False,
        **stack.nats_auth(identity).connect_options(),
    )
    try:
        yield connection
    finally:
        await connection.nc.close()


class Heard:
    """Messages of one subscription."""

    def __init__(self) -> None:
        self.messages: list[Msg] = []
        self.arrived = asyncio.Event()

    async def on_message(self, message: Msg) -> None:
        self.messages.append(message)
        self.arrived.set()

    async def first(self, timeout: float = 10.0) -> Msg:
        await asyncio.wait_for(self.arrived.wait(), timeout)
        return self.messages[0]


def _tenant() -> str:
    return f"perm-{uuid.uuid4().hex[:8]}"


def _progress() -> bytes:
    update = ProgressUpdate(document_id=f"d-{uuid.uuid4().hex[:8]}", stage=DocumentStatus.PARSING, percent=10)
    event = DocumentsProgress(knowledge_base_id=f"kb-{uuid.uuid4().hex[:8]}", updates=[update])
    return event.model_dump_json().encode()


def _refused(error: BaseException) -> bool:
    return "authorization violation" in str(error).lower()


def test_a_connection_without_a_known_key_is_refused(stack: Stack, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(new_user_seed())

    async def attempt(**credentials: str) -> BaseException | None:
        try:
            client = await nats.connect(
                stack.nats_url, allow_reconnect=False, connect_timeout=5, **credentials
            )
        except Exception as error:
            return error
        await client.close()
        return None

    anonymous = asyncio.run(attempt())
    unknown_key = asyncio.run(attempt(nkeys_seed=str(stranger)))
    assert anonymous is not None and _refused(anonymous), anonymous
    assert unknown_key is not None and _refused(unknown_key), unknown_key


def test_the_gateway_key_may_not_publish_progress_nor_take_chat_requests(stack: Stack) -> None:
    subject = DocumentsProgress.subject_for(_tenant())

    async def scenario() -> tuple[list[str], list[Msg], list[Msg]]:
        async with connected(stack, "local-client") as observer, connected(stack, "gateway") as gateway:
            heard = Heard()
            await observer.nc.subscribe(subject, cb=heard.on_message)
            await observer.nc.flush()
            await gateway.nc.publish(subject, _progress())
            requests = Heard()
            await gateway.nc.subscribe(ChatRequested.subject, cb=requests.on_message)
            await gateway.nc.flush()
            await asyncio.sleep(QUIET_SECONDS)
            return gateway.violations, heard.messages, requests.messages

    violations, progress_heard, _ = asyncio.run(scenario())
    assert progress_heard == [], "a progress event published with the gateway's key reached a subscriber"
    assert any(f'publish to "{subject}"' in v for v in violations), violations
    assert any(f'subscription to "{ChatRequested.subject}"' in v for v in violations), violations


def test_the_conversation_key_may_not_read_ingestion_progress(stack: Stack) -> None:
    subject = DocumentsProgress.subject_for(_tenant())

    async def scenario() -> tuple[list[str], list[Msg], list[Msg]]:
        async with (
            connected(stack, "local-client") as publisher,
            connected(stack, "conversation") as conversation,
        ):
            control, eavesdropped = Heard(), Heard()
            await publisher.nc.subscribe(subject, cb=control.on_message)
            await conversation.nc.subscribe(DocumentsProgress.subject + ".>", cb=eavesdropped.on_message)
            await conversation.nc.flush()
            await publisher.nc.flush()
            await publisher.nc.publish(subject, _progress())
            await control.first()
            await asyncio.sleep(QUIET_SECONDS)
            return conversation.violations, control.messages, eavesdropped.messages

    violations, control, eavesdropped = asyncio.run(scenario())
    assert len(control) == 1  # the event was published: only conversation could not hear it
    assert eavesdropped == []
    assert any(f'subscription to "{DocumentsProgress.subject}.>"' in v for v in violations), violations


def test_service_keys_carry_their_own_events(stack: Stack) -> None:
    """The worker's progress reaches the ingestion API, modelhub's model changes reach retrieval."""
    tenant = _tenant()
    change = ModelChanged(model_id=f"m-{uuid.uuid4().hex[:8]}", change=ModelChange.UPDATED)

    async def scenario() -> tuple[Msg, Msg, list[str]]:
        async with (
            connected(stack, "ingestion-worker") as worker,
            connected(stack, "ingestion") as ingestion,
            connected(stack, "modelhub") as modelhub,
            connected(stack, "retrieval") as retrieval,
        ):
            progress, changes = Heard(), Heard()
            # The subjects the services themselves subscribe to (any tenant).
            await ingestion.nc.subscribe(DocumentsProgress.subject + ".*", cb=progress.on_message)
            await retrieval.nc.subscribe(ModelChanged.subject, cb=changes.on_message)
            await ingestion.nc.flush()
            await retrieval.nc.flush()
            await worker.nc.publish(DocumentsProgress.subject_for(tenant), _progress())
            await modelhub.nc.publish(ModelChanged.subject, change.model_dump_json().encode())
            got_progress, got_change = await progress.first(), await changes.first()
            violations = [v for c in (worker, ingestion, modelhub, retrieval) for v in c.violations]
            return got_progress, got_change, violations

    got_progress, got_change, violations = asyncio.run(scenario())
    assert got_progress.subject == DocumentsProgress.subject_for(tenant)
    assert ModelChanged.model_validate_json(got_change.data).model_id == change.model_id
    assert violations == []


def test_the_gateway_key_queues_a_turn_and_reads_its_stored_events_back(stack: Stack) -> None:
    """The gateway's JetStream rights: publish into the chat work queue, and read a turn's events back
    from their stream as it does for a client that reconnects."""
    asker = Identity(_tenant(), "alice")
    turn = f"turn-{uuid.uuid4().hex}"
    subject = ChatTurnEvent.subject_for(asker.tenant_id, turn)

    async def scenario() -> tuple[list[ChatTurnEvent], list[str]]:
        async with connected(stack, "gateway") as gateway:
            js = gateway.nc.jetstream()
            request = ChatRequested(turn_id=turn, message="hello")
            await js.publish(
                ChatRequested.subject,
                request.model_dump_json().encode(),
                headers={**token_headers(asker), MSG_ID_HEADER: turn},
            )
            deadline = asyncio.get_running_loop().time() + TURN_SECONDS
            events: list[ChatTurnEvent] = []
            while not any(e.is_final for e in events):
                assert asyncio.get_running_loop().time() < deadline, f"no final event of {turn} stored"
                await asyncio.sleep(0.5)
                stored = await read_subject(js, CHAT_EVENTS_STREAM, subject)
                events = [ChatTurnEvent.model_validate_json(data) for data, _ in stored]
            return events, gateway.violations

    events, violations = asyncio.run(scenario())
    assert [e.sequence for e in events] == list(range(len(events)))
    assert violations == []


def test_a_service_key_may_not_read_the_replies_jetstream_sends_another(stack: Stack) -> None:
    """Each identity's reply inboxes are its own: the conversation key cannot listen to every inbox,
    nor to the gateway's, where JetStream acknowledges the gateway's publishes."""
    gateway_inboxes = stack.nats_auth("gateway").inbox_prefix()
    assert gateway_inboxes is not None and gateway_inboxes.startswith("_INBOX.U")

    async def scenario() -> tuple[list[str], list[Msg], list[str]]:
        async with connected(stack, "gateway") as gateway, connected(stack, "conversation") as conversation:
            eavesdropped = Heard()
            await conversation.nc.subscribe("_INBOX.>", cb=eavesdropped.on_message)
            await conversation.nc.subscribe(f"{gateway_inboxes}.>", cb=eavesdropped.on_message)
            await conversation.nc.flush()
            # The gateway's own JetStream publish is acknowledged on its inbox, as before.
            turn = f"turn-{uuid.uuid4().hex}"
            request = ChatRequested(turn_id=turn, message="hello")
            asker = Identity(_tenant(), "alice")
            ack = await gateway.nc.jetstream().publish(
                ChatRequested.subject,
                request.model_dump_json().encode(),
                headers={**token_headers(asker), MSG_ID_HEADER: turn},
            )
            assert ack.seq > 0
            await asyncio.sleep(QUIET_SECONDS)
            return conversation.violations, eavesdropped.messages, gateway.violations

    violations, eavesdropped, gateway_violations = asyncio.run(scenario())
    assert eavesdropped == []
    # nats-py lowercases the server's error text.
    assert any('subscription to "_inbox.>"' in v for v in violations), violations
    assert any(f'subscription to "{gateway_inboxes.lower()}.>"' in v for v in violations), violations
    assert gateway_violations == []


def test_no_service_of_the_stack_was_refused_anything(stack: Stack) -> None:
    """Every service logs a permissions violation loudly (knowsphere_runtime.bus): none may have."""
    logs = sorted(stack.config.log_dir.glob("*.log"))
    assert any(path.name == "gateway.log" for path in logs)
    refused = {
        path.name: [
            line for line in path.read_text(errors="replace").splitlines() if "Permissions Violation" in line
        ]
        for path in logs
        if path.name != "nats.log"  # the server logs the refusals this module provoked on purpose
    }
    assert {name: lines for name, lines in refused.items() if lines} == {}
