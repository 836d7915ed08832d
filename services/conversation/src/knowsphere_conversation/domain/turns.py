"""One chat turn, from request to its final event.

The turn runs the conversation graph (:mod:`~knowsphere_conversation.domain.graph`) on the session's
checkpoint thread and streams its events. A turn delivered again (its replica died) resumes from its
last checkpoint and shows the client nothing twice
(:class:`~knowsphere_conversation.domain.replay.Replay`); a turn already answered is not answered again.
One session runs one turn at a time, across replicas (:class:`SessionLeases`): a turn of a busy session
waits in the queue.

Every turn ends with exactly one final event, whatever fails on the way: a request without the caller's
identity gives :data:`IDENTITY_REQUIRED` (every peer call acts as that caller), a model failure
modelhub's friendly code and message, a peer that cannot serve its own code, an external orchestrator's
application one of the ``EXTERNAL_*`` codes, any other failure the generic :data:`TURN_FAILED`. A turn
that completes also announces the documents its answer cited
(:class:`~knowsphere_contracts.events.TurnCompleted`), once.

An external orchestrator's turn does not run the graph: its application's answer is relayed
(:mod:`~knowsphere_conversation.domain.external`) and written to the session's checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from google.protobuf import json_format
from opentelemetry import trace

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere.conversation.v1.conversation_enums import Intent
from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.events import (
    AnswerKind,
    ChatRequested,
    ChatTurnEvent,
    Citation,
    CitedDocument,
    HistoryMessage,
    TurnCompleted,
    TurnEventKind,
)
from knowsphere_conversation.domain import prompts
from knowsphere_conversation.domain.citations import cited_handles, renumber_citations
from knowsphere_conversation.domain.external import (
    Diverged,
    ExternalSupport,
    ExternalTarget,
    KeyUnavailable,
    PeerTurn,
    exchanges,
    open_target,
    relay,
)
from knowsphere_conversation.domain.graph import (
    AgentConfig,
    Memory,
    Models,
    Search,
    Tools,
    TurnError,
    TurnLimits,
    TurnRuntime,
    Worker,
    agent_config,
    citation,
    decide_intent,
    state_source,
)
from knowsphere_conversation.domain.images import parse_image, split_images
from knowsphere_conversation.domain.intents import rule_intent
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.orchestrators import (
    MODE_UNAVAILABLE,
    RUNNABLE_MODES,
    CollaborationConfig,
    ConditionalConfig,
    DeepAgentConfig,
    ExternalConfig,
    KnowledgeBaseConfig,
    Mode,
    SingleConfig,
    SupervisorConfig,
    WorkflowConfig,
    choose_route,
    parse_config,
)
from knowsphere_conversation.domain.replay import Replay
from knowsphere_conversation.domain.sessions import SessionStore, thread_id, title_from
from knowsphere_conversation.domain.workflow import Step, Workflow, agent_ids
from knowsphere_conversation.domain.workflow_run import WorkflowStopped, run_steps
from knowsphere_runtime.identity import Identity, IdentityError, require_identity
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)


class CapabilityUnavailable(Exception):
    """A peer answered that the capability a turn needs is not available."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Publish = Callable[[ChatTurnEvent], Awaitable[None]]
PublishCompleted = Callable[[TurnCompleted], Awaitable[None]]


class SessionLeases(Protocol):
    """One turn at a time per session, across replicas: ``hold`` yields False when another turn of
    the session holds it (and keeps the lease alive while the body runs when it yields True)."""

    def hold(self, key: str) -> contextlib.AbstractAsyncContextManager[bool]: ...


class EventLog(Protocol):
    """The events a turn has published so far (read when a turn is delivered again)."""

    async def read(self, turn_id: str) -> Sequence[ChatTurnEvent]: ...


class NoLeases:
    """Leases for a single replica without a bus (tests, tools): one lock per session in-process."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[bool]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        if lock.locked():
            yield False
            return
        async with lock:
            yield True


class Outcome(enum.Enum):
    """What became of one delivery of a turn."""

    ANSWERED = "answered"
    """The turn ended with its final event (now or on an earlier delivery)."""
    BUSY = "busy"
    """Another turn of the session is running: deliver this one again later."""


@dataclass(frozen=True)
class TurnResult:
    outcome: Outcome
    final: ChatTurnEvent | None = None
    """The turn's final event (None while the turn waits for its session)."""


