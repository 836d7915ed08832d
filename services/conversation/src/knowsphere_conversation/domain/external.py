"""External orchestrators: turns answered by another application — a Dify chat app, an n8n workflow or
an A2A agent — and what the conversation keeps for them.

**The key is write-only.** It arrives in the orchestrator's configuration (``api_key``) and never goes
back out: the servicer seals it with the platform's key ring (:mod:`knowsphere_runtime.secrets`, the
same ``MASTER_KEY`` as modelhub's provider keys), bound to its tenant and to the record
``orchestrator/<id>/api_key``, keeps the ciphertext in a row of its own and shows ``api_key_hint``
(masked) in the configuration instead. A turn opens it just before calling the peer
(:class:`OrchestratorKeys`); errors and logs never carry it.

**A turn.** The user's message goes to the peer (``adapters/external.py`` speaks each wire format,
every connection through the egress guard) and its answer is relayed piece by piece as the turn's text
deltas. Peers keep their own conversation: Dify a ``conversation_id``, an A2A agent a context id, both
kept per session (:class:`ExternalStore`) so the next turn continues where the last one stopped; n8n
gets the session id as ``sessionId`` for its memory. Where the peer has no conversation yet but the
session already has one (the first turn after switching to this orchestrator, or an OpenAI-style call
that brings its own messages), the last finished exchanges go with the question (:func:`exchanges`).

**A turn delivered again** (its replica died mid-answer) cannot resume the peer's answer: no peer offers
that. It asks again and lets through only what goes beyond what the client was already shown
(:class:`ResumeGate`): a peer that answers the same way continues seamlessly; one whose new answer
differs from what was shown ends the turn cleanly with ``external_interrupted`` instead of splicing two
answers together. (The peer then saw the question twice; its own history may show it.) An answer
relayed in full is written to the session's checkpoint before the final event, so a turn that dies
after that is not asked again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from knowsphere_contracts.events import TurnEventKind
from knowsphere_conversation.domain.graph import TurnRuntime
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.orchestrators import API_KEY, ExternalConfig
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.secrets import (
    KeyRing,
    RotationReport,
    SecretError,
    SecretFailure,
    SecretScope,
)

log = structlog.get_logger(__name__)

MASTER_KEY_MISSING = (
    "the conversation service has no MASTER_KEY, so it cannot keep an API key encrypted; "
    "set MASTER_KEY (the same as modelhub's) and restart it"
)


def key_record_id(orchestrator_id: str) -> str:
    """The record an orchestrator's key is bound to in its ciphertext."""
    return f"orchestrator/{orchestrator_id}/{API_KEY}"


class KeyUnavailable(Exception):
    """A key cannot be sealed or opened here: MASTER_KEY is not set, or (opening) it is not the one the
    key was sealed with."""


class OrchestratorKeys:
    """Seals and opens external orchestrators' API keys; ``ring`` is None without MASTER_KEY."""

    def __init__(self, ring: KeyRing | None) -> None:
        self._ring = ring

    @property
    def available(self) -> bool:
        return self._ring is not None

    def seal(self, tenant_id: str, orchestrator_id: str, api_key: str) -> str:
        if self._ring is None:
            raise KeyUnavailable(MASTER_KEY_MISSING)
        return self._ring.encrypt(api_key, SecretScope(tenant_id, key_record_id(orchestrator_id)))

    def open(self, tenant_id: str, orchestrator_id: str, ciphertext: str) -> str:
        """The key; :class:`KeyUnavailable` without a ring, :class:`SecretError` when MASTER_KEY is
        not the one it was sealed with or the ciphertext is not this record's."""
        if self._ring is None:
            raise KeyUnavailable(MASTER_KEY_MISSING)
        return self._ring.decrypt(ciphertext, SecretScope(tenant_id, key_record_id(orchestrator_id)))


# --- what is kept -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredSecret:
    tenant_id: str
    orchestrator_id: str
    name: str
    ciphertext: str


SecretChanges = Mapping[str, str | None]
"""Secrets of an orchestrator to write with its record: name → ciphertext, or None to remove it."""


class SecretStore(Protocol):
    """Every stored secret, and a swap that only happens when the row still holds what was read."""

    async def list_orchestrator_secrets(self) -> list[StoredSecret]: ...
    async def replace_orchestrator_secret(self, secret: StoredSecret, new_ciphertext: str) -> bool: ...


