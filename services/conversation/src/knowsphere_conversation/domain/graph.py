"""The conversation graph: progressive agentic RAG on LangGraph.

START → prepare_context → manage_memory → query_understand → generate → END
                                                            → agent ⇄ tools → collect_sources → agent … → END
                                                            → retrieve → generate → END  (knowledge-base mode)
                                                            → extract → END   (no chat model configured)

The graph is built from an :class:`AgentConfig` (model, system prompt, tools, skills) — data, not
constants — and runs with a :class:`TurnRuntime` in ``config["configurable"]["turn"]``: the peers
(modelhub, toolrunner, memory, retrieval), this turn's options and the ``emit`` function that sends the
turn's events. The checkpointed state keeps every message of the session; what a model sees is the
view of :mod:`~knowsphere_conversation.domain.layout`.
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, TypedDict

import structlog
from google.protobuf import json_format
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from opentelemetry import trace

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere.conversation.v1.conversation_enums import Intent, TurnRoute
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ChatRole
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_clients.errors import ServiceError
from knowsphere_clients.modelhub import is_model_missing
from knowsphere_contracts.agents import VISION
from knowsphere_contracts.events import AnswerKind, Citation, TurnEventKind
from knowsphere_conversation.domain import prompts
from knowsphere_conversation.domain.citations import CitationFilter, cited_handles, renumber_citations
from knowsphere_conversation.domain.extractive import Passage, extract_answer
from knowsphere_conversation.domain.images import ImageRef
from knowsphere_conversation.domain.intents import BY_CODE, SKIP_INTENTS, route_for, rule_intent
from knowsphere_conversation.domain.layout import (
    Message,
    ToolCallRecord,
    build_request_messages,
    finished_turns,
)
from knowsphere_telemetry import attributes

log = structlog.get_logger(__name__)
tracer = trace.get_tracer("knowsphere.conversation")

PURPOSE_AGENT = "conversation.agent"
PURPOSE_GENERATE = "conversation.generate"
PURPOSE_REWRITE = "conversation.rewrite"
PURPOSE_INTENT = "conversation.intent"
PURPOSE_IMAGE = "conversation.image"
RETRIEVAL_HANDLE = "retrieval_handle"
PLAN_TOOL = "write_plan"
"""Key of a source's retrieval handle in the state (beside the Citation fields)."""
CITATION_FIELDS = frozenset(Citation.model_fields)


class TurnError(Exception):
    """Ends a turn with an ``error`` event: a stable ``code`` and a message for the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def model_error(error: ServiceError) -> TurnError:
    """modelhub's friendly code and message (in the caller's language) as the turn's error."""
    code = error.model_code.value if error.model_code else "model_unavailable"
    return TurnError(code, error.user_message)


# --- what the graph needs from outside -------------------------------------------------------------


class Models(Protocol):
    def chat_stream(self, request: mpb.ChatStreamRequest) -> Any: ...  # AsyncIterator[ChatStreamResponse]
    async def decide(self, request: mpb.DecideRequest) -> mpb.DecideResponse: ...
    async def describe(self, request: mpb.DescribeImageRequest) -> mpb.DescribeImageResponse: ...