IDENTITY_REQUIRED = "identity_required"
SESSION_NOT_FOUND = "session_not_found"
INVALID_INPUT = "invalid_input"
AGENT_NOT_FOUND = "agent_not_found"
SESSION_BUSY = "session_busy"
AGENT_INACTIVE = "agent_inactive"
WORKFLOW_STOPPED = "workflow_stopped"
# An external orchestrator's application (Dify, n8n, an A2A agent) could not answer:
EXTERNAL_UNREACHABLE = "external_unreachable"
"""Not allowed by the egress policy, not resolvable, or not answering (one code: which is not told)."""
EXTERNAL_AUTH_FAILED = "external_auth_failed"
"""It refused the orchestrator's API key (401/403, or an A2A agent that wants authentication)."""
EXTERNAL_RATE_LIMITED = "external_rate_limited"
EXTERNAL_TIMEOUT = "external_timeout"
"""Silent longer than the orchestrator's ``timeout_seconds``, or answering longer than the service allows."""
EXTERNAL_BAD_RESPONSE = "external_bad_response"
"""An answer that does not follow its wire format, breaks off, or is too large."""
EXTERNAL_FAILED = "external_failed"
"""It answered with an error of its own (an error event, an error status, a failed task)."""
EXTERNAL_KEY_UNAVAILABLE = "external_key_unavailable"
"""The stored API key cannot be opened: no MASTER_KEY, or not the one it was sealed with."""
EXTERNAL_INTERRUPTED = "external_interrupted"
"""A turn delivered again whose application answered differently from what the client was shown."""


def history_messages(turn_id: str, history: Sequence[HistoryMessage]) -> list[Message]:
    """A client's conversation so far as the checkpoint keeps a session's turns: each run of questions
    and the answers after them is one finished turn (a question without an answer is not one)."""
    messages: list[Message] = []
    turn = 0
    for index, item in enumerate(history):
        if item.role == "user" and messages and messages[-1]["role"] == "assistant":
            turn += 1
        message = Message(
            id=f"{turn_id}-h{index}", turn_id=f"{turn_id}-h{turn}", role=item.role, content=item.content
        )
        if item.role == "assistant":
            message["final"] = True
        messages.append(message)
    return messages


class Agents(Protocol):
    """The tenant's agent and orchestrator records (the conversation's store)."""

    async def get_agent(self, tenant_id: str, agent_id: str) -> cpb.Agent | None: ...
    async def get_orchestrator(self, tenant_id: str, orchestrator_id: str) -> cpb.Orchestrator | None: ...


ORCHESTRATOR_NOT_FOUND = "orchestrator_not_found"
ORCHESTRATOR_INACTIVE = "orchestrator_inactive"


class TurnProblem(Exception):
    """A turn that cannot start: it ends at once with this code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Plan:
    """Who answers a turn, as the session's orchestrator decides."""

    agent_id: str
    """Empty: the default agent."""
    direct_retrieval: bool = False
    knowledge_base_ids: tuple[str, ...] = ()
    knowledge_graph: bool = False
    handoff: tuple[str, str] | None = None
    """(agent id, reason) to announce as a handoff event."""
    experts: tuple[tuple[str, AgentConfig], ...] = ()
    """A collaboration's experts as (name, configuration), in order; ``agent_id`` then writes the summary."""
    parallel: bool = False
    """The experts answer at once instead of in turn (each seeing the earlier answers)."""
    workers: tuple[Worker, ...] = ()
    """A supervisor's workers (``agent_id`` is the supervisor)."""
    max_hops: int = 0
    summarize: bool = False
    workflow: Workflow | None = None
    """A workflow's steps; the agent of the step where it ends answers."""
    step_agents: dict[str, AgentConfig] = dataclasses.field(default_factory=dict)
    external: ExternalTarget | None = None
    """An external orchestrator's application answers instead of the graph."""
    workspace: bool = False
    """The agent answers as a deep agent (deep_agent mode) — also, with ``single_agent``, when it has
    skills."""
    single_agent: bool = True
    """One agent answers alone (single mode, or a session bound to an agent): it becomes a deep agent
    when it has skills, as the spec's Single mode does."""


TURN_FAILED = "turn_failed"
TURN_FAILED_MESSAGE = "the turn failed unexpectedly; please try again"


class EventsUnpublishable(RuntimeError):
    """The bus did not take an event of the turn (it is down or stalled). Nothing more can be said to
    the client now, so the turn stops without a final event and is delivered again once the bus is
    back: it resumes from its checkpoint and the events already stored, and the client's stream goes
    on where it stopped."""


