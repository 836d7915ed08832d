"""Orchestrators as data: each mode's configuration, checked when saved, and the choices a turn makes
from it.

An orchestrator names how agents combine to answer (the contract's ``OrchestrationMode``); its
``config`` is a JSON object whose shape depends on the mode. :func:`parse_config` turns it into a
typed configuration or raises :class:`ConfigError` naming the field (``config.routes[1].agent_id``)
and what is wrong with it; :func:`member_agent_ids` lists the agents it runs, which must exist and be
active when saved (the servicer checks) and cannot be deleted while it lists them.

The modes and their configuration:

- ``single``: ``{"agent_id"}`` — one agent answers.
- ``supervisor``: ``{"supervisor_agent_id", "worker_agent_ids": [...], "enable_summarization",
  "max_hops"}`` — the supervisor hands the question to workers; at most ``max_hops`` handoffs.
- ``collaboration``: ``{"agent_ids": [...], "collaboration_strategy": "sequential" | "parallel",
  "summary_agent_id"}`` — experts answer in turn (each sees the earlier answers) or all at once, then
  a summary.
- ``workflow``: a graph of steps (:mod:`~knowsphere_conversation.domain.workflow`).
- ``conditional``: ``{"routes": [{"condition": {...}, "agent_id"}], "default_agent_id"}`` — the first
  route whose condition holds picks the agent; conditions are ``{"keywords": [...]}`` (any of them, case
  folded), ``{"regex": "..."}`` or ``{"intents": [...]}`` (the question's intent, as query understanding
  decides it).
- ``deep_agent``: ``{"agent_id", "backend": "sandbox"}`` — the agent works as a deep agent: it plans
  (write_plan), keeps notes and drafts in the session's file workspace (the tool runner's workspace
  tools) and runs its skills' scripts in the tool runner's sandbox, which see that workspace. Single
  mode (and a session bound to an agent) does the same for an agent with skills.
- ``knowledge_base``: ``{"knowledge_base_ids": [...], "agent_id", "knowledge_graph"}`` — retrieve once
  and answer from the passages with citations (no tool loop); the agent (optional) gives the model and
  the prompt.
- ``external``: ``{"provider": "dify" | "n8n" | "a2a", "base_url", "api_key", "auth_header",
  "timeout_seconds"}`` — another application answers: a Dify chat app (its chat-messages API; the key is
  required), an n8n workflow (``base_url`` is its webhook; the key, when given, is sent as the value of
  the ``auth_header`` header, ``Authorization`` by default) or any A2A agent (``base_url`` serves its
  agent card; the key, when given, is sent as a bearer token). The key is write-only: the servicer takes
  it out of the configuration, keeps it encrypted on its own and shows ``api_key_hint`` (masked)
  instead; :mod:`~knowsphere_conversation.domain.external` says how a turn reaches the peer.

A mode in the contract without a parser here is refused with :class:`NotBuilt` (UNIMPLEMENTED).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowsphere.conversation.v1.conversation_enums import Intent
from knowsphere.conversation.v1.conversation_enums import OrchestrationMode as Mode
from knowsphere_contracts.agents import MAX_ID_CHARS
from knowsphere_contracts.events import MAX_KNOWLEDGE_BASES_PER_TURN
from knowsphere_egress import EgressError, check_base_url_form

MAX_WORKERS = 16
MAX_EXPERTS = 8
MAX_ROUTES = 32
MAX_KEYWORDS = 64
MAX_KEYWORD_CHARS = 100
MAX_REGEX_CHARS = 500
DEFAULT_MAX_HOPS = 6
MAX_HOPS = 20
EXTERNAL_PROVIDERS = ("dify", "n8n", "a2a")
MAX_BASE_URL_CHARS = 2048
MAX_API_KEY_CHARS = 4096
DEFAULT_AUTH_HEADER = "Authorization"
MAX_HEADER_NAME_CHARS = 100
DEFAULT_EXTERNAL_TIMEOUT_SECONDS = 60.0
MIN_EXTERNAL_TIMEOUT_SECONDS = 1.0
MAX_EXTERNAL_TIMEOUT_SECONDS = 600.0
API_KEY = "api_key"
API_KEY_HINT = "api_key_hint"
# An HTTP field name (RFC 9110 token); the ones that frame the request are the client's to set.
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "accept-encoding", "te"}
)


RUNNABLE_MODES = frozenset(
    {
        Mode.SINGLE,
        Mode.CONDITIONAL,
        Mode.KNOWLEDGE_BASE,
        Mode.COLLABORATION,
        Mode.SUPERVISOR,
        Mode.WORKFLOW,
        Mode.EXTERNAL,
        Mode.DEEP_AGENT,
    }
)
"""Modes a turn can run today; a session on another mode ends its turns with :data:`MODE_UNAVAILABLE`."""
MODE_UNAVAILABLE = "orchestration_mode_unavailable"


class ConfigError(ValueError):
    """A configuration that cannot be saved: ``field`` is its path (``config.routes[0].agent_id``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotBuilt(Exception):
    """The mode exists in the contract but cannot be configured yet."""


@dataclass(frozen=True)
class SingleConfig:
    agent_id: str


@dataclass(frozen=True)
class SupervisorConfig:
    supervisor_agent_id: str
    worker_agent_ids: tuple[str, ...]
    enable_summarization: bool = False
    max_hops: int = DEFAULT_MAX_HOPS


@dataclass(frozen=True)
class CollaborationConfig:
    agent_ids: tuple[str, ...]
    strategy: str = "sequential"
    summary_agent_id: str = ""


@dataclass(frozen=True)
class Condition:
    keywords: tuple[str, ...] = ()
    regex: str = ""
    intents: tuple[Intent, ...] = ()

    def needs_intent(self) -> bool:
        return bool(self.intents)

    def holds(self, question: str, intent: Intent | None) -> bool:
        folded = question.casefold()
        if self.keywords:
            return any(k.casefold() in folded for k in self.keywords)
        if self.regex:
            return re.search(self.regex, question) is not None
        return intent is not None and intent in self.intents


@dataclass(frozen=True)
class Route:
    condition: Condition
    agent_id: str


@dataclass(frozen=True)
class ConditionalConfig:
    routes: tuple[Route, ...]
    default_agent_id: str


@dataclass(frozen=True)
class DeepAgentConfig:
    agent_id: str
    backend: str = "sandbox"


@dataclass(frozen=True)
class KnowledgeBaseConfig:
    knowledge_base_ids: tuple[str, ...]
    agent_id: str = ""
    knowledge_graph: bool = False


@dataclass(frozen=True)
class WorkflowConfig:
    workflow: Any
    """The parsed :class:`~knowsphere_conversation.domain.workflow.Workflow`."""


@dataclass(frozen=True)
class ExternalConfig:
    provider: str
    base_url: str
    """Without a trailing slash: Dify's API root (``…/v1``), n8n's webhook URL or the A2A agent's URL."""
    auth_header: str = ""
    """n8n: the header the key is sent in (``Authorization`` unless named)."""
    timeout_seconds: float = DEFAULT_EXTERNAL_TIMEOUT_SECONDS
    """How long the peer may stay silent: connecting, before its first piece and between pieces."""
    api_key: str | None = field(default=None, repr=False)
    """Only while a configuration is saved: None when not given (the stored key stays), "" to remove it.
    Never stored in the configuration."""
    api_key_hint: str = ""
    """The stored key, masked (set by the servicer)."""


ModeConfig = (
    SingleConfig
    | SupervisorConfig
    | CollaborationConfig
    | ConditionalConfig
    | DeepAgentConfig
    | KnowledgeBaseConfig
    | WorkflowConfig
    | ExternalConfig
)


# --- reading JSON -----------------------------------------------------------------------------------


def _keys(value: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, "must be an object")
    for key in sorted(value):  # the same key named first however the client ordered its map
        if key not in allowed:
            raise ConfigError(f"{path}.{key}", f"unknown key; expected one of {', '.join(allowed)}")
    for key in required:
        if key not in value:
            raise ConfigError(f"{path}.{key}", "required")
    return value


def _id(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, "must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise ConfigError(path, f"{len(value)} characters; the limit is {MAX_ID_CHARS}")
    return value


def _ids(value: Any, path: str, *, least: int, most: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list")
    if not least <= len(value) <= most:
        raise ConfigError(path, f"{len(value)} items; between {least} and {most} are allowed")
    ids = tuple(_id(v, f"{path}[{n}]") for n, v in enumerate(value))
    for n, item in enumerate(ids):
        if item in ids[:n]:
            raise ConfigError(f"{path}[{n}]", f"{item!r} is listed twice")
    return ids


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, "must be true or false")
    return value


def _int(value: Any, path: str, least: int, most: int) -> int:
    # JSON numbers arrive as floats through a protobuf Struct.
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ConfigError(path, "must be a whole number")
    if not least <= value <= most:
        raise ConfigError(path, f"{int(value)} is out of range; between {least} and {most}")
    return int(value)


def _condition(value: Any, path: str) -> Condition:
    given = _keys(value, path, ("keywords", "regex", "intents"))
    if len(given) != 1:
        raise ConfigError(path, "needs exactly one of keywords, regex or intents")
    if "keywords" in given:
        words = given["keywords"]
        if not isinstance(words, list) or not 1 <= len(words) <= MAX_KEYWORDS:
            raise ConfigError(f"{path}.keywords", f"must be a list of 1 to {MAX_KEYWORDS} words")
        for n, word in enumerate(words):
            if not isinstance(word, str) or not word.strip() or len(word) > MAX_KEYWORD_CHARS:
                raise ConfigError(f"{path}.keywords[{n}]", f"must be 1-{MAX_KEYWORD_CHARS} characters")
        return Condition(keywords=tuple(w.strip() for w in words))
    if "regex" in given:
        pattern = given["regex"]
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_REGEX_CHARS:
            raise ConfigError(f"{path}.regex", f"must be 1-{MAX_REGEX_CHARS} characters")
        try:
            re.compile(pattern)
        except re.error as error:
            raise ConfigError(f"{path}.regex", f"not a regular expression: {error}") from error
        return Condition(regex=pattern)
    names = given["intents"]
    known = [i.value for i in Intent]
    if not isinstance(names, list) or not names:
        raise ConfigError(f"{path}.intents", "must be a non-empty list")
    intents = []
    for n, name in enumerate(names):
        if name not in known:
            raise ConfigError(f"{path}.intents[{n}]", f"unknown intent {name!r}; one of {', '.join(known)}")
        intents.append(Intent(name))
    return Condition(intents=tuple(intents))


def _seconds(value: Any, path: str, least: float, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(path, "must be a number of seconds")
    if not least <= value <= most:
        raise ConfigError(path, f"{value:g} is out of range; between {least:g} and {most:g} seconds")
    return float(value)


def _external(config: Mapping[str, Any]) -> ExternalConfig:
    given = _keys(
        config,
        "config",
        ("provider", "base_url", API_KEY, API_KEY_HINT, "auth_header", "timeout_seconds"),
        ("provider", "base_url"),
    )
    provider = given["provider"]
    if provider not in EXTERNAL_PROVIDERS:
        raise ConfigError("config.provider", f"must be one of {', '.join(EXTERNAL_PROVIDERS)}")
    url = given["base_url"]
    if not isinstance(url, str) or not url or len(url) > MAX_BASE_URL_CHARS:
        raise ConfigError("config.base_url", f"must be a URL of 1-{MAX_BASE_URL_CHARS} characters")
    try:
        check_base_url_form(url)
    except EgressError as error:
        # The value is not echoed: it may carry credentials.
        raise ConfigError(
            "config.base_url",
            "must be an http:// or https:// URL with a host and without credentials, query, fragment "
            "or spaces",
        ) from error
    key = given.get(API_KEY)
    if key is not None:
        if not isinstance(key, str) or len(key) > MAX_API_KEY_CHARS:
            raise ConfigError("config.api_key", f"must be a string of at most {MAX_API_KEY_CHARS} characters")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in key) or key != key.strip():
            # It goes into an HTTP header as it is.
            raise ConfigError("config.api_key", "must not contain control characters or surrounding spaces")
    header = given.get("auth_header", "")
    if header:
        if provider != "n8n":
            raise ConfigError(
                "config.auth_header", "only an n8n webhook takes its key in a header of its choice"
            )
        if (
            not isinstance(header, str)
            or len(header) > MAX_HEADER_NAME_CHARS
            or not _HEADER_NAME.fullmatch(header)
            or header.lower() in _RESERVED_HEADERS
        ):
            raise ConfigError(
                "config.auth_header",
                f"must be an HTTP header name of 1-{MAX_HEADER_NAME_CHARS} characters "
                "(letters, digits and !#$%&'*+.^_`|~-), not one that frames the request",
            )
    hint = given.get(API_KEY_HINT, "")
    return ExternalConfig(
        provider=provider,
        base_url=url.rstrip("/"),
        auth_header=header or (DEFAULT_AUTH_HEADER if provider == "n8n" else ""),
        timeout_seconds=_seconds(
            given.get("timeout_seconds", DEFAULT_EXTERNAL_TIMEOUT_SECONDS),
            "config.timeout_seconds",
            MIN_EXTERNAL_TIMEOUT_SECONDS,
            MAX_EXTERNAL_TIMEOUT_SECONDS,
        ),
        api_key=key,
        api_key_hint=hint if isinstance(hint, str) else "",
    )


def parse_config(mode: Mode, config: Mapping[str, Any]) -> ModeConfig:
    """The typed configuration of ``mode``; :class:`ConfigError` names the first thing wrong, and
    :class:`NotBuilt` refuses a mode that cannot be configured yet."""
    path = "config"
    if mode is Mode.SINGLE:
        given = _keys(config, path, ("agent_id",), ("agent_id",))
        return SingleConfig(_id(given["agent_id"], "config.agent_id"))
    if mode is Mode.SUPERVISOR:
        given = _keys(
            config,
            path,
            ("supervisor_agent_id", "worker_agent_ids", "enable_summarization", "max_hops"),
            ("supervisor_agent_id", "worker_agent_ids"),
        )
        supervisor = _id(given["supervisor_agent_id"], "config.supervisor_agent_id")
        workers = _ids(given["worker_agent_ids"], "config.worker_agent_ids", least=1, most=MAX_WORKERS)
        if supervisor in workers:
            raise ConfigError("config.worker_agent_ids", "the supervisor cannot be one of its workers")
        return SupervisorConfig(
            supervisor,
            workers,
            _bool(given.get("enable_summarization", False), "config.enable_summarization"),
            _int(given.get("max_hops", DEFAULT_MAX_HOPS), "config.max_hops", 1, MAX_HOPS),
        )
    if mode is Mode.COLLABORATION:
        given = _keys(
            config, path, ("agent_ids", "collaboration_strategy", "summary_agent_id"), ("agent_ids",)
        )
        strategy = given.get("collaboration_strategy", "sequential")
        if strategy not in ("sequential", "parallel"):
            raise ConfigError("config.collaboration_strategy", "must be 'sequential' or 'parallel'")
        summary = given.get("summary_agent_id", "")
        return CollaborationConfig(
            _ids(given["agent_ids"], "config.agent_ids", least=2, most=MAX_EXPERTS),
            strategy,
            _id(summary, "config.summary_agent_id") if summary else "",
        )
    if mode is Mode.CONDITIONAL:
        given = _keys(config, path, ("routes", "default_agent_id"), ("routes", "default_agent_id"))
        routes = given["routes"]
        if not isinstance(routes, list) or not 1 <= len(routes) <= MAX_ROUTES:
            raise ConfigError("config.routes", f"must be a list of 1 to {MAX_ROUTES} routes")
        parsed = []
        for n, route in enumerate(routes):
            where = f"config.routes[{n}]"
            item = _keys(route, where, ("condition", "agent_id"), ("condition", "agent_id"))
            parsed.append(
                Route(
                    _condition(item["condition"], f"{where}.condition"),
                    _id(item["agent_id"], f"{where}.agent_id"),
                )
            )
        return ConditionalConfig(tuple(parsed), _id(given["default_agent_id"], "config.default_agent_id"))
    if mode is Mode.DEEP_AGENT:
        given = _keys(config, path, ("agent_id", "backend"), ("agent_id",))
        backend = given.get("backend", "sandbox")
        if backend != "sandbox":
            raise ConfigError(
                "config.backend", "must be 'sandbox' (skill scripts run in the tool runner's sandbox)"
            )
        return DeepAgentConfig(_id(given["agent_id"], "config.agent_id"), backend)
    if mode is Mode.KNOWLEDGE_BASE:
        given = _keys(
            config, path, ("knowledge_base_ids", "agent_id", "knowledge_graph"), ("knowledge_base_ids",)
        )
        agent = given.get("agent_id", "")
        return KnowledgeBaseConfig(
            _ids(
                given["knowledge_base_ids"],
                "config.knowledge_base_ids",
                least=1,
                most=MAX_KNOWLEDGE_BASES_PER_TURN,
            ),
            _id(agent, "config.agent_id") if agent else "",
            _bool(given.get("knowledge_graph", False), "config.knowledge_graph"),
        )
    if mode is Mode.WORKFLOW:
        from knowsphere_conversation.domain.workflow import WorkflowError, parse_workflow

        try:
            return WorkflowConfig(parse_workflow(config))
        except WorkflowError as error:
            raise ConfigError(error.field, error.reason) from error
    if mode is Mode.EXTERNAL:
        return _external(config)
    raise NotBuilt(f"the {mode.value} mode cannot be configured yet: it is not built")


def member_agent_ids(parsed: ModeConfig) -> list[str]:
    """Every agent the configuration runs, in order of first mention, once each (with the config path
    that names it, for errors)."""
    return [agent_id for agent_id, _ in agent_references(parsed)]


def agent_references(parsed: ModeConfig) -> list[tuple[str, str]]:
    """(agent id, config path) for every agent the configuration names, first mention only."""
    found: list[tuple[str, str]] = []

    def add(agent_id: str, path: str) -> None:
        if agent_id and agent_id not in (a for a, _ in found):
            found.append((agent_id, path))

    if isinstance(parsed, SingleConfig | DeepAgentConfig):
        add(parsed.agent_id, "config.agent_id")
    elif isinstance(parsed, SupervisorConfig):
        add(parsed.supervisor_agent_id, "config.supervisor_agent_id")
        for n, worker in enumerate(parsed.worker_agent_ids):
            add(worker, f"config.worker_agent_ids[{n}]")
    elif isinstance(parsed, CollaborationConfig):
        for n, expert in enumerate(parsed.agent_ids):
            add(expert, f"config.agent_ids[{n}]")
        add(parsed.summary_agent_id, "config.summary_agent_id")
    elif isinstance(parsed, ConditionalConfig):
        for n, route in enumerate(parsed.routes):
            add(route.agent_id, f"config.routes[{n}].agent_id")
        add(parsed.default_agent_id, "config.default_agent_id")
    elif isinstance(parsed, KnowledgeBaseConfig):
        add(parsed.agent_id, "config.agent_id")
    elif isinstance(parsed, WorkflowConfig):
        for n, step in enumerate(parsed.workflow.steps):
            add(step.agent_id, f"config.steps[{n}].agent_id")
    return found


async def choose_route(
    config: ConditionalConfig, question: str, intent: Callable[[], Any]
) -> tuple[str, str]:
    """(agent id, reason) of the first route whose condition holds, else the default. ``intent`` is
    awaited (once) only when a route asks for the question's intent."""
    decided: Intent | None = None
    asked = False
    for n, route in enumerate(config.routes):
        if route.condition.needs_intent() and not asked:
            decided, asked = await intent(), True
        if route.condition.holds(question, decided):
            return route.agent_id, f"route {n + 1} matched"
    return config.default_agent_id, "no route matched; the default agent answers"


__all__ = [
    "API_KEY",
    "API_KEY_HINT",
    "EXTERNAL_PROVIDERS",
    "MODE_UNAVAILABLE",
    "RUNNABLE_MODES",
    "CollaborationConfig",
    "ConditionalConfig",
    "ConfigError",
    "DeepAgentConfig",
    "ExternalConfig",
    "KnowledgeBaseConfig",
    "Mode",
    "ModeConfig",
    "NotBuilt",
    "SingleConfig",
    "SupervisorConfig",
    "WorkflowConfig",
    "agent_references",
    "choose_route",
    "member_agent_ids",
    "parse_config",
]