class Tools(Protocol):
    async def list_tools(self, request: tpb.ListToolsRequest) -> tpb.ListToolsResponse: ...
    async def execute_tool(self, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse: ...


@dataclass(frozen=True)
class Summary:
    """A session's handoff summary as the prompt uses it."""

    text: str = ""
    upto_message_id: str = ""
    """The last message it covers; the history sent to the model starts after it."""
    revision: int = 0


class Memory(Protocol):
    async def background(self, knowledge_base_ids: Sequence[str], language: str) -> str: ...
    async def summary(self, session_id: str) -> Summary: ...
    async def working_memory(self, session_id: str) -> str: ...
    async def note_turn(self, session_id: str, turn_id: str, question: str, answer: str) -> None: ...
    async def apply_statements(self, text: str, session_id: str, message_id: str) -> None: ...
    async def compact(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        context_window: int,
        trigger_prompt_tokens: int,
        model_id: str,
        expected_revision: int,
    ) -> Summary | None: ...


Search = Callable[[str, Sequence[str]], Awaitable[Sequence[rpb.SearchResult]]]
Emit = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class AgentConfig:
    """What an agent is: the graph is built from it (the orchestration layer's unit)."""

    agent_id: str = ""
    model_id: str = ""
    """Empty: the tenant's default chat model."""
    identity: str = prompts.DEFAULT_IDENTITY
    tool_names: tuple[str, ...] = ()
    """Empty: every selectable tool (trimmed by the turn's switches)."""
    skills: tuple[tuple[str, str], ...] = ()
    """Bound skills as (name, description)."""
    knowledge_base_ids: tuple[str, ...] = ()
    """Searched when a turn names none."""
    temperature: float | None = None
    max_tokens: int | None = None
    vision: bool = False
    """The agent's model reads images (its model types include VLM): a message's images go to it as
    image parts; otherwise only their description does."""
    workspace: bool = False
    """A deep agent: it works in the session's file workspace (the workspace tools, write_plan, skill
    scripts that see the workspace), takes the ReAct path for every question that is not chit-chat,
    and its system prompt says how to work that way."""


def agent_config(agent: cpb.Agent) -> AgentConfig:
    """The configuration a turn runs with, from an agent record of the contract."""
    parameters = agent.model_parameters
    return AgentConfig(
        agent_id=agent.id,
        model_id=agent.model_id,
        identity=agent.system_prompt or prompts.DEFAULT_IDENTITY,
        tool_names=tuple(agent.tool_names),
        skills=tuple((name, "") for name in agent.skill_names),
        knowledge_base_ids=tuple(agent.knowledge_base_ids),
        temperature=parameters.temperature if parameters.HasField("temperature") else None,
        max_tokens=parameters.max_tokens if parameters.HasField("max_tokens") else None,
        vision=VISION in agent.model_types,
    )


def _main_request(turn: TurnRuntime, purpose: str, messages: list[mpb.ChatMessage]) -> mpb.ChatStreamRequest:
    request = mpb.ChatStreamRequest(model_id=turn.agent.model_id, purpose=purpose, messages=messages)
    if turn.agent.temperature is not None:
        request.temperature = turn.agent.temperature
    if turn.agent.max_tokens is not None:
        request.max_tokens = turn.agent.max_tokens
    return request


@dataclass(frozen=True)
class Worker:
    """A supervisor's worker as its handoff tool shows it."""

    agent_id: str
    name: str
    description: str
    config: AgentConfig

    @property
    def tool_name(self) -> str:
        return HANDOFF_PREFIX + re.sub(r"[^a-zA-Z0-9_-]", "_", self.name)[:50]


HANDOFF_PREFIX = "transfer_to_"
HANDOFF_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": "what the agent should do, self-contained "
                "(it sees nothing else of the conversation)",
            }
        },
        "required": ["task"],
    },
    sort_keys=True,
)
Delegate = Callable[["Worker", str, str], Awaitable[tuple[str, list[dict[str, Any]]]]]


def _handoff_definitions(turn: TurnRuntime) -> list[mpb.ToolDefinition]:
    return [
        mpb.ToolDefinition(
            name=w.tool_name,
            description=f"Hand a task to {w.name}: {w.description}".strip(),
            parameters_json_schema=HANDOFF_SCHEMA,
        )
        for w in turn.workers
    ]


@dataclass(frozen=True)
class TurnLimits:
    keep_turns: int = 8
    """Finished turns sent verbatim to the model, at most."""
    slide_turns: int = 1
    """Turns the history window moves by once it is full (at most half of ``keep_turns``): the
    history's bytes, and the provider's cache of them, then last that many turns."""
    max_tool_rounds: int = 8
    extract_sentences: int = 5
    extract_chars: int = 1200
    extract_top_k: int = 5
    retrieve_top_k: int = 6
    """Route ``retrieve``: passages given to the answer."""
    compaction_trigger_share: float = 0.85
    """Compact the session when the previous request's prompt filled this share of the window."""


@dataclass
class TurnRuntime:
    """One turn's peers, options and event sink (not checkpointed)."""

    models: Models
    tools: Tools
    memory: Memory
    search: Search
    emit: Emit
    agent: AgentConfig
    limits: TurnLimits
    session_id: str
    knowledge_base_ids: tuple[str, ...]
    web_search: bool = False
    knowledge_graph: bool = False
    language: str = ""
    direct_retrieval: bool = False
    """A knowledge-base orchestrator's turn: questions that need the knowledge bases retrieve once and
    are answered from the passages (route ``retrieve``) instead of the tool loop."""
    briefing: str = ""
    """A collaboration's summary: the experts' answers (with their header), answered from directly."""
    briefing_sources: tuple[dict[str, Any], ...] = ()
    """The sources the experts' answers cite, numbered for the whole turn."""
    workers: tuple[Worker, ...] = ()
    """A supervisor's workers: each is a handoff tool of the agent (``transfer_to_<name>``)."""
    delegate: Delegate | None = None
    """Runs a worker on a task (the turn runner's): (worker, task, tool call id) → (answer, sources)."""
    max_hops: int = 0
    """Handoffs a supervisor may make in one turn."""
    sub_threads: list[str] = field(default_factory=list)
    """Checkpoint threads of this turn's experts or workers (deleted once it is answered)."""
    images: tuple[ImageRef, ...] = ()
    """This turn's images (not checkpointed: a redelivered turn brings them again)."""
    # What the turn found out while running (read by the runner for the final event).
    text: list[str] = field(default_factory=list)
    removed_citations: int = 0
    usage: dict[str, int] = field(default_factory=dict)


class TurnState(TypedDict, total=False):
    messages: Annotated[list[Message], operator.add]
    """Every message of the session (the checkpoint keeps them all)."""
    turn_id: str
    question: str
    rewritten: str
    intent: str
    route: str
    no_model: bool
    background: str
    handoff: str
    summary_upto: str
    summary_revision: int
    working: str
    last_prompt_tokens: int
    """Prompt tokens of the last main-model request (the compaction trigger)."""
    context_window: int
    """Context window of the chat model, as modelhub reported it."""
    sources: list[dict[str, Any]]
    """This turn's sources (Citation fields), in handle order."""
    tool_rounds: int
    answer_kind: str
    image_description: str
    passages: str
    """Route ``retrieve``: the passages found, numbered as the sources, for the answer's prompt."""