class TurnRunner:
    """Runs turns on the compiled graph ``graph()`` returns (compiled once its checkpoint store is open)
    with the given peers; ``publish`` sends each event."""

    def __init__(
        self,
        graph: Callable[[], Any],
        *,
        models: Models,
        tools: Tools,
        memory: Memory,
        search: Search,
        publish: Publish,
        publish_completed: PublishCompleted,
        limits: TurnLimits,
        agent: AgentConfig | None = None,
        leases: SessionLeases | None = None,
        event_log: EventLog | None = None,
        sessions: SessionStore | None = None,
        agents: Agents | None = None,
        external: ExternalSupport | None = None,
    ) -> None:
        self._graph = graph
        self._models = models
        self._tools = tools
        self._memory = memory
        self._search = search
        self._publish = publish
        self._publish_completed = publish_completed
        self._limits = limits
        self._agent = agent or AgentConfig()
        self._leases = leases or NoLeases()
        self._running: dict[str, tuple[asyncio.Task[Any], Identity]] = {}
        self._event_log = event_log
        self._sessions = sessions
        self._agents = agents
        self._external = external

    async def run(self, request: ChatRequested, *, redelivered: bool = False) -> TurnResult:
        """Runs the turn (or resumes it when ``redelivered``)."""
        previous = await self._event_log.read(request.turn_id) if redelivered and self._event_log else ()
        if any(e.is_final for e in previous):
            return TurnResult(Outcome.ANSWERED, next(e for e in previous if e.is_final))
        try:
            identity = require_identity()
        except IdentityError as error:
            emit = self._emitter(request, Replay(previous))
            final = await emit(TurnEventKind.ERROR, error_code=IDENTITY_REQUIRED, error_message=str(error))
            return TurnResult(Outcome.ANSWERED, final)
        agent = self._agent
        problem: tuple[str, str] | None = None
        agent_id, missing_agent = request.agent_id, f"agent {request.agent_id} not found"
        plan = Plan(agent_id)
        if request.session_id and self._sessions is not None:
            session = await self._sessions.get(identity, request.session_id)
            if session is None:
                problem = (SESSION_NOT_FOUND, f"session {request.session_id} not found")
            elif session.orchestrator_id and self._agents is not None:
                try:
                    plan = await self._plan(identity, session.orchestrator_id, request, previous)
                except TurnProblem as refused:
                    problem = (refused.code, refused.message)
                agent_id = plan.agent_id
                missing_agent = f"the orchestrator's agent {agent_id} no longer exists"
            else:
                agent_id = session.agent_id
                missing_agent = f"the session's agent {session.agent_id} no longer exists"
        elif request.orchestrator_id and self._agents is not None:
            try:
                plan = await self._plan(identity, request.orchestrator_id, request, previous)
            except TurnProblem as refused:
                problem = (refused.code, refused.message)
            agent_id = plan.agent_id
            missing_agent = f"the orchestrator's agent {agent_id} no longer exists"
        if problem is None and agent_id and self._agents is not None:
            record = await self._agents.get_agent(identity.tenant_id, agent_id)
            if record is None:
                problem = (AGENT_NOT_FOUND, missing_agent)
            elif not record.active:
                problem = (AGENT_INACTIVE, f"the agent {record.display_name or record.name} is switched off")
            else:
                agent = agent_config(record)  # read at the start: a change applies from the next turn
                if plan.workspace or (plan.single_agent and record.skill_names):
                    agent = dataclasses.replace(agent, workspace=True)
        if problem is not None:
            emit = self._emitter(request, Replay(previous))
            final = await emit(TurnEventKind.ERROR, error_code=problem[0], error_message=problem[1])
            return TurnResult(Outcome.ANSWERED, final)
        # A session's checkpoint thread belongs to its tenant and user: another caller's session id
        # names another thread.
        thread = thread_id(identity, request.session_id or request.turn_id)
        async with self._leases.hold(thread) as held:
            if not held:
                return TurnResult(Outcome.BUSY)
            return TurnResult(
                Outcome.ANSWERED, await self._run(request, identity, thread, previous, agent, plan)
            )

    async def _member(self, identity: Identity, agent_id: str) -> cpb.Agent:
        """An agent an orchestrator runs, or the turn's end naming what is wrong with it."""
        assert self._agents is not None
        agent = await self._agents.get_agent(identity.tenant_id, agent_id)
        if agent is None:
            raise TurnProblem(AGENT_NOT_FOUND, f"the orchestrator's agent {agent_id} no longer exists")
        if not agent.active:
            raise TurnProblem(AGENT_INACTIVE, f"the agent {agent.display_name or agent.name} is switched off")
        return agent

    async def _plan(
        self,
        identity: Identity,
        orchestrator_id: str,
        request: ChatRequested,
        previous: Sequence[ChatTurnEvent],
    ) -> Plan:
        """Who answers this turn of a session bound to ``orchestrator_id``. A turn delivered again
        keeps the agent its first delivery announced."""
        assert self._agents is not None
        record = await self._agents.get_orchestrator(identity.tenant_id, orchestrator_id)
        if record is None:
            raise TurnProblem(ORCHESTRATOR_NOT_FOUND, f"orchestrator {orchestrator_id} not found")
        name = record.display_name or record.name
        if not record.active:
            raise TurnProblem(ORCHESTRATOR_INACTIVE, f"the orchestrator {name} is switched off")
        mode = Mode.from_number(record.mode)
        trace.get_current_span().set_attribute(attributes.ORCHESTRATION_MODE, mode.value if mode else "")
        if mode is None or mode not in RUNNABLE_MODES:
            raise TurnProblem(
                MODE_UNAVAILABLE,
                f"the orchestrator {name} uses the {mode.value if mode else record.mode} mode, "
                "which cannot answer yet",
            )
        config = parse_config(mode, json_format.MessageToDict(record.config))
        if isinstance(config, SingleConfig):
            return Plan(config.agent_id)
        if isinstance(config, DeepAgentConfig):
            return Plan(config.agent_id, workspace=True)
        if isinstance(config, ExternalConfig):
            return Plan("", external=await self._external_target(identity, record, config))
        if isinstance(config, KnowledgeBaseConfig):
            return Plan(
                config.agent_id,
                direct_retrieval=True,
                knowledge_base_ids=config.knowledge_base_ids,
                knowledge_graph=config.knowledge_graph,
                single_agent=False,
            )
        if isinstance(config, WorkflowConfig):
            members = {}
            for member_id in agent_ids(config.workflow):
                members[member_id] = agent_config(await self._member(identity, member_id))
            return Plan("", workflow=config.workflow, step_agents=members)
        if isinstance(config, SupervisorConfig):
            workers = []
            for worker_id in config.worker_agent_ids:
                worker = await self._member(identity, worker_id)
                workers.append(
                    Worker(
                        worker.id,
                        worker.display_name or worker.name,
                        worker.description,
                        agent_config(worker),
                    )
                )
            return Plan(
                config.supervisor_agent_id,
                workers=tuple(workers),
                max_hops=config.max_hops,
                summarize=config.enable_summarization,
                single_agent=False,
            )
        if isinstance(config, CollaborationConfig):
            experts = []
            for expert_id in config.agent_ids:
                expert = await self._member(identity, expert_id)
                experts.append((expert.display_name or expert.name, agent_config(expert)))
            return Plan(
                config.summary_agent_id or config.agent_ids[0],
                experts=tuple(experts),
                parallel=config.strategy == "parallel",
                single_agent=False,
            )
        assert isinstance(config, ConditionalConfig)
        announced = [e for e in previous if e.kind is TurnEventKind.HANDOFF and e.to_agent_id]
        if announced:
            return Plan(announced[0].to_agent_id or "")
        text, _ = split_images(request.message)

        async def intent() -> Intent:
            try:
                decided, _, _ = await decide_intent(
                    self._models, "", (), text, has_image=bool(request.images)
                )
            except ServiceError as error:
                log.warning("intent for routing undecided; the rules decide", error=str(error))
                return rule_intent(text, has_image=bool(request.images))
            return decided

        chosen, reason = await choose_route(config, text, intent)
        return Plan(chosen, handoff=(chosen, reason))

    async def _external_target(
        self, identity: Identity, record: cpb.Orchestrator, config: ExternalConfig
    ) -> ExternalTarget:
        name = record.display_name or record.name
        if self._external is None:
            raise TurnProblem(
                MODE_UNAVAILABLE,
                f"the orchestrator {name} calls an external application, which this service is not set "
                "up to do",
            )
        try:
            return await open_target(self._external, identity.tenant_id, record.id, name, config)
        except KeyUnavailable:
            raise TurnProblem(
                EXTERNAL_KEY_UNAVAILABLE,
                f"the API key of the orchestrator {name} cannot be read on this service (its MASTER_KEY is "
                "missing or changed); ask an administrator to check it, or save the key again",
            ) from None

    async def refuse_busy(self, request: ChatRequested, waited_seconds: float) -> ChatTurnEvent:
        """Ends a turn that waited too long for its session's previous turn (the session's queue is
        full) with a named error, once."""
        previous = await self._event_log.read(request.turn_id) if self._event_log else ()
        if any(e.is_final for e in previous):
            return next(e for e in previous if e.is_final)
        emit = self._emitter(request, Replay(previous))
        return await emit(
            TurnEventKind.ERROR,
            error_code=SESSION_BUSY,
            error_message=f"the session is still answering an earlier message after {waited_seconds:.0f} s; "
            "try again when it has finished",
        )

    def cancel(self, turn_id: str, asker: Identity) -> bool:
        """Stops ``turn_id`` when this replica runs it for ``asker``; it ends with a ``cancelled``
        event. False when it is not running here (or is another user's)."""
        running = self._running.get(turn_id)
        if running is None or running[1] != asker:
            return False
        running[0].cancel()
        return True

    def _emitter(self, request: ChatRequested, replay: Replay) -> Callable[..., Awaitable[ChatTurnEvent]]:
        sequence = replay.next_sequence

        async def emit(kind: TurnEventKind, **fields: Any) -> ChatTurnEvent:
            nonlocal sequence
            admitted = replay.admit(kind, fields)
            event = ChatTurnEvent(
                turn_id=request.turn_id, sequence=sequence, kind=kind, **(admitted or fields)
            )
            if admitted is None:
                return event  # shown before the turn was delivered again
            await self._publish(event)
            sequence += 1  # only once delivered: the reader's sequence check stays meaningful
            return event

        return emit

    async def _run(
        self,
        request: ChatRequested,
        identity: Identity,
        thread: str,
        previous: Sequence[ChatTurnEvent],
        agent: AgentConfig,
        plan: Plan,
    ) -> ChatTurnEvent:
        span = trace.get_current_span()
        graph = self._graph()
        config: dict[str, Any] = {"configurable": {"thread_id": thread}}
        saved = await graph.aget_state(config)
        values = saved.values if saved else {}
        resuming = values.get("turn_id") == request.turn_id
        kept = [
            m["content"]
            for m in values.get("messages", [])
            if resuming and m["turn_id"] == request.turn_id and m["role"] == "assistant"
        ]
        emit = self._emitter(request, Replay(previous, "".join(kept)))
        runtime = TurnRuntime(
            models=self._models,
            tools=self._tools,
            memory=self._memory,
            search=self._search,
            emit=emit,
            agent=agent,
            limits=self._limits,
            session_id=request.session_id or "",
            knowledge_base_ids=(
                tuple(request.knowledge_base_ids) or plan.knowledge_base_ids or agent.knowledge_base_ids
            ),
            web_search=request.web_search,
            knowledge_graph=request.knowledge_graph or plan.knowledge_graph,
            language=request.language,
            direct_retrieval=plan.direct_retrieval,
            text=kept,
            workers=plan.workers,
            max_hops=plan.max_hops,
        )
        if plan.workers:
            runtime.agent = dataclasses.replace(
                agent,
                identity=agent.identity
                + "\n\n"
                + (prompts.SUPERVISE_SUMMARIZE if plan.summarize else prompts.SUPERVISE_RELAY),
            )

            async def delegate(worker: Worker, task: str, call_id: str) -> tuple[str, list[dict[str, Any]]]:
                return await self._expert(request, thread, call_id, worker.config, runtime, task, emit)

            runtime.delegate = delegate
        config["configurable"]["turn"] = runtime
        text, images = split_images(request.message)
        try:
            images += [parse_image(value) for value in request.images]
        except ValueError as error:
            return await emit(TurnEventKind.ERROR, error_code=INVALID_INPUT, error_message=f"images: {error}")
        runtime.images = tuple(images)
        # The history keeps image links but not the bytes of data URLs.
        content = " ".join([text, *(image.as_text for image in images)]).strip()
        question = Message(id=request.turn_id + "-q", turn_id=request.turn_id, role="user", content=content)

        async def invoke() -> Any:
            if plan.external is not None and not resuming:
                return await self._relay(
                    request, identity, thread, plan.external, runtime, question, values, previous
                )
            if plan.workflow is not None and not (resuming and not saved.next):
                await self._run_workflow(request, thread, plan, runtime, text, emit)
            if plan.experts and not (resuming and not saved.next):
                runtime.briefing, runtime.briefing_sources = await self._consult(
                    request, thread, plan, runtime, text, emit
                )
            if not resuming:
                earlier = history_messages(request.turn_id, request.history)
                return await graph.ainvoke(
                    {"messages": [*earlier, question], "turn_id": request.turn_id, "question": text}, config
                )
            if saved.next:
                span.add_event("turn resumed", {"node": ",".join(saved.next)})
                log.info("turn resumed from its checkpoint", turn_id=request.turn_id, next=list(saved.next))
                return await graph.ainvoke(None, config)
            return values  # the graph had finished; only the final event was missing

        try:
            await emit(TurnEventKind.STARTED)
            if plan.handoff is not None:
                span.set_attribute(attributes.AGENT_ID, plan.handoff[0])
                await emit(
                    TurnEventKind.HANDOFF,
                    from_agent_id="",
                    to_agent_id=plan.handoff[0],
                    reason=plan.handoff[1],
                )
            task = asyncio.create_task(invoke())
            self._running[request.turn_id] = (task, identity)
            try:
                state = await task
            finally:
                self._running.pop(request.turn_id, None)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the replica is stopping, not the user: the turn is delivered again
            span.add_event("turn cancelled")
            return await emit(TurnEventKind.CANCELLED, text="".join(runtime.text))
        except TurnError as error:
            span.set_attribute(attributes.ERROR_CODE, error.code)
            return await emit(TurnEventKind.ERROR, error_code=error.code, error_message=error.message)
        except CapabilityUnavailable as error:
            return await emit(TurnEventKind.ERROR, error_code=error.code, error_message=error.message)
        except EventsUnpublishable:
            raise  # no final event either: the turn is delivered again once the bus is back
        except Exception:
            log.exception("turn failed", turn_id=request.turn_id)
            return await emit(TurnEventKind.ERROR, error_code=TURN_FAILED, error_message=TURN_FAILED_MESSAGE)
        if graph.checkpointer is not None:
            # The experts' and workers' threads served this turn only (the answer keeps what they said).
            for sub_thread in dict.fromkeys(runtime.sub_threads):
                await graph.checkpointer.adelete_thread(sub_thread)
        text = "".join(runtime.text)
        sources = [citation(s) for s in state.get("sources", [])]
        used = cited_handles(text)
        cited = [s for s in sources if s.handle in used]
        answer_kind = AnswerKind(state.get("answer_kind") or AnswerKind.GENERATED)
        span.set_attribute(attributes.ANSWER_KIND, answer_kind.value)
        span.set_attribute(attributes.CITATIONS_REMOVED, runtime.removed_citations)
        span.set_attribute(attributes.SOURCES_COUNT, len(sources))
        # What the turn leaves behind is written before its final event, so a client that sees the
        # answer also sees the session, its memory and its affinity updated. (Delivered again after a
        # crash in between, the turn announces once more and JetStream keeps one copy.)
        await self._announce(request, cited, runtime)
        if request.session_id:
            question = state.get("rewritten") or request.message
            await self._memory.note_turn(request.session_id, request.turn_id, question, text)
            if self._sessions is not None and not any(e.kind is TurnEventKind.COMPLETED for e in previous):
                await self._sessions.count_turn(
                    identity, request.session_id, title_from(request.message), datetime.now(UTC)
                )
        final = await emit(
            TurnEventKind.COMPLETED,
            text=text,
            citations=cited,
            answer_kind=answer_kind,
            removed_citations=runtime.removed_citations,
            prompt_tokens=runtime.usage.get("prompt_tokens", 0),
            completion_tokens=runtime.usage.get("completion_tokens", 0),
        )
        return final

    async def _relay(
        self,
        request: ChatRequested,
        identity: Identity,
        thread: str,
        target: ExternalTarget,
        runtime: TurnRuntime,
        question: Message,
        values: dict[str, Any],
        previous: Sequence[ChatTurnEvent],
    ) -> dict[str, Any]:
        """An external orchestrator's turn: its application's answer relayed as the turn's text, then
        the exchange written to the session's checkpoint (its history, and the mark that the turn was
        answered). Delivered again, the application is asked again and only what goes beyond what the
        client was shown is let through, if the new answer repeats it (see :class:`ResumeGate`)."""
        assert self._external is not None
        earlier = history_messages(request.turn_id, request.history)
        try:
            said = await relay(
                self._external,
                target,
                identity,
                PeerTurn(
                    session_id=request.session_id or "",
                    turn_id=request.turn_id,
                    question=question["content"],
                    history=exchanges([*values.get("messages", []), *earlier], self._limits.keep_turns),
                    shown="".join(e.text or "" for e in previous if e.kind is TurnEventKind.TEXT_DELTA),
                ),
                runtime,
            )
        except Diverged:
            raise TurnError(
                EXTERNAL_INTERRUPTED,
                f"the answer of {target.name} was interrupted and, asked again, it answered differently; "
                "please ask again",
            ) from None
        answer = Message(
            id=uuid.uuid4().hex, turn_id=request.turn_id, role="assistant", content=said, final=True
        )
        state: dict[str, Any] = {
            "messages": [*earlier, question, answer],
            "turn_id": request.turn_id,
            "question": question["content"],
            "rewritten": "",
            "intent": "",
            "route": "",
            "sources": [],
            "tool_rounds": 0,
            "passages": "",
            "answer_kind": AnswerKind.GENERATED.value,
        }
        graph = self._graph()
        if graph.checkpointer is not None:
            # As if the graph's last node had answered: the thread ends here, and a turn delivered again
            # after this point finds it answered and is not asked again.
            await graph.aupdate_state({"configurable": {"thread_id": thread}}, state, as_node="generate")
        return state

    async def _run_workflow(
        self,
        request: ChatRequested,
        thread: str,
        plan: Plan,
        runtime: TurnRuntime,
        question: str,
        emit: Callable[..., Awaitable[ChatTurnEvent]],
    ) -> None:
        """A workflow's steps up to the one that answers; ``runtime`` then answers as that step's agent
        from what the steps produced."""
        assert plan.workflow is not None

        async def consult(label: str, agent_id: str, asked: str) -> tuple[str, list[dict[str, Any]]]:
            return await self._expert(
                request, thread, label, plan.step_agents[agent_id], runtime, asked, emit
            )

        async def announce(step: Step, label: str) -> None:
            await emit(
                TurnEventKind.HANDOFF,
                from_agent_id="",
                to_agent_id=step.agent_id,
                reason=f"step {step.id}",
                tool_call_id=label,
            )

        async def call_tool(
            label: str, name: str, arguments: dict[str, Any]
        ) -> tuple[str, list[dict[str, Any]]]:
            return await self._workflow_tool(request, runtime, label, name, arguments, emit)

        try:
            finale = await run_steps(
                plan.workflow, question, consult=consult, call_tool=call_tool, announce=announce
            )
        except WorkflowStopped as error:
            raise TurnError(WORKFLOW_STOPPED, error.message) from error
        label = f"w-{finale.step.id}"
        await announce(finale.step, label)
        runtime.agent = plan.step_agents[finale.step.agent_id]
        runtime.briefing = prompts.workflow_briefing(finale.produced, finale.question)
        runtime.briefing_sources = tuple(finale.sources)

    async def _workflow_tool(
        self,
        request: ChatRequested,
        runtime: TurnRuntime,
        label: str,
        name: str,
        arguments: dict[str, Any],
        emit: Callable[..., Awaitable[ChatTurnEvent]],
    ) -> tuple[str, list[dict[str, Any]]]:
        """A workflow's tool step through the tool runner (its retries and limits), shown as a tool call."""
        await emit(TurnEventKind.TOOL_STARTED, tool_call_id=label, tool_name=name)
        started = time.monotonic()
        call = tpb.ExecuteToolRequest(
            name=name,
            tool_call_id=label,
            context=tpb.ToolContext(
                session_id=runtime.session_id,
                turn_id=request.turn_id,
                switches=tpb.TurnSwitches(
                    knowledge_base_ids=list(runtime.knowledge_base_ids),
                    web_search=runtime.web_search,
                    knowledge_graph=runtime.knowledge_graph,
                ),
                language=runtime.language,
            ),
        )
        call.arguments.update(arguments)

        async def finished(ok: bool, attempts: int) -> None:
            await emit(
                TurnEventKind.TOOL_FINISHED,
                tool_call_id=label,
                tool_name=name,
                tool_ok=ok,
                attempts=attempts,
                duration_ms=int((time.monotonic() - started) * 1000),
            )

        try:
            response = await self._tools.execute_tool(call)
        except ServiceError as error:
            await finished(False, 0)
            raise TurnError(
                "tool_unavailable", f"the tool {name} could not run: {error.user_message}"
            ) from error
        if response.HasField("error"):
            await finished(False, response.attempts)
            raise TurnError(
                "tool_failed",
                f"the workflow's tool {name} failed after {response.attempts} attempt(s): "
                f"{response.error.message}",
            )
        await finished(True, response.attempts)
        return response.content, [state_source(s) for s in response.sources]

    async def _consult(
        self,
        request: ChatRequested,
        thread: str,
        plan: Plan,
        runtime: TurnRuntime,
        question: str,
        emit: Callable[..., Awaitable[ChatTurnEvent]],
    ) -> tuple[str, tuple[dict[str, Any], ...]]:
        """A collaboration's experts answer ``question`` (in turn, each seeing the earlier answers, or
        at once), each on a checkpoint thread of its own, so a turn delivered again resumes an expert
        where it stopped and reads the finished ones' answers. Their tool activity reaches the client,
        their answers do not: the summary that follows answers from them (the briefing returned, with
        the sources they cite numbered for the whole turn). An expert that fails is reported in the
        briefing; the others' work is kept."""
        answers: list[tuple[str, str, list[dict[str, Any]]]] = [("", "", [])] * len(plan.experts)
        names = [name for name, _ in plan.experts]
        for index, (_, expert) in enumerate(plan.experts):
            reason = f"expert {index + 1} of {len(plan.experts)}"
            if plan.parallel or index == 0:
                await emit(
                    TurnEventKind.HANDOFF, from_agent_id="", to_agent_id=expert.agent_id, reason=reason
                )

        async def consult(index: int) -> None:
            name, expert = plan.experts[index]
            if not plan.parallel and index > 0:
                await emit(
                    TurnEventKind.HANDOFF,
                    from_agent_id=plan.experts[index - 1][1].agent_id,
                    to_agent_id=expert.agent_id,
                    reason=f"expert {index + 1} of {len(plan.experts)}",
                )
            earlier = [] if plan.parallel else [(names[i], answers[i][1]) for i in range(index)]
            asked = question
            if earlier:
                asked += "\n\n" + "\n\n".join(f"[{n}] said:\n{a}" for n, a in earlier)
            try:
                text, sources = await self._expert(request, thread, f"e{index}", expert, runtime, asked, emit)
            except (TurnError, CapabilityUnavailable) as error:
                log.warning(
                    "an expert could not answer", turn_id=request.turn_id, expert=name, error=error.message
                )
                text, sources = f"(could not answer: {error.message})", []
            answers[index] = (name, text, sources)

        if plan.parallel:
            await asyncio.gather(*(consult(i) for i in range(len(plan.experts))))
        else:
            for index in range(len(plan.experts)):
                await consult(index)
        # Each expert numbered its sources from c1: number them for the whole turn.
        merged: list[dict[str, Any]] = []
        briefed: list[tuple[str, str]] = []
        for name, text, sources in answers:
            renamed = {}
            for source in sources:
                handle = f"c{len(merged) + 1}"
                renamed[source["handle"]] = handle
                merged.append({**source, "handle": handle})
            briefed.append((name, renumber_citations(text, renamed)))
        return prompts.experts_briefing(briefed), tuple(merged)

    async def _expert(
        self,
        request: ChatRequested,
        thread: str,
        label: str,
        expert: AgentConfig,
        runtime: TurnRuntime,
        question: str,
        emit: Callable[..., Awaitable[ChatTurnEvent]],
    ) -> tuple[str, list[dict[str, Any]]]:
        """One expert's (or worker's) answer and sources, from its own checkpoint thread (run, resumed
        or read); ``label`` names the thread within the turn and prefixes its tool calls' ids."""
        graph = self._graph()
        turn_id = f"{request.turn_id}-{label}"
        config: dict[str, Any] = {"configurable": {"thread_id": f"{thread}/{turn_id}"}}
        runtime.sub_threads.append(f"{thread}/{turn_id}")

        async def shown(kind: TurnEventKind, **fields: Any) -> Any:
            # Its tool activity is the turn's (ids kept apart per expert); its own intent, sources and
            # answer stay inside.
            if kind in (TurnEventKind.TOOL_STARTED, TurnEventKind.TOOL_FINISHED):
                fields["tool_call_id"] = f"{label}-{fields.get('tool_call_id')}"
                return await emit(kind, **fields)
            return None

        inner = dataclasses.replace(
            runtime,
            emit=shown,
            agent=expert,
            session_id="",
            workers=(),
            delegate=None,
            sub_threads=[],
            knowledge_base_ids=runtime.knowledge_base_ids or expert.knowledge_base_ids,
            text=[],
            usage={},
            removed_citations=0,
        )
        config["configurable"]["turn"] = inner
        saved = await graph.aget_state(config)
        values = saved.values if saved else {}
        if values.get("turn_id") != turn_id:
            message = Message(id=turn_id + "-q", turn_id=turn_id, role="user", content=question)
            values = await graph.ainvoke(
                {"messages": [message], "turn_id": turn_id, "question": question}, config
            )
        elif saved.next:
            values = await graph.ainvoke(None, config)
        for key, count in inner.usage.items():
            runtime.usage[key] = runtime.usage.get(key, 0) + count
        answer = "".join(
            m["content"]
            for m in values.get("messages", [])
            if m["turn_id"] == turn_id and m["role"] == "assistant" and m.get("final")
        )
        return answer, list(values.get("sources", []))

    async def _announce(
        self, request: ChatRequested, cited: Sequence[Citation], runtime: TurnRuntime
    ) -> None:
        documents: dict[str, CitedDocument] = {}
        for source in cited:
            if source.document_id and source.knowledge_base_id:
                documents.setdefault(
                    source.document_id,
                    CitedDocument(
                        document_id=source.document_id,
                        knowledge_base_id=source.knowledge_base_id,
                        file_name=source.file_name,
                    ),
                )
        event = TurnCompleted(
            turn_id=request.turn_id,
            session_id=request.session_id,
            cited_documents=list(documents.values()),
            prompt_tokens=runtime.usage.get("prompt_tokens", 0),
            completion_tokens=runtime.usage.get("completion_tokens", 0),
        )
        try:
            await self._publish_completed(event)
        except Exception:
            # The answer is out; a lost announcement costs an affinity hit, not the turn.
            log.exception("turn completion not announced", turn_id=request.turn_id)


__all__ = [
    "EXTERNAL_AUTH_FAILED",
    "EXTERNAL_BAD_RESPONSE",
    "EXTERNAL_FAILED",
    "EXTERNAL_INTERRUPTED",
    "EXTERNAL_KEY_UNAVAILABLE",
    "EXTERNAL_RATE_LIMITED",
    "EXTERNAL_TIMEOUT",
    "EXTERNAL_UNREACHABLE",
    "IDENTITY_REQUIRED",
    "SESSION_NOT_FOUND",
    "TURN_FAILED",
    "CapabilityUnavailable",
    "EventLog",
    "EventsUnpublishable",
    "NoLeases",
    "Outcome",
    "SessionLeases",
    "TurnResult",
    "TurnRunner",
    "history_messages",
]
