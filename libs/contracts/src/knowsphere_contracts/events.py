"""Events on the NATS bus: one pydantic model per event, each with its subject constant.

Subjects follow ``ks.<domain>.<event>.v1``. Events that belong to one tenant append the tenant as a
token, and those addressed to one turn its id after it (``ks.chat.events.v1.<tenant>.<turn_id>``,
``ks.ingestion.documents.progress.v1.<tenant>``), so a consumer subscribes to one tenant's events, one
turn's, or all of them with ``>``; NATS permissions can be written per tenant. Ids become tokens
through :func:`subject_token`, an injective escape. The tenant in the subject is always the tenant of
the message's signed identity (its headers): a subscriber refuses a message where they differ.

The AsyncAPI document in ``docs/asyncapi.yaml`` is generated (``make asyncapi``) from the routers
on which the services declare what they publish and subscribe to; a test fails when it drifts.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, ClassVar, Final, Literal
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from knowsphere_contracts.vocabulary import DocumentStatus

MAX_MESSAGE_CHARS = 32_000
MAX_KNOWLEDGE_BASES_PER_TURN = 20
MAX_SESSION_ID_CHARS = 64
MAX_IMAGES_PER_MESSAGE = 4
MAX_IMAGE_REF_CHARS = 700_000
"""An image travels by URL or as a data URL; a data URL this long is about 500 KiB of image (NATS
carries messages of up to 1 MiB). Larger images go by URL."""
MAX_IMAGE_REF_TOTAL_CHARS = 700_000
"""All of one message's images together: with the question and its history the request still fits in
one NATS message."""
MAX_HISTORY_MESSAGES = 64
"""Earlier messages a request may bring along (:attr:`ChatRequested.history`)."""
MAX_HISTORY_CHARS = 200_000
"""Their characters together: the request must fit in one NATS message (1 MiB)."""
CITATION_MARKER = re.compile(r"\[\[(c\d{1,4})\]\]")
"""A citation as an answer writes it, right after the fact: ``[[cN]]``; group 1 is the handle."""


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


_TOKEN_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:@")


def subject_token(value: str) -> str:
    """``value`` as one token of a NATS subject: every character outside ``[A-Za-z0-9_:@-]`` (``.``,
    ``*``, ``>``, ``%``, white space, non-ASCII) becomes ``%XX`` per UTF-8 byte, so distinct values
    never share a token (``acme.eu`` → ``acme%2Eeu``, never ``acme_eu``)."""
    if not value:
        raise ValueError("an empty id cannot be a subject token")
    return "".join(
        char if char in _TOKEN_SAFE else "".join(f"%{byte:02X}" for byte in char.encode()) for char in value
    )


def token_value(token: str) -> str:
    """The value :func:`subject_token` made ``token`` from."""
    return unquote(token, errors="strict")


def tenant_of_subject(subject: str, base: str) -> str | None:
    """The tenant named by ``subject``, one of ``base``'s per-tenant subjects (``<base>.<tenant>…``);
    None when it is not one."""
    prefix = base + "."
    if not subject.startswith(prefix):
        return None
    token = subject[len(prefix) :].split(".", 1)[0]
    return token_value(token) if token else None


class Event(BaseModel):
    """Fields every event has. Identity travels in headers, not in the body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: ClassVar[str]
    event_id: str = Field(default_factory=_new_id, description="unique per event, for deduplication")
    occurred_at: datetime = Field(default_factory=_now)


# --- chat -----------------------------------------------------------------------------------


class TurnCancelRequested(Event):
    """Someone asked to stop a turn. Every conversation replica hears it; the one running the turn,
    for the same asker (headers), stops it and ends it with a ``cancelled`` event."""

    subject: ClassVar[str] = "ks.conversation.turn.cancel.v1"
    turn_id: str = Field(min_length=1, max_length=64)


CHAT_REQUESTS_STREAM = "KS_CHAT_REQUESTS"
"""JetStream work queue of :class:`ChatRequested`: a turn stays in it until a conversation replica has
answered it (acknowledged), so a replica that dies mid-turn leaves it to be redelivered."""
CHAT_EVENTS_STREAM = "KS_CHAT_EVENTS"
"""JetStream stream keeping every :class:`ChatTurnEvent` for a while, so a client that reconnects
resumes from the last sequence it saw."""