async def rotate_keys(store: SecretStore, ring: KeyRing) -> RotationReport:
    """Rewrite every stored key that is not under the current master key (or in an older format),
    bound to its record; what no key of the ring reads is reported, not touched."""
    rotated = 0
    undecryptable: list[tuple[str, str]] = []
    rejected: list[tuple[str, str]] = []
    for stored in await store.list_orchestrator_secrets():
        record_id = f"orchestrator/{stored.orchestrator_id}/{stored.name}"
        try:
            if not ring.needs_rotation(stored.ciphertext):
                continue
            fresh = ring.reencrypt(stored.ciphertext, SecretScope(stored.tenant_id, record_id))
        except SecretError as error:
            if error.failure is SecretFailure.UNKNOWN_KEY:
                undecryptable.append((record_id, error.key_id))
            else:
                rejected.append((record_id, str(error)))
            continue
        if await store.replace_orchestrator_secret(stored, fresh):
            rotated += 1
    return RotationReport(rotated=rotated, undecryptable=undecryptable, rejected=rejected)


class ExternalStore(Protocol):
    """An orchestrator's sealed key, and the peer's conversation per session."""

    async def get_orchestrator_secret(
        self, tenant_id: str, orchestrator_id: str, name: str
    ) -> str | None: ...

    async def get_peer_conversation(
        self, owner: Identity, session_id: str, orchestrator_id: str, peer: str
    ) -> str: ...

    async def put_peer_conversation(
        self, owner: Identity, session_id: str, orchestrator_id: str, peer: str, conversation_id: str
    ) -> None: ...


def peer_of(config: ExternalConfig) -> str:
    """Which peer a kept conversation id belongs to: another provider or URL starts a new one."""
    return f"{config.provider} {config.base_url}"


# --- one call to a peer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExternalTarget:
    """Who answers a turn of an external orchestrator, as its record says when the turn starts."""

    orchestrator_id: str
    name: str
    config: ExternalConfig
    api_key: str

    def __repr__(self) -> str:  # the key never reaches a log through a repr
        return f"ExternalTarget(orchestrator_id={self.orchestrator_id!r}, provider={self.config.provider!r})"


@dataclass(frozen=True)
class Exchange:
    role: str
    """``user`` or ``assistant``."""
    text: str


@dataclass(frozen=True)
class PeerCall:
    """What a turn asks of an external peer."""

    name: str
    """The orchestrator's display name (for the user's error messages)."""
    config: ExternalConfig
    api_key: str
    question: str
    history: tuple[Exchange, ...]
    """The session's last finished exchanges, for a peer that has no conversation of its own yet."""
    session_id: str
    """The session (or, without one, the turn): n8n's ``sessionId``."""
    user: str
    """An opaque, stable tag of the asking user (Dify scopes its conversations by user)."""
    conversation_id: str = ""
    """The peer's conversation kept from the session's previous turn (Dify, A2A), or empty."""

    def __repr__(self) -> str:  # the key never reaches a log through a repr
        return f"PeerCall(provider={self.config.provider!r}, session_id={self.session_id!r})"


@dataclass(frozen=True)
class PeerEvent:
    """A piece of the peer's answer, its conversation id, and the usage it reports."""

    text: str = ""
    conversation_id: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


Receive = Callable[[PeerEvent], Awaitable[None]]


class ExternalPeers(Protocol):
    async def relay(self, call: PeerCall, receive: Receive) -> None:
        """Ask the peer and hand each event of its answer to ``receive`` as it arrives; a failure is a
        :class:`~knowsphere_conversation.domain.graph.TurnError` with an ``external_*`` code and a
        message for the user. Cancelling the caller stops the peer's answer."""
        ...


@dataclass(frozen=True)
class ExternalSupport:
    """What the turn runner needs to run external orchestrators."""

    peers: ExternalPeers
    store: ExternalStore
    keys: OrchestratorKeys


def user_tag(identity: Identity) -> str:
    """The same tag for the same user of a tenant, revealing neither to the peer."""
    digest = hashlib.sha256(f"{identity.tenant_id}\x00{identity.user_id}".encode()).hexdigest()
    return f"ks-{digest[:32]}"


def exchanges(messages: Sequence[Message], keep_turns: int) -> tuple[Exchange, ...]:
    """The questions and final answers of the last ``keep_turns`` turns that have both, oldest first
    (tool steps and unanswered questions left out)."""
    turns: dict[str, list[Exchange]] = {}
    for message in messages:
        spoken = message["role"] == "user" or (message["role"] == "assistant" and message.get("final"))
        if spoken and message["content"]:
            turns.setdefault(message["turn_id"], []).append(Exchange(message["role"], message["content"]))
    finished = [items for items in turns.values() if {e.role for e in items} == {"user", "assistant"}]
    kept = finished[-keep_turns:] if keep_turns > 0 else []
    return tuple(e for items in kept for e in items)