def _runtime(config: RunnableConfig) -> TurnRuntime:
    runtime: TurnRuntime = config["configurable"]["turn"]
    return runtime


def _new_id() -> str:
    return uuid.uuid4().hex


# --- nodes ------------------------------------------------------------------------------------------


async def prepare_context(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """This turn's question; the previous turn's intent, rewrite and sources are cleared (a
    collaboration's summary starts from the experts' answers and their sources)."""
    cleared = {
        "rewritten": "",
        "intent": "",
        "route": "",
        "sources": [],
        "tool_rounds": 0,
        "no_model": False,
        "answer_kind": AnswerKind.GENERATED.value,
        "image_description": "",
        "passages": "",
    }
    return cleared | await _briefed(state, config)


async def _briefed(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    turn = _runtime(config)
    if not turn.briefing:
        return {}
    return {"passages": turn.briefing, "sources": list(turn.briefing_sources)}


async def manage_memory(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """Applies the user's explicit "remember: …" statements, compacts the session when the previous
    request's prompt filled the window, and reads the handoff summary, working memory and the asker's
    background for this turn."""
    turn = _runtime(config)
    question = state["messages"][-1]
    statements = (
        turn.memory.apply_statements(state["question"], turn.session_id, question["id"])
        if MAY_BE_STATEMENT.search(state["question"])
        else _nothing()
    )
    background = turn.memory.background(turn.knowledge_base_ids, turn.language)
    if not turn.session_id or len(state["messages"]) == 1:
        # No session, or its first turn: there is no summary and no working memory to read yet.
        _, text = await asyncio.gather(statements, background)
        return {"background": text, "handoff": "", "summary_upto": "", "working": ""}
    _, text, summary, working = await asyncio.gather(
        statements,
        background,
        turn.memory.summary(turn.session_id),
        turn.memory.working_memory(turn.session_id),
    )
    window = state.get("context_window", 0)
    used = state.get("last_prompt_tokens", 0)
    if window and used >= turn.limits.compaction_trigger_share * window:
        pending = _after(state.get("messages", []), summary.upto_message_id)
        with tracer.start_as_current_span("conversation.compaction") as span:
            span.set_attribute(attributes.COMPACTION_TRIGGER_TOKENS, used)
            span.set_attribute(attributes.COMPACTION_CONTEXT_WINDOW, window)
            compacted = await turn.memory.compact(
                turn.session_id,
                pending,
                context_window=window,
                trigger_prompt_tokens=used,
                model_id=turn.agent.model_id,
                expected_revision=summary.revision,
            )
        if compacted is not None:
            summary = compacted
            await turn.emit(TurnEventKind.COMPACTED)
    return {
        "background": text,
        "handoff": summary.text,
        "summary_upto": summary.upto_message_id,
        "summary_revision": summary.revision,
        "working": working,
    }


MAY_BE_STATEMENT = re.compile(r"记|忘|remember|forget", re.IGNORECASE)
"""Words every memory statement contains (memory's parser decides what is one): a message without any
of them is not sent to memory, which saves a call on nearly every turn."""


async def _nothing() -> None:
    return None


def _after(messages: Sequence[Message], message_id: str) -> list[Message]:
    """The messages after ``message_id`` (all of them when it is empty or unknown)."""
    ids = [m["id"] for m in messages]
    return list(messages[ids.index(message_id) + 1 :]) if message_id in ids else list(messages)


async def query_understand(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """Rewrite (references and ellipsis only) and intent, each a short request of its own; the route
    follows by rule."""
    turn = _runtime(config)
    question = state["question"]
    history = _history(turn, state)
    no_model = False
    rewritten = question
    description = await _describe_images(turn) if turn.images else ""
    # Understanding only steers the turn: when the model cannot do it, the question goes on as asked
    # and the intent comes from the rules. Without any chat model the turn takes the extract path.
    if history:
        try:
            rewritten = (
                await _rewrite(turn, history, state.get("working", ""), question, state.get("background", ""))
                or question
            )
        except ServiceError as error:
            no_model = is_model_missing(error)
            log.warning("query rewrite failed; the question is used as asked", error=str(error))
    has_image = bool(turn.images)
    intent, method, probability = (
        rule_intent(question, has_image=has_image, has_history=bool(history)),
        "rule",
        1.0,
    )
    if not no_model:
        try:
            intent, method, probability = await _decide_intent(turn, history, rewritten)
        except ServiceError as error:
            no_model = is_model_missing(error)
            log.warning("intent decision failed; the rules decide", error=str(error))
    route = route_for(
        intent,
        knowledge_bases=bool(turn.knowledge_base_ids),
        web_search=turn.web_search,
        tool_names=turn.agent.tool_names,
    )
    if turn.direct_retrieval and route is TurnRoute.REACT:
        route = TurnRoute.RETRIEVE
    if turn.briefing:
        route = TurnRoute.GENERATE  # the experts did the reading; the summary answers from them
    elif turn.workers and intent not in SKIP_INTENTS:
        route = TurnRoute.REACT  # a supervisor hands questions to its workers
    elif turn.agent.workspace and intent not in SKIP_INTENTS and route is TurnRoute.GENERATE:
        route = TurnRoute.REACT  # a deep agent works through its tools
    span = trace.get_current_span()
    span.set_attribute(attributes.INTENT, intent.value)
    span.set_attribute(attributes.ROUTE, route.value)
    span.set_attribute(attributes.DECISION_METHOD, method)
    await turn.emit(
        TurnEventKind.INTENT,
        intent=intent.value,
        route=route.value,
        rewritten_query=rewritten if rewritten != question else None,
    )
    log.info("intent decided", intent=intent.value, route=route.value, method=method, probability=probability)
    return {
        "rewritten": rewritten,
        "intent": intent.value,
        "route": route.value,
        "no_model": no_model,
        "image_description": description,
    }


VISION_UNAVAILABLE = "vision_unavailable"


async def _describe_images(turn: TurnRuntime) -> str:
    """What the turn's images show, through modelhub's vision model (for retrieval and the context)."""
    descriptions = []
    for number, image in enumerate(turn.images, start=1):
        request = mpb.DescribeImageRequest(
            image=image.to_input(), language=turn.language, purpose=PURPOSE_IMAGE
        )
        try:
            response = await turn.models.describe(request)
        except ServiceError as error:
            if is_model_missing(error):
                raise TurnError(
                    VISION_UNAVAILABLE,
                    "This message has an image, but no vision model is configured. "
                    "Add a model of type VLM under Models to ask about images.",
                ) from error
            raise model_error(error) from error
        label = f"Image {number}: " if len(turn.images) > 1 else ""
        descriptions.append(label + response.description.strip())
    return "\n".join(descriptions)


async def _rewrite(
    turn: TurnRuntime, history: Sequence[Message], working: str, question: str, background: str
) -> str:
    # Working memory (the gist of recent questions and answers) is for query understanding only; the
    # last exchange is given verbatim, since references point at it most of the time.
    recent = "\n".join(f"{m['role']}: {m['content'][:500]}" for m in history[-2:])
    user = f"Recent questions and answers (gist):\n{working}\n\n" if working else ""
    user += f"Last exchange:\n{recent}\n\n"
    if background:
        user += f"{background}\n\n"  # memory's block, with its own header
    user += f"Latest question: {question}"
    request = mpb.ChatStreamRequest(
        model_id=turn.agent.model_id,
        purpose=PURPOSE_REWRITE,
        temperature=0.0,
        max_tokens=200,
        messages=[
            mpb.ChatMessage(
                role=ChatRole.SYSTEM.to_proto(), content=[mpb.ContentPart(text=prompts.REWRITE_SYSTEM)]
            ),
            mpb.ChatMessage(role=ChatRole.USER.to_proto(), content=[mpb.ContentPart(text=user)]),
        ],
    )
    parts = [e.text_delta.text async for e in turn.models.chat_stream(request) if e.HasField("text_delta")]
    return "".join(parts).strip().strip('"')


async def _decide_intent(
    turn: TurnRuntime, history: Sequence[Message], question: str
) -> tuple[Intent, str, float]:
    lines = [(m["role"], m["content"]) for m in history[-4:]]
    return await decide_intent(turn.models, turn.agent.model_id, lines, question, has_image=bool(turn.images))


async def decide_intent(
    models: Models,
    model_id: str,
    history: Sequence[tuple[str, str]],
    question: str,
    *,
    has_image: bool = False,
    has_document: bool = False,
) -> tuple[Intent, str, float]:
    """The intent of ``question`` (after ``history``, (role, text) pairs) by modelhub's Decide:
    (intent, method, probability). A short request of its own, never sharing the main prefix."""
    context = "\n".join(f"{role}: {text[:300]}" for role, text in history)
    attached = [n for n, on in (("an image", has_image), ("a file", has_document)) if on]
    text = (f"Recent conversation:\n{context}\n\n" if context else "") + f"Latest message: {question}"
    if attached:
        text += f"\n(The message has {' and '.join(attached)} attached.)"
    request = mpb.DecideRequest(
        model_id=model_id,
        purpose=PURPOSE_INTENT,
        prompt=prompts.INTENT_PROMPT,
        messages=[mpb.ChatMessage(role=ChatRole.USER.to_proto(), content=[mpb.ContentPart(text=text)])],
        labels=[mpb.DecisionLabel(name=code, description=desc) for code, desc in prompts.intent_labels()],
    )
    response = await models.decide(request)
    intent = BY_CODE.get(response.label, Intent.KB_SEARCH)
    method = "logprobs" if response.method == mpb.DECISION_METHOD_LOGPROBS else "json"
    return intent, method, response.probability


def _history(turn: TurnRuntime, state: TurnState) -> list[Message]:
    """The finished turns the model sees: after the handoff summary, within the history window."""
    return finished_turns(
        _after(state.get("messages", []), state.get("summary_upto", "")),
        state["turn_id"],
        turn.limits.keep_turns,
        turn.limits.slide_turns,
    )


def _switches(turn: TurnRuntime) -> tpb.TurnSwitches:
    return tpb.TurnSwitches(
        knowledge_base_ids=list(turn.knowledge_base_ids),
        web_search=turn.web_search,
        knowledge_graph=turn.knowledge_graph,
    )


def _prompt(turn: TurnRuntime, state: TurnState) -> list[mpb.ChatMessage]:
    messages = state.get("messages", [])
    this_turn = [m for m in messages if m["turn_id"] == state["turn_id"]]
    context = prompts.turn_context(
        rewritten=state.get("rewritten", "") if state.get("rewritten") != state["question"] else "",
        image_description=state.get("image_description", ""),
        skills=(),
        background=state.get("background", ""),
        passages=state.get("passages", ""),
    )
    request = build_request_messages(
        system=prompts.system_segment(turn.agent.identity, turn.agent.skills, workspace=turn.agent.workspace),
        task=prompts.task_segment(
            knowledge_bases=len(turn.knowledge_base_ids),
            web_search=turn.web_search,
            knowledge_graph=turn.knowledge_graph,
            language=turn.language,
        ),
        handoff=state.get("handoff", ""),
        history=_history(turn, state),
        context=context,
        turn=this_turn,
    )
    if turn.agent.vision and turn.images:
        # The question (first message of this turn) carries the images for a model that reads them.
        question = request[len(request) - len(this_turn)]
        question.content.extend(mpb.ContentPart(image=image.to_input()) for image in turn.images)
    return request


@dataclass(frozen=True)
class ModelReply:
    text: str
    calls: list[ToolCallRecord]
    prompt_tokens: int
    context_window: int

    def sizes(self) -> dict[str, int]:
        """The state's record of this request's size (the next turn's compaction trigger)."""
        known = {"last_prompt_tokens": self.prompt_tokens}
        return known | ({"context_window": self.context_window} if self.context_window else {})


async def _stream_model(
    turn: TurnRuntime, request: mpb.ChatStreamRequest, handles: Sequence[str]
) -> ModelReply:
    """Streams one model call's text to the client (citations checked) and gathers its tool calls."""
    citations = CitationFilter(handles)
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    prompt_tokens = context_window = 0

    async def show(piece: str) -> None:
        if piece:
            text.append(piece)
            turn.text.append(piece)
            await turn.emit(TurnEventKind.TEXT_DELTA, text=piece)

    try:
        async for event in turn.models.chat_stream(request):
            kind = event.WhichOneof("event")
            if kind == "text_delta":
                await show(citations.feed(event.text_delta.text))
            elif kind == "tool_call_delta":
                delta = event.tool_call_delta
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = call["id"] or delta.id
                call["name"] = call["name"] or delta.name
                call["arguments"] += delta.arguments_delta
            elif kind == "started":
                context_window = event.started.context_window
            elif kind == "usage":
                prompt_tokens = event.usage.prompt_tokens
                for key in ("prompt_tokens", "completion_tokens"):
                    turn.usage[key] = turn.usage.get(key, 0) + getattr(event.usage, key)
                if event.usage.HasField("cached_prompt_tokens"):
                    turn.usage["cached_prompt_tokens"] = (
                        turn.usage.get("cached_prompt_tokens", 0) + event.usage.cached_prompt_tokens
                    )
    except ServiceError as error:
        raise model_error(error) from error
    await show(citations.flush())
    turn.removed_citations += citations.removed
    records = [
        ToolCallRecord(
            id=c["id"] or f"call_{_new_id()[:12]}", name=c["name"], arguments=c["arguments"] or "{}"
        )
        for _, c in sorted(calls.items())
        if c["name"]
    ]
    return ModelReply("".join(text), records, prompt_tokens, context_window)


async def agent(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """One main-model request with the tools usable this turn; tool calls go to ``tools``."""
    turn = _runtime(config)
    listed = await _list_tools(turn)
    rounds = state.get("tool_rounds", 0)
    request = _main_request(turn, PURPOSE_AGENT, _prompt(turn, state))
    request.tools.extend(
        mpb.ToolDefinition(
            name=t.name, description=t.description, parameters_json_schema=t.parameters_json_schema
        )
        for t in listed.tools
    )
    request.tools.extend(_handoff_definitions(turn))
    if request.tools:
        mode = (
            mpb.TOOL_CHOICE_MODE_NONE if rounds >= turn.limits.max_tool_rounds else mpb.TOOL_CHOICE_MODE_AUTO
        )
        request.tool_choice.mode = mode
    handles = [s["handle"] for s in state.get("sources", [])]
    reply = await _stream_model(turn, request, handles)
    calls = reply.calls if rounds < turn.limits.max_tool_rounds else []
    if calls:
        message = Message(id=_new_id(), turn_id=state["turn_id"], role="assistant", content=reply.text)
        message["final"] = False
        message["tool_calls"] = calls
    else:
        message = answer_message(state, reply.text, state.get("sources", []))
    return {"messages": [message], "tool_rounds": rounds + (1 if calls else 0), **reply.sizes()}


async def _list_tools(turn: TurnRuntime) -> tpb.ListToolsResponse:
    tool_names = list(turn.agent.tool_names)
    if turn.agent.workspace and tool_names and PLAN_TOOL not in tool_names:
        tool_names.append(PLAN_TOOL)  # a deep agent plans whatever tools it was given
    return await turn.tools.list_tools(
        tpb.ListToolsRequest(
            switches=_switches(turn),
            tool_names=tool_names,
            skill_names=[s for s, _ in turn.agent.skills],
            workspace=turn.agent.workspace,
        )
    )


def _definitions(listed: tpb.ListToolsResponse) -> list[mpb.ToolDefinition]:
    return [
        mpb.ToolDefinition(
            name=t.name, description=t.description, parameters_json_schema=t.parameters_json_schema
        )
        for t in listed.tools
    ]


def after_agent(state: TurnState) -> str:
    last = state["messages"][-1]
    return "tools" if last.get("tool_calls") else END


TOOL_FAILURES = frozenset({tpb.TOOL_ERROR_CODE_FAILED, tpb.TOOL_ERROR_CODE_TIMED_OUT})
"""Tool errors that end the turn (the tool runner already retried); others go back to the model."""


async def tools(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """Runs the last message's tool calls through the tool runner, in order."""
    turn = _runtime(config)
    calls = state["messages"][-1].get("tool_calls", [])
    sources = list(state.get("sources", []))
    out: list[Message] = []
    workers = {w.tool_name: w for w in turn.workers}
    hops = sum(
        1
        for m in state["messages"]
        if m["turn_id"] == state["turn_id"] and m["role"] == "tool" and m.get("name", "") in workers
    )
    for call in calls:
        if call["name"] in workers:
            content = await _hand_off(turn, workers[call["name"]], call, sources, hops)
            hops += 1
            out.append(
                Message(
                    id=_new_id(),
                    turn_id=state["turn_id"],
                    role="tool",
                    content=content,
                    tool_call_id=call["id"],
                    name=call["name"],
                )
            )
            continue
        await turn.emit(TurnEventKind.TOOL_STARTED, tool_call_id=call["id"], tool_name=call["name"])
        started = time.monotonic()
        request = tpb.ExecuteToolRequest(
            name=call["name"],
            tool_call_id=call["id"],
            context=tpb.ToolContext(
                session_id=turn.session_id,
                turn_id=state["turn_id"],
                switches=_switches(turn),
                skill_names=[s for s, _ in turn.agent.skills],
                sources=[_to_source(s) for s in sources],
                language=turn.language,
                agent_id=turn.agent.agent_id,
                workspace=turn.agent.workspace,
            ),
        )
        try:
            arguments = json.loads(call["arguments"] or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
            request.arguments.update(arguments)
        except ValueError as error:
            content, ok, attempts = (
                f"error: the arguments are not a JSON object ({error}); call again",
                False,
                0,
            )
        else:
            try:
                response = await turn.tools.execute_tool(request)
            except ServiceError as error:
                await _tool_finished(turn, call, started, ok=False, attempts=0)
                raise TurnError(
                    "tool_unavailable", f"the tool {call['name']} could not run: {error.user_message}"
                ) from error
            if response.HasField("error") and response.error.code in TOOL_FAILURES:
                await _tool_finished(turn, call, started, ok=False, attempts=response.attempts)
                raise TurnError(
                    "tool_failed",
                    f"the tool {call['name']} failed after {response.attempts} attempt(s): "
                    f"{response.error.message}",
                )
            ok, attempts = not response.HasField("error"), response.attempts
            content = response.content
            known = {s["handle"] for s in sources}
            for source in response.sources:
                as_dict = state_source(source)
                if as_dict["handle"] and as_dict["handle"] not in known:
                    sources.append(as_dict)
                    known.add(as_dict["handle"])
        await _tool_finished(turn, call, started, ok=ok, attempts=attempts)
        out.append(
            Message(
                id=_new_id(),
                turn_id=state["turn_id"],
                role="tool",
                content=content,
                tool_call_id=call["id"],
                name=call["name"],
            )
        )
    return {"messages": out, "sources": sources}


HOP_LIMIT_REACHED = "The handoff limit of this turn is reached: answer the user now with what you have."


async def _hand_off(
    turn: TurnRuntime, worker: Worker, call: ToolCallRecord, sources: list[dict[str, Any]], hops: int
) -> str:
    """A supervisor's handoff: the worker does the task on a thread of its own; its answer is the tool
    result and its sources join this turn's, numbered after them (``sources`` is extended)."""
    if hops >= turn.max_hops or turn.delegate is None:
        return HOP_LIMIT_REACHED
    try:
        task = str(json.loads(call["arguments"] or "{}").get("task", "")).strip()
    except (ValueError, AttributeError):
        task = ""
    if not task:
        return 'error: give the worker a "task": what it should do, self-contained; call again'
    supervisor = turn.agent.agent_id
    await turn.emit(
        TurnEventKind.HANDOFF,
        from_agent_id=supervisor,
        to_agent_id=worker.agent_id,
        reason=task[:500],
        tool_call_id=call["id"],
    )
    try:
        answer, found = await turn.delegate(worker, task, call["id"])
    except TurnError as error:
        answer, found = f"error: {worker.name} could not answer: {error.message}", []
    renamed = {}
    for source in found:
        handle = f"c{len(sources) + 1}"
        renamed[source["handle"]] = handle
        sources.append({**source, "handle": handle})
    await turn.emit(
        TurnEventKind.HANDOFF,
        from_agent_id=worker.agent_id,
        to_agent_id=supervisor,
        reason="answered",
        tool_call_id=call["id"],
    )
    return renumber_citations(answer, renamed)


async def _tool_finished(
    turn: TurnRuntime, call: ToolCallRecord, started: float, *, ok: bool, attempts: int
) -> None:
    await turn.emit(
        TurnEventKind.TOOL_FINISHED,
        tool_call_id=call["id"],
        tool_name=call["name"],
        tool_ok=ok,
        attempts=attempts,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _to_source(source: dict[str, Any]) -> tpb.Source:
    label = source["handle"]
    return tpb.Source(
        label=label,
        index=int(label[1:]) if label[1:].isdigit() else 0,
        handle=source.get(RETRIEVAL_HANDLE, ""),
        chunk_id=source.get("chunk_id", ""),
        document_id=source.get("document_id", ""),
        file_name=source.get("file_name", ""),
        knowledge_base_id=source.get("knowledge_base_id", ""),
        url=source.get("url", ""),
        title=source.get("title", ""),
        snippet=source.get("snippet", ""),
        kind=tpb.SOURCE_KIND_WEB if source.get("url") else tpb.SOURCE_KIND_CHUNK,
    )


def state_source(source: tpb.Source) -> dict[str, Any]:
    """A source as the state keeps it: the Citation fields (``handle`` is the cN label the model
    cites) plus the retrieval handle the tool runner resolves it with."""
    fields = json_format.MessageToDict(source, preserving_proto_field_name=True)
    citation = {k: v for k, v in fields.items() if k in CITATION_FIELDS and k != "handle"}
    citation["handle"] = source.label or (f"c{source.index}" if source.index else "")
    return {**Citation(**citation).model_dump(), RETRIEVAL_HANDLE: source.handle}


def answer_message(state: TurnState, text: str, sources: Sequence[dict[str, Any]]) -> Message:
    """A turn's answer as the checkpoint keeps it, with the sources its text cites: the session's
    history shows them after the turn's events are gone."""
    message = Message(id=_new_id(), turn_id=state["turn_id"], role="assistant", content=text, final=True)
    used = cited_handles(text)
    cited = [citation(s).model_dump() for s in sources if s.get("handle") in used]
    if cited:
        message["citations"] = cited
    return message


def citation(source: dict[str, Any]) -> Citation:
    """The Citation of a source kept in the state."""
    return Citation(**{k: v for k, v in source.items() if k in CITATION_FIELDS})


async def collect_sources(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """This turn's sources (only this turn's tool messages count) announced to the client."""
    turn = _runtime(config)
    sources = state.get("sources", [])
    if sources:
        await turn.emit(TurnEventKind.SOURCES, citations=[citation(s) for s in sources])
    return {}


async def generate(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """One answer without tools (greetings, chitchat, questions with nothing to search)."""
    turn = _runtime(config)
    if state.get("no_model"):
        greeting = state.get("intent") == Intent.GREETING.value
        return await _fixed_answer(
            turn, state, prompts.NO_MODEL_GREETING if greeting else prompts.NO_MODEL_NO_KB
        )
    request = _main_request(turn, PURPOSE_GENERATE, _prompt(turn, state))
    # The same tool schemas as the agent's requests, with tool calls switched off: they are part of the
    # prompt prefix, so a turn answered without tools keeps the provider's cache warm for the next.
    try:
        request.tools.extend(_definitions(await _list_tools(turn)))
    except ServiceError as error:
        log.warning("tool schemas unavailable; answering without them", error=str(error))
    request.tools.extend(_handoff_definitions(turn))
    if request.tools:
        request.tool_choice.mode = mpb.TOOL_CHOICE_MODE_NONE
    # Route retrieve (and a collaboration's summary): this turn's sources, cited as [[cN]].
    reply = await _stream_model(turn, request, [s["handle"] for s in state.get("sources", [])])
    message = answer_message(state, reply.text, state.get("sources", []))
    return {"messages": [message], **reply.sizes()}


async def _fixed_answer(turn: TurnRuntime, state: TurnState, texts: dict[str, str]) -> dict[str, Any]:
    text = texts[prompts.reply_language(turn.language, state["question"])]
    turn.text.append(text)
    await turn.emit(TurnEventKind.TEXT_DELTA, text=text)
    message = Message(id=_new_id(), turn_id=state["turn_id"], role="assistant", content=text, final=True)
    return {"messages": [message], "answer_kind": AnswerKind.FIXED.value}


async def _search_sources(
    turn: TurnRuntime, state: TurnState, top_k: int
) -> tuple[list[rpb.SearchResult], list[dict[str, Any]]]:
    """The top passages for this turn's (rewritten) question, and the sources numbering them c1, c2 …"""
    results = list(await turn.search(state.get("rewritten") or state["question"], turn.knowledge_base_ids))
    results = results[:top_k]
    sources = [
        Citation(
            handle=f"c{n}",
            chunk_id=r.chunk_id,
            document_id=r.document_id,
            file_name=r.file_name,
            knowledge_base_id=r.knowledge_base_id,
            page=max(r.page, 0),
            heading_path=list(r.heading_path),
            snippet=r.text[:300],
        ).model_dump()
        | {RETRIEVAL_HANDLE: r.handle}
        for n, r in enumerate(results, start=1)
    ]
    return results, sources


async def retrieve(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """Route ``retrieve``: one search of the turn's knowledge bases; the passages become this turn's
    sources and the answer's context (no tool loop)."""
    turn = _runtime(config)
    results, sources = await _search_sources(turn, state, turn.limits.retrieve_top_k)
    if sources:
        await turn.emit(TurnEventKind.SOURCES, citations=[citation(s) for s in sources])
    passages = prompts.numbered_passages(
        [
            (s["handle"], s["file_name"], s["page"], s["heading_path"], r.text)
            for s, r in zip(sources, results, strict=True)
        ]
    )
    return {"sources": sources, "passages": passages}


async def extract(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
    """Without a chat model: the most relevant sentences of the top passages, each cited."""
    turn = _runtime(config)
    if not turn.knowledge_base_ids:
        return await _fixed_answer(turn, state, prompts.NO_MODEL_NO_KB)
    results, sources = await _search_sources(turn, state, turn.limits.extract_top_k)
    language = prompts.reply_language(turn.language, state["question"])
    body = extract_answer(
        state["question"],
        [Passage(s["handle"], r.text) for s, r in zip(sources, results, strict=True)],
        max_sentences=turn.limits.extract_sentences,
        max_chars=turn.limits.extract_chars,
    )
    if not body:
        return await _fixed_answer(turn, state, prompts.NOTHING_FOUND) | {"sources": []}
    if sources:
        await turn.emit(TurnEventKind.SOURCES, citations=[citation(s) for s in sources])
    text = f"{prompts.ADD_MODEL_HINT[language]}\n\n{body}"
    turn.text.append(text)
    await turn.emit(TurnEventKind.TEXT_DELTA, text=text)
    message = answer_message(state, text, sources)
    return {"messages": [message], "sources": sources, "answer_kind": AnswerKind.EXTRACTED.value}


def after_understanding(state: TurnState) -> str:
    route = state.get("route")
    if state.get("no_model") and route in (TurnRoute.REACT.value, TurnRoute.RETRIEVE.value):
        return "extract"
    if route == TurnRoute.RETRIEVE.value:
        return "retrieve"
    return "agent" if route == TurnRoute.REACT.value else "generate"


Node = Callable[[TurnState, RunnableConfig], Awaitable[dict[str, Any]]]
NODES: dict[str, Node] = {
    "prepare_context": prepare_context,
    "manage_memory": manage_memory,
    "query_understand": query_understand,
    "generate": generate,
    "extract": extract,
    "retrieve": retrieve,
    "agent": agent,
    "tools": tools,
    "collect_sources": collect_sources,
}


def traced(name: str, node: Node) -> Node:
    """``node`` inside a span of its own (``conversation.<name>``), a child of the turn's span."""

    async def run(state: TurnState, config: RunnableConfig) -> dict[str, Any]:
        with tracer.start_as_current_span(f"conversation.{name}") as span:
            span.set_attribute(attributes.TURN_ID, state.get("turn_id", ""))
            return await node(state, config)

    run.__name__ = name
    return run


def build_graph(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled graph; one per process, shared by every turn (agents differ by runtime config)."""
    graph = StateGraph(TurnState)
    for name, node in NODES.items():
        graph.add_node(name, traced(name, node))  # type: ignore[call-overload]  # a typed wrapper of a node
    graph.add_edge(START, "prepare_context")
    graph.add_edge("prepare_context", "manage_memory")
    graph.add_edge("manage_memory", "query_understand")
    graph.add_conditional_edges(
        "query_understand", after_understanding, ["agent", "generate", "extract", "retrieve"]
    )
    graph.add_edge("retrieve", "generate")
    graph.add_edge("generate", END)
    graph.add_edge("extract", END)
    graph.add_conditional_edges("agent", after_agent, ["tools", END])
    graph.add_edge("tools", "collect_sources")
    graph.add_edge("collect_sources", "agent")
    return graph.compile(checkpointer=checkpointer)


__all__ = [
    "AgentConfig",
    "Memory",
    "Models",
    "Tools",
    "TurnError",
    "TurnLimits",
    "TurnRuntime",
    "TurnState",
    "build_graph",
]