class HistoryMessage(BaseModel):
    """A message of a conversation held by the client rather than by a session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["user", "assistant"]
    content: str = Field(max_length=MAX_MESSAGE_CHARS)


def check_images_total(images: list[str]) -> list[str]:
    """``images`` unless their URLs together exceed :data:`MAX_IMAGE_REF_TOTAL_CHARS` (a field validator)."""
    total = sum(len(image) for image in images)
    if total > MAX_IMAGE_REF_TOTAL_CHARS:
        raise ValueError(
            f"{total} characters of image URLs; at most {MAX_IMAGE_REF_TOTAL_CHARS} in all "
            "(about 500 KiB of image data) — send smaller images, or larger ones by http(s) URL"
        )
    return images


class ChatRequested(Event):
    """A user asked a question; one conversation replica takes the turn from the work queue.

    Without a session, ``agent_id`` names the agent that answers (empty: the default agent), or
    ``orchestrator_id`` the orchestrator that runs the turn (an application's), and ``history`` the
    conversation so far, oldest first, which the turn reads as a session's earlier turns (the same
    number of most recent turns is used). With a session, the session holds them.
    """

    subject: ClassVar[str] = "ks.chat.request.v1"
    turn_id: str = Field(min_length=1, max_length=64)
    session_id: str | None = Field(default=None, max_length=MAX_SESSION_ID_CHARS)
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    knowledge_base_ids: list[str] = Field(default_factory=list, max_length=MAX_KNOWLEDGE_BASES_PER_TURN)
    web_search: bool = Field(default=False, description="web tools are on this turn")
    knowledge_graph: bool = Field(default=False, description="the knowledge-graph tool is on this turn")
    language: str = Field(
        default="", max_length=35, description="answer language (BCP-47); empty: the question's"
    )
    images: list[Annotated[str, Field(min_length=1, max_length=MAX_IMAGE_REF_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_IMAGES_PER_MESSAGE,
        description="the message's images: http(s) or data:image/…;base64 URLs (links in the text count too)",
    )
    agent_id: str = Field(
        default="", max_length=128, description="the agent answering a turn without a session; empty: default"
    )
    orchestrator_id: str = Field(
        default="", max_length=128, description="the orchestrator running a turn without a session"
    )
    history: list[HistoryMessage] = Field(
        default_factory=list,
        max_length=MAX_HISTORY_MESSAGES,
        description="earlier messages of a conversation without a session, oldest first",
    )

    @model_validator(mode="after")
    def _session_or_client_history(self) -> ChatRequested:
        if self.session_id and (self.history or self.agent_id or self.orchestrator_id):
            given = "history" if self.history else "agent_id" if self.agent_id else "orchestrator_id"
            raise ValueError(f"{given}: only for a turn without a session (a session has its own)")
        if self.agent_id and self.orchestrator_id:
            raise ValueError("orchestrator_id: give an agent_id or an orchestrator_id, not both")
        total = sum(len(m.content) for m in self.history)
        if total > MAX_HISTORY_CHARS:
            raise ValueError(f"history: {total} characters; at most {MAX_HISTORY_CHARS} in all")
        return self

    _images_total = field_validator("images")(check_images_total)


class TurnEventKind(StrEnum):
    STARTED = "started"
    INTENT = "intent"
    HANDOFF = "handoff"
    TOOL_STARTED = "tool_started"
    TOOL_FINISHED = "tool_finished"
    SOURCES = "sources"
    COMPACTED = "compacted"
    TEXT_DELTA = "text_delta"
    CITATIONS = "citations"
    ERROR = "error"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


FINAL_KINDS = frozenset({TurnEventKind.COMPLETED, TurnEventKind.ERROR, TurnEventKind.CANCELLED})
"""A turn ends with exactly one event of one of these kinds."""


class AnswerKind(StrEnum):
    """How the text of a completed turn came about."""

    GENERATED = "generated"
    """Written by the chat model."""
    EXTRACTED = "extracted"
    """Sentences copied from the passages found (no chat model configured), each with its citation."""
    FIXED = "fixed"
    """A fixed reply (a greeting without a chat model, nothing to search)."""


class Citation(BaseModel):
    """One source of a turn, numbered for ``[[cN]]`` citations (``handle`` = ``cN``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    handle: str = Field(description="cN as written in the answer, e.g. c1")
    chunk_id: str = ""
    document_id: str = ""
    file_name: str = ""
    knowledge_base_id: str = ""
    page: int = Field(default=0, ge=0, description="1-based page; 0 when the format has none")
    heading_path: list[str] = Field(default_factory=list)
    snippet: str = ""
    url: str = Field(default="", description="for web sources")
    title: str = ""


class ChatTurnEvent(Event):
    """One event of a turn in progress, published on ``ks.chat.events.v1.<tenant>.<turn_id>``.

    ``sequence`` starts at 0 and increases by one per event of the turn, so a reader can detect
    loss. A turn always ends with exactly one ``completed``, ``error`` or ``cancelled`` event. Which
    fields are set depends on ``kind``: ``intent`` (intent, route, rewritten_query), ``tool_started`` /
    ``tool_finished`` (tool_call_id, tool_name; finished adds tool_ok, duration_ms, attempts, error
    message), ``handoff`` (an orchestrator hands the turn to an agent: from_agent_id, to_agent_id,
    reason), ``sources`` (citations: this turn's numbered sources), ``compacted`` (earlier turns were
    summarised into the session's handoff document before this turn), ``text_delta`` (text),
    ``completed`` (text: the whole answer, citations: the sources it cites, answer_kind,
    removed_citations, prompt_tokens, completion_tokens), ``cancelled`` (text: what was said before the
    cancel), ``error`` (error_code, error_message).
    """

    subject: ClassVar[str] = "ks.chat.events.v1"
    turn_id: str
    sequence: int = Field(ge=0)
    kind: TurnEventKind
    text: str | None = None
    citations: list[Citation] = Field(default_factory=list)
    intent: str | None = None
    route: str | None = None
    rewritten_query: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    from_agent_id: str | None = Field(default=None, description="handoff: the agent handing over")
    to_agent_id: str | None = Field(default=None, description="handoff: the agent taking over")
    reason: str | None = Field(default=None, description="handoff: why this agent")
    tool_ok: bool | None = None
    duration_ms: int | None = Field(default=None, ge=0)
    attempts: int | None = Field(default=None, ge=0)
    answer_kind: AnswerKind | None = None
    removed_citations: int = Field(default=0, ge=0, description="[[cN]] naming no source, left out")
    error_code: str | None = Field(
        default=None, description="stable machine code, e.g. retrieval_unavailable"
    )
    error_message: str | None = Field(default=None, description="a message for the user")
    prompt_tokens: int | None = Field(
        default=None, ge=0, description="completed: prompt tokens of the turn's main-model requests"
    )
    completion_tokens: int | None = Field(
        default=None, ge=0, description="completed: tokens the turn's main-model requests generated"
    )

    @classmethod
    def subject_for(cls, tenant_id: str, turn_id: str) -> str:
        """The subject of the events of ``tenant_id``'s turn ``turn_id``."""
        return f"{cls.subject}.{subject_token(tenant_id)}.{subject_token(turn_id)}"

    @property
    def is_final(self) -> bool:
        return self.kind in FINAL_KINDS


class CitedDocument(BaseModel):
    """A document the answer of a turn cited at least once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document_id: str = Field(min_length=1, max_length=128)
    knowledge_base_id: str = Field(min_length=1, max_length=128)
    file_name: str = Field(default="", max_length=1024)


TURN_COMPLETED_STREAM = "KS_CONVERSATION_TURNS"
"""JetStream stream that keeps :class:`TurnCompleted` events (every consumer declares it the same way:
subjects ``[TurnCompleted.subject]``, limits retention); memory reads it with a durable consumer."""


class TurnCompleted(Event):
    """A turn finished (answered, cancelled or failed) — published exactly once per turn, at least
    once on the wire: consumers apply it idempotently by ``turn_id``.

    The asker travels in the signed ``ks-identity`` header like every event; memory
    records the cited documents for that user (document affinity) from it.
    """

    subject: ClassVar[str] = "ks.conversation.turn.completed.v1"
    turn_id: str = Field(min_length=1, max_length=64)
    session_id: str | None = Field(default=None, max_length=MAX_SESSION_ID_CHARS)
    outcome: Literal["completed", "cancelled", "failed"] = "completed"
    cited_documents: list[CitedDocument] = Field(default_factory=list, max_length=1000)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)


# --- ingestion ------------------------------------------------------------------------------


class ProgressUpdate(BaseModel):
    """Where one document's ingestion stands."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document_id: str
    stage: DocumentStatus = Field(description="the document's status: the stage being worked on")
    percent: float = Field(ge=0, le=100)
    done: int = Field(default=0, ge=0, description="items of this stage finished")
    total: int = Field(default=0, ge=0, description="items of this stage in all")
    eta_seconds: float | None = Field(default=None, ge=0)


class DocumentsProgress(Event):
    """Progress of documents of one knowledge base, published on
    ``ks.ingestion.documents.progress.v1.<tenant>``.

    A stage moving the documents of an upload batch on together announces them in one event, so a
    batch of 64 small files costs the bus a few messages per stage, not one per file.
    """

    subject: ClassVar[str] = "ks.ingestion.documents.progress.v1"
    knowledge_base_id: str
    updates: list[ProgressUpdate] = Field(min_length=1)

    @classmethod
    def subject_for(cls, tenant_id: str) -> str:
        return f"{cls.subject}.{subject_token(tenant_id)}"

    @property
    def document_ids(self) -> list[str]:
        return [u.document_id for u in self.updates]


class FinishedDocument(BaseModel):
    """A document that reached a final status: ready, or failed with the stage and reason."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document_id: str
    status: Literal[DocumentStatus.READY, DocumentStatus.FAILED]
    failed_stage: DocumentStatus | None = Field(
        default=None, description="the status the document had when its stage failed"
    )
    reason: str | None = None
    chunk_count: int = Field(default=0, ge=0)


class DocumentsFinished(Event):
    """Documents of one knowledge base that reached a final status, published on
    ``ks.ingestion.documents.finished.v1.<tenant>`` (those finishing together in one event)."""

    subject: ClassVar[str] = "ks.ingestion.documents.finished.v1"
    knowledge_base_id: str
    documents: list[FinishedDocument] = Field(min_length=1)

    @classmethod
    def subject_for(cls, tenant_id: str) -> str:
        return f"{cls.subject}.{subject_token(tenant_id)}"

    @property
    def document_ids(self) -> list[str]:
        return [d.document_id for d in self.documents]


DOCUMENTS_DELETED_STREAM = "KS_INGESTION_DELETIONS"
"""JetStream stream keeping :class:`DocumentsDeleted`, so a consumer that was down catches up."""
MAX_DELETED_PER_EVENT = 1000


class DocumentsDeleted(Event):
    """Documents of one knowledge base deleted for good (their chunks, vectors and files are gone),
    published on ``ks.ingestion.documents.deleted.v1`` with the deleting caller's identity in the
    headers; memory drops them from every user's frequently consulted documents of the tenant."""

    subject: ClassVar[str] = "ks.ingestion.documents.deleted.v1"
    knowledge_base_id: str = Field(min_length=1, max_length=128)
    document_ids: list[str] = Field(min_length=1, max_length=MAX_DELETED_PER_EVENT)


# --- models -------------------------------------------------------------------------------------


class ModelChange(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    DEFAULT_CHANGED = "default_changed"


class ModelChanged(Event):
    """A tenant's model record or default model changed; caches of model facts drop what they hold.

    Published on ``ks.modelhub.model.changed.v1`` by modelhub; the tenant travels in the headers.
    """

    subject: ClassVar[str] = "ks.modelhub.model.changed.v1"
    model_id: str = Field(description="the model concerned; empty for a default that was cleared")
    change: ModelChange
    model_types: list[str] = Field(
        default_factory=list,
        description="the model's types (created, updated, deleted), or the types whose default changed",
    )