def with_transcript(question: str, history: Sequence[Exchange]) -> str:
    """The question with the conversation so far in front of it, for a peer that only takes one text."""
    if not history:
        return question
    lines = [f"{'User' if e.role == 'user' else 'Assistant'}: {e.text}" for e in history]
    return "Conversation so far:\n" + "\n".join(lines) + f"\n\nUser: {question}"


class Diverged(Exception):
    """A turn asked again answers differently from what its client was already shown."""


class ResumeGate:
    """Checks a re-asked answer against ``shown``, the text a turn delivered again had already
    published: the answer must repeat it before it may go on (what repeats is not shown twice: the
    turn's replay drops it). Raises :class:`Diverged` as soon as it differs, or when it ends short."""

    def __init__(self, shown: str) -> None:
        self._shown = shown
        self._said = 0

    def admit(self, piece: str) -> None:
        if self._said < len(self._shown):
            expected = self._shown[self._said : self._said + len(piece)]
            if piece[: len(expected)] != expected:
                raise Diverged
        self._said += len(piece)

    def finish(self) -> None:
        if self._said < len(self._shown):
            raise Diverged


async def open_target(
    support: ExternalSupport, tenant_id: str, orchestrator_id: str, name: str, config: ExternalConfig
) -> ExternalTarget:
    """The application an external orchestrator calls, with its key opened (only now, per turn);
    :class:`KeyUnavailable` when the stored key cannot be opened here."""
    sealed = await support.store.get_orchestrator_secret(tenant_id, orchestrator_id, API_KEY)
    if sealed is None:
        return ExternalTarget(orchestrator_id, name, config, "")
    try:
        key = support.keys.open(tenant_id, orchestrator_id, sealed)
    except (KeyUnavailable, SecretError) as error:
        reason = error.failure.value if isinstance(error, SecretError) else "no master key"
        log.warning(
            "external orchestrator's key cannot be opened", orchestrator_id=orchestrator_id, reason=reason
        )
        raise KeyUnavailable(reason) from None
    return ExternalTarget(orchestrator_id, name, config, key)


@dataclass(frozen=True)
class PeerTurn:
    """One turn as the relay sees it."""

    session_id: str
    """Empty for a turn without a session."""
    turn_id: str
    question: str
    history: tuple[Exchange, ...]
    shown: str
    """The text a turn delivered again had already published."""


async def relay(
    support: ExternalSupport, target: ExternalTarget, identity: Identity, turn: PeerTurn, runtime: TurnRuntime
) -> str:
    """Asks the peer and relays its answer as the turn's text deltas (``runtime.emit``), its usage into
    ``runtime.usage``; keeps the peer's conversation id for the session. Returns the whole answer;
    :class:`Diverged` when a turn delivered again is answered differently from what it had shown."""
    peer = peer_of(target.config)
    kept = (
        await support.store.get_peer_conversation(identity, turn.session_id, target.orchestrator_id, peer)
        if turn.session_id
        else ""
    )
    call = PeerCall(
        name=target.name,
        config=target.config,
        api_key=target.api_key,
        question=turn.question,
        history=turn.history,
        session_id=turn.session_id or turn.turn_id,
        user=user_tag(identity),
        conversation_id=kept,
    )
    gate = ResumeGate(turn.shown)
    found = kept
    said: list[str] = []

    async def receive(event: PeerEvent) -> None:
        nonlocal found
        if event.text:
            gate.admit(event.text)
            said.append(event.text)
            runtime.text.append(event.text)
            await runtime.emit(TurnEventKind.TEXT_DELTA, text=event.text)
        found = event.conversation_id or found
        for key, count in (
            ("prompt_tokens", event.prompt_tokens),
            ("completion_tokens", event.completion_tokens),
        ):
            if count:
                runtime.usage[key] = runtime.usage.get(key, 0) + count

    await support.peers.relay(call, receive)
    gate.finish()
    if turn.session_id and found != kept:
        await support.store.put_peer_conversation(
            identity, turn.session_id, target.orchestrator_id, peer, found
        )
    return "".join(said)


__all__ = [
    "MASTER_KEY_MISSING",
    "Diverged",
    "Exchange",
    "ExternalPeers",
    "ExternalStore",
    "ExternalSupport",
    "ExternalTarget",
    "KeyUnavailable",
    "OrchestratorKeys",
    "PeerCall",
    "PeerEvent",
    "PeerTurn",
    "Receive",
    "ResumeGate",
    "SecretChanges",
    "SecretStore",
    "StoredSecret",
    "exchanges",
    "key_record_id",
    "open_target",
    "peer_of",
    "relay",
    "rotate_keys",
    "user_tag",
    "with_transcript",
]
