"""The gRPC face of the conversation service.

Sessions (CreateSession … DeleteSession), their history (ListMessages, read from the checkpoint) and
CancelTurn are served here, and the tenant's agents and orchestrators; chat turns arrive on the bus
(``api/bus.py``). The streaming Chat RPC is not built and answers UNIMPLEMENTED naming the capability.
Another caller's session (another tenant's agent or orchestrator) is NOT_FOUND, never "forbidden".

An external orchestrator's ``config.api_key`` is write-only: it is sealed with the key ring and kept
apart from the record (FAILED_PRECONDITION naming MASTER_KEY when the service has none); what is read
back is ``config.api_key_hint``, the key masked. An update without ``api_key`` keeps the stored key
(unless it points the orchestrator at another provider or base URL: the key is asked for again), an
empty ``api_key`` removes it. Its ``base_url`` must pass the egress policy when saved (a name is
resolved and checked now, and again at every call).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import grpc
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.modelhub.v1.modelhub_enums import ModelType
from knowsphere_clients.errors import NotFound
from knowsphere_contracts.agents import (
    AGENT_MODEL_TYPES,
    LLM,
    MAX_CONFIG_BYTES,
    MAX_DESCRIPTION_CHARS,
    MAX_DISPLAY_NAME_CHARS,
    MAX_ID_CHARS,
    MAX_MEMBER_AGENTS,
    MAX_SKILLS,
    MAX_SYSTEM_PROMPT_CHARS,
    MAX_TOOLS,
    NAME_PATTERN,
    NAME_RULE,
    VISION,
)
from knowsphere_contracts.events import MAX_KNOWLEDGE_BASES_PER_TURN, MAX_SESSION_ID_CHARS
from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation.domain.external import (
    MASTER_KEY_MISSING,
    KeyUnavailable,
    OrchestratorKeys,
    SecretChanges,
    peer_of,
)
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.orchestrators import (
    API_KEY,
    API_KEY_HINT,
    ConfigError,
    ExternalConfig,
    Mode,
    ModeConfig,
    NotBuilt,
    agent_references,
    parse_config,
)
from knowsphere_conversation.domain.sessions import SessionRecord, SessionStore, thread_id
from knowsphere_egress import EgressError, EgressErrorCode, EgressPolicy, Resolver, validate_base_url
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid, not_found, precondition
from knowsphere_runtime.secrets import mask
from knowsphere_sqlstore import decode_page_token, encode_page_token

PENDING_CAPABILITY = "the streaming Chat RPC (chat turns go through the bus)"
AGENT_NAME = re.compile(NAME_PATTERN)
MAX_AGENT_TEXT_CHARS = {
    "display_name": MAX_DISPLAY_NAME_CHARS,
    "description": MAX_DESCRIPTION_CHARS,
    "system_prompt": MAX_SYSTEM_PROMPT_CHARS,
    "model_id": MAX_ID_CHARS,
}
MAX_AGENT_LIST_ITEMS = {
    "tool_names": MAX_TOOLS,
    "knowledge_base_ids": MAX_KNOWLEDGE_BASES_PER_TURN,
    "skill_names": MAX_SKILLS,
}
MAX_TITLE_CHARS = 200
MAX_METADATA_ENTRIES = 32
RESOLVE_SECONDS = 5.0
"""How long saving an external orchestrator waits for its base_url's name to resolve (else it is checked
at the first call, as it is at every call)."""

History = Callable[[str], Awaitable[Sequence[Message]]]
"""Every message of a checkpoint thread, oldest first."""
Cancel = Callable[[str], Awaitable[bool]]
"""Asks every replica to cancel a turn; True when one was running it."""
Forget = Callable[[str, str], Awaitable[None]]
"""Removes what is kept of a session elsewhere (checkpoint thread, session memory): (thread, session)."""


def _timestamp(when: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def session_message(record: SessionRecord) -> pb.Session:
    return pb.Session(
        id=record.id,
        title=record.title,
        agent_id=record.agent_id,
        orchestrator_id=record.orchestrator_id,
        application_id=record.application_id,
        turn_count=record.turn_count,
        create_time=_timestamp(record.create_time),
        update_time=_timestamp(record.update_time),
        metadata=record.metadata,
    )


ROLES = {"user": pb.MESSAGE_ROLE_USER, "assistant": pb.MESSAGE_ROLE_ASSISTANT, "tool": pb.MESSAGE_ROLE_TOOL}


def history_message(session_id: str, message: Message) -> pb.Message:
    out = pb.Message(
        id=message["id"],
        session_id=session_id,
        turn_id=message["turn_id"],
        role=ROLES[message["role"]],
        status=pb.MESSAGE_STATUS_COMPLETED,
    )
    if message["content"]:
        out.content.append(pb.ContentPart(text=message["content"]))
    for call in message.get("tool_calls", ()):
        out.tool_calls.append(pb.ToolCall(id=call["id"], name=call["name"], arguments_json=call["arguments"]))
    out.tool_call_id = message.get("tool_call_id", "")
    out.tool_name = message.get("name", "")
    for cited in message.get("citations", ()):
        handle = str(cited.get("handle", ""))
        out.citations.append(
            pb.Citation(
                label=handle,
                index=int(handle[1:]) if handle[1:].isdigit() else 0,
                chunk_id=cited.get("chunk_id", ""),
                document_id=cited.get("document_id", ""),
                file_name=cited.get("file_name", ""),
                knowledge_base_id=cited.get("knowledge_base_id", ""),
                url=cited.get("url", ""),
                title=cited.get("title", ""),
                snippet=cited.get("snippet", ""),
                page=cited.get("page", 0),
                heading_path=cited.get("heading_path", []),
            )
        )
    return out


def _page(token: str, page_size: int, default: int, maximum: int) -> tuple[int, int]:
    if page_size < 0:
        raise invalid("page_size", "must not be negative")
    try:
        offset = int(decode_page_token(token, 1)[0]) if token else 0
    except ValueError as error:
        raise invalid("page_token", "not a token from a previous response") from error
    return offset, min(page_size or default, maximum)


class SessionBindings(Protocol):
    """What a session may be bound to: the tenant's agents and orchestrators."""

    async def get_agent(self, tenant_id: str, agent_id: str) -> pb.Agent | None: ...
    async def get_orchestrator(self, tenant_id: str, orchestrator_id: str) -> pb.Orchestrator | None: ...


class ConversationServicer:
    def __init__(
        self,
        sessions: SessionStore,
        history: History,
        cancel: Cancel,
        forget: Forget,
        *,
        bindings: SessionBindings | None = None,
        default_page_size: int = 50,
        max_page_size: int = 200,
    ) -> None:
        self._sessions = sessions
        self._bindings = bindings
        self._history = history
        self._cancel = cancel
        self._forget = forget
        self._default_page = default_page_size
        self._max_page = max_page_size

    async def _owned(self, session_id: str) -> SessionRecord:
        if not session_id:
            raise invalid("session_id", "required")
        found = await self._sessions.get(require_identity(), session_id)
        if found is None:
            raise not_found("session", session_id)
        return found

    async def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> pb.CreateSessionResponse:
        async def work() -> pb.CreateSessionResponse:
            if len(request.title) > MAX_TITLE_CHARS:
                raise invalid("title", f"{len(request.title)} characters; the limit is {MAX_TITLE_CHARS}")
            if len(request.metadata) > MAX_METADATA_ENTRIES:
                raise invalid(
                    "metadata", f"{len(request.metadata)} entries; the limit is {MAX_METADATA_ENTRIES}"
                )
            identity = require_identity()
            if request.agent_id and request.orchestrator_id:
                raise invalid("orchestrator_id", "give an agent_id or an orchestrator_id, not both")
            if self._bindings is not None:
                # A session names what the caller's tenant has: anything else reads as missing.
                if request.agent_id and not await self._bindings.get_agent(
                    identity.tenant_id, request.agent_id
                ):
                    raise not_found("agent", request.agent_id)
                if request.orchestrator_id and not await self._bindings.get_orchestrator(
                    identity.tenant_id, request.orchestrator_id
                ):
                    raise not_found("orchestrator", request.orchestrator_id)
            now = datetime.now(UTC)
            record = SessionRecord(
                id=uuid.uuid4().hex,
                tenant_id=identity.tenant_id,
                user_id=identity.user_id,
                title=request.title.strip(),
                agent_id=request.agent_id,
                orchestrator_id=request.orchestrator_id,
                application_id=request.application_id,
                turn_count=0,
                create_time=now,
                update_time=now,
                metadata=dict(request.metadata),
            )
            await self._sessions.create(record)
            return pb.CreateSessionResponse(session=session_message(record))

        return await answer(context, work)

    async def GetSession(self, request: pb.GetSessionRequest, context: Any) -> pb.GetSessionResponse:
        async def work() -> pb.GetSessionResponse:
            return pb.GetSessionResponse(session=session_message(await self._owned(request.session_id)))

        return await answer(context, work)

    async def ListSessions(self, request: pb.ListSessionsRequest, context: Any) -> pb.ListSessionsResponse:
        async def work() -> pb.ListSessionsResponse:
            offset, size = _page(request.page_token, request.page_size, self._default_page, self._max_page)
            page = await self._sessions.list_sessions(
                require_identity(),
                agent_id=request.agent_id,
                orchestrator_id=request.orchestrator_id,
                application_id=request.application_id,
                offset=offset,
                limit=size,
            )
            return pb.ListSessionsResponse(
                sessions=[session_message(r) for r in page.sessions],
                next_page_token=encode_page_token([str(page.next_offset)]) if page.next_offset else "",
            )

        return await answer(context, work)

    async def UpdateSession(self, request: pb.UpdateSessionRequest, context: Any) -> pb.UpdateSessionResponse:
        async def work() -> pb.UpdateSessionResponse:
            record = await self._owned(request.session_id)
            if request.HasField("title"):
                if len(request.title) > MAX_TITLE_CHARS:
                    raise invalid("title", f"{len(request.title)} characters; the limit is {MAX_TITLE_CHARS}")
                updated = await self._sessions.update_title(
                    require_identity(), record.id, request.title.strip(), datetime.now(UTC)
                )
                record = updated or record
            return pb.UpdateSessionResponse(session=session_message(record))

        return await answer(context, work)

    async def DeleteSession(self, request: pb.DeleteSessionRequest, context: Any) -> pb.DeleteSessionResponse:
        async def work() -> pb.DeleteSessionResponse:
            record = await self._owned(request.session_id)
            identity = require_identity()
            await self._forget(thread_id(identity, record.id), record.id)
            await self._sessions.delete(identity, record.id)
            return pb.DeleteSessionResponse()

        return await answer(context, work)

    async def ListMessages(self, request: pb.ListMessagesRequest, context: Any) -> pb.ListMessagesResponse:
        async def work() -> pb.ListMessagesResponse:
            record = await self._owned(request.session_id)
            offset, size = _page(request.page_token, request.page_size, self._default_page, self._max_page)
            messages = [
                m
                for m in await self._history(thread_id(require_identity(), record.id))
                if request.include_tool_messages or m["role"] == "user" or m.get("final", False)
            ]
            if not request.oldest_first:
                messages.reverse()
            page = messages[offset : offset + size]
            more = offset + size < len(messages)
            return pb.ListMessagesResponse(
                messages=[history_message(record.id, m) for m in page],
                next_page_token=encode_page_token([str(offset + size)]) if more else "",
            )

        return await answer(context, work)

    async def CancelTurn(self, request: pb.CancelTurnRequest, context: Any) -> pb.CancelTurnResponse:
        async def work() -> pb.CancelTurnResponse:
            if not request.turn_id or len(request.turn_id) > MAX_SESSION_ID_CHARS:
                raise invalid("turn_id", f"required, at most {MAX_SESSION_ID_CHARS} characters")
            if request.session_id:
                await self._owned(request.session_id)
            return pb.CancelTurnResponse(cancelled=await self._cancel(request.turn_id))

        return await answer(context, work)


def taken(field: str, reason: str) -> RequestError:
    """ALREADY_EXISTS naming the field (a name unique in the tenant)."""
    return RequestError(grpc.StatusCode.ALREADY_EXISTS, f"{field}: {reason}", field=field)


class AgentStore(Protocol):
    async def create_agent(self, tenant_id: str, agent: pb.Agent) -> bool: ...
    async def get_agent(self, tenant_id: str, agent_id: str) -> pb.Agent | None: ...
    async def list_agents(
        self, tenant_id: str, offset: int, limit: int
    ) -> tuple[list[pb.Agent], int | None]: ...
    async def replace_agent(self, tenant_id: str, agent: pb.Agent) -> bool: ...
    async def delete_agent(self, tenant_id: str, agent_id: str) -> bool: ...
    async def orchestrators_running(self, tenant_id: str, agent_id: str) -> list[str]: ...


class ModelLookup(Protocol):
    """modelhub as agents' checks see it: a model of the caller's tenant (NotFound otherwise)."""

    async def get_model(self, model_id: str) -> mpb.Model: ...


async def check_vision(models: ModelLookup | None, agent: pb.Agent, field: str = "model_types") -> None:
    """An agent with VISION must run on a model that reads images (a VLM model): INVALID_ARGUMENT
    naming ``field`` otherwise. An agent on the tenant's default model is checked at its turns (the
    default can change); without modelhub (tests of other parts) nothing is checked here."""
    if VISION not in agent.model_types or not agent.model_id or models is None:
        return
    try:
        model = await models.get_model(agent.model_id)
    except NotFound:
        raise invalid("model_id", f"no model {agent.model_id!r} of the tenant's") from None
    if mpb.MODEL_TYPE_VLM not in model.types:
        known = [ModelType.from_number(t) for t in model.types]
        kinds = ", ".join(t.value for t in known if t is not None)
        raise invalid(
            field,
            f"the agent {agent.name!r} has VISION but its model {model.display_name or model.model_name!r} "
            f"does not read images (its types: {kinds or 'none'}); choose a VLM model or drop VISION",
        )


def check_agent(agent: pb.Agent) -> None:
    """INVALID_ARGUMENT naming the field and its limit for anything an agent may not be. Model types
    default to LLM; VISION comes on top of it."""
    if not AGENT_NAME.match(agent.name):
        raise invalid("name", NAME_RULE)
    types = list(dict.fromkeys(agent.model_types)) or [LLM]
    unknown = [t for t in types if t not in AGENT_MODEL_TYPES]
    if unknown:
        raise invalid("model_types", f"unknown type {unknown[0]!r}; one of {', '.join(AGENT_MODEL_TYPES)}")
    if LLM not in types:
        raise invalid("model_types", f"must include {LLM} (every agent writes text)")
    del agent.model_types[:]
    agent.model_types.extend(types)
    for field, limit in MAX_AGENT_TEXT_CHARS.items():
        value = getattr(agent, field)
        if len(value) > limit:
            raise invalid(field, f"{len(value)} characters; the limit is {limit}")
    for field, limit in MAX_AGENT_LIST_ITEMS.items():
        values = list(getattr(agent, field))
        if len(values) > limit:
            raise invalid(field, f"{len(values)} items; the limit is {limit}")
        if any(not v or len(v) > MAX_ID_CHARS for v in values):
            raise invalid(field, f"every item must be 1-{MAX_ID_CHARS} characters")
    parameters = agent.model_parameters
    if parameters.HasField("temperature") and not 0 <= parameters.temperature <= 2:
        raise invalid("model_parameters.temperature", "must be between 0 and 2")
    if parameters.HasField("max_tokens") and parameters.max_tokens < 1:
        raise invalid("model_parameters.max_tokens", "must be at least 1")


class AgentServicer:
    """Agents as data: what the conversation graph runs a turn with (the orchestration layer's unit)."""

    def __init__(
        self,
        store: AgentStore,
        *,
        models: ModelLookup | None = None,
        default_page_size: int = 50,
        max_page_size: int = 200,
    ) -> None:
        self._store = store
        self._models = models
        self._default_page = default_page_size
        self._max_page = max_page_size

    async def _owned(self, agent_id: str) -> pb.Agent:
        if not agent_id:
            raise invalid("agent_id", "required")
        found = await self._store.get_agent(require_identity().tenant_id, agent_id)
        if found is None:
            raise not_found("agent", agent_id)
        return found

    async def CreateAgent(self, request: pb.CreateAgentRequest, context: Any) -> pb.CreateAgentResponse:
        async def work() -> pb.CreateAgentResponse:
            now = _timestamp(datetime.now(UTC))
            agent = pb.Agent(
                id=uuid.uuid4().hex,
                name=request.name,
                display_name=request.display_name or request.name,
                description=request.description,
                system_prompt=request.system_prompt,
                model_id=request.model_id,
                model_parameters=request.model_parameters,
                tool_names=request.tool_names,
                knowledge_base_ids=request.knowledge_base_ids,
                skill_names=request.skill_names,
                active=request.active,
                create_time=now,
                update_time=now,
                model_types=request.model_types,
            )
            check_agent(agent)
            await check_vision(self._models, agent)
            if not await self._store.create_agent(require_identity().tenant_id, agent):
                raise taken("name", f"an agent named {agent.name!r} already exists")
            return pb.CreateAgentResponse(agent=agent)

        return await answer(context, work)

    async def GetAgent(self, request: pb.GetAgentRequest, context: Any) -> pb.GetAgentResponse:
        async def work() -> pb.GetAgentResponse:
            return pb.GetAgentResponse(agent=await self._owned(request.agent_id))

        return await answer(context, work)

    async def ListAgents(self, request: pb.ListAgentsRequest, context: Any) -> pb.ListAgentsResponse:
        async def work() -> pb.ListAgentsResponse:
            offset, size = _page(request.page_token, request.page_size, self._default_page, self._max_page)
            found, following = await self._store.list_agents(require_identity().tenant_id, offset, size)
            token = encode_page_token([str(following)]) if following else ""
            return pb.ListAgentsResponse(agents=found, next_page_token=token)

        return await answer(context, work)

    async def UpdateAgent(self, request: pb.UpdateAgentRequest, context: Any) -> pb.UpdateAgentResponse:
        async def work() -> pb.UpdateAgentResponse:
            agent = await self._owned(request.agent_id)
            for field in ("name", "display_name", "description", "system_prompt", "model_id", "active"):
                if request.HasField(field):
                    setattr(agent, field, getattr(request, field))
            if request.HasField("model_parameters"):
                agent.model_parameters.CopyFrom(request.model_parameters)
            for field in ("tool_names", "knowledge_base_ids", "skill_names", "model_types"):
                if request.HasField(field):
                    del getattr(agent, field)[:]
                    getattr(agent, field).extend(getattr(request, field).values)
            agent.update_time.CopyFrom(_timestamp(datetime.now(UTC)))
            check_agent(agent)
            await check_vision(self._models, agent)
            if not await self._store.replace_agent(require_identity().tenant_id, agent):
                raise taken("name", f"an agent named {agent.name!r} already exists")
            return pb.UpdateAgentResponse(agent=agent)

        return await answer(context, work)

    async def DeleteAgent(self, request: pb.DeleteAgentRequest, context: Any) -> pb.DeleteAgentResponse:
        async def work() -> pb.DeleteAgentResponse:
            agent = await self._owned(request.agent_id)
            tenant = require_identity().tenant_id
            running = await self._store.orchestrators_running(tenant, agent.id)
            if running:
                raise precondition(
                    "agent_id",
                    f"the agent {agent.name!r} is a member of the orchestrator(s) {', '.join(running)}; "
                    "remove it from them first",
                )
            await self._store.delete_agent(tenant, agent.id)
            return pb.DeleteAgentResponse()

        return await answer(context, work)


class OrchestratorStore(Protocol):
    async def get_agent(self, tenant_id: str, agent_id: str) -> pb.Agent | None: ...
    async def create_orchestrator(
        self, tenant_id: str, orchestrator: pb.Orchestrator, *, secrets: SecretChanges | None = None
    ) -> bool: ...
    async def get_orchestrator(self, tenant_id: str, orchestrator_id: str) -> pb.Orchestrator | None: ...
    async def list_orchestrators(
        self, tenant_id: str, mode: int, offset: int, limit: int
    ) -> tuple[list[pb.Orchestrator], int | None]: ...
    async def replace_orchestrator(
        self, tenant_id: str, orchestrator: pb.Orchestrator, *, secrets: SecretChanges | None = None
    ) -> bool: ...
    async def delete_orchestrator(self, tenant_id: str, orchestrator_id: str) -> bool: ...
    async def get_orchestrator_secret(
        self, tenant_id: str, orchestrator_id: str, name: str
    ) -> str | None: ...


MAX_ORCHESTRATOR_TEXT_CHARS = {"display_name": MAX_DISPLAY_NAME_CHARS, "description": MAX_DESCRIPTION_CHARS}


async def check_orchestrator(
    store: OrchestratorStore,
    tenant_id: str,
    orchestrator: pb.Orchestrator,
    models: ModelLookup | None = None,
) -> ModeConfig:
    """INVALID_ARGUMENT naming the field for anything an orchestrator may not be: its name and texts,
    its mode's configuration, and every agent it names (which must be the tenant's and active).
    ``member_agent_ids`` becomes the configuration's agents followed by any further members given.
    An agent with VISION whose model no longer reads images is refused naming where it is used.
    Returns the parsed configuration."""
    if not AGENT_NAME.match(orchestrator.name):
        raise invalid("name", NAME_RULE)
    for field, limit in MAX_ORCHESTRATOR_TEXT_CHARS.items():
        value = getattr(orchestrator, field)
        if len(value) > limit:
            raise invalid(field, f"{len(value)} characters; the limit is {limit}")
    if orchestrator.mode == pb.ORCHESTRATION_MODE_UNSPECIFIED:
        raise invalid("mode", f"required; one of {', '.join(m.value for m in Mode)}")
    mode = Mode.from_number(orchestrator.mode)
    if mode is None:
        raise invalid("mode", f"unknown mode {orchestrator.mode}")
    size = orchestrator.config.ByteSize()
    if size > MAX_CONFIG_BYTES:
        raise invalid("config", f"{size} bytes; the limit is {MAX_CONFIG_BYTES}")
    try:
        parsed = parse_config(mode, json_format.MessageToDict(orchestrator.config))
    except ConfigError as error:
        raise invalid(error.field, error.reason) from error
    except NotBuilt as error:
        raise RequestError(grpc.StatusCode.UNIMPLEMENTED, str(error), field="mode") from error
    references = agent_references(parsed)
    extra = [a for a in orchestrator.member_agent_ids if a not in {r for r, _ in references}]
    references += [(a, f"member_agent_ids[{list(orchestrator.member_agent_ids).index(a)}]") for a in extra]
    if len(references) > MAX_MEMBER_AGENTS:
        raise invalid("member_agent_ids", f"{len(references)} agents; the limit is {MAX_MEMBER_AGENTS}")
    for agent_id, path in references:
        agent = await store.get_agent(tenant_id, agent_id)
        if agent is None:
            raise invalid(path, f"no agent {agent_id!r}")
        if not agent.active:
            raise invalid(path, f"the agent {agent.name!r} is not active")
        await check_vision(models, agent, path)  # its model may have changed since it was saved
    del orchestrator.member_agent_ids[:]
    orchestrator.member_agent_ids.extend(dict.fromkeys(a for a, _ in references))
    return parsed


def _hint(orchestrator: pb.Orchestrator) -> str:
    value = orchestrator.config.fields.get(API_KEY_HINT)
    return value.string_value if value is not None else ""


def _peer(orchestrator: pb.Orchestrator) -> str:
    """Where a saved external orchestrator's key goes (empty for other modes)."""
    if orchestrator.mode != pb.ORCHESTRATION_MODE_EXTERNAL:
        return ""
    try:
        parsed = parse_config(Mode.EXTERNAL, json_format.MessageToDict(orchestrator.config))
    except ConfigError:
        return ""
    return peer_of(parsed) if isinstance(parsed, ExternalConfig) else ""


class OrchestratorServicer:
    """Orchestrators as data: how a session's agents combine to answer (checked when saved).

    ``keys`` seals external orchestrators' API keys (None or a key ring-less one: the service has no
    MASTER_KEY); ``egress`` is the policy their base URLs must pass, names resolved by ``resolver``."""

    def __init__(
        self,
        store: OrchestratorStore,
        *,
        keys: OrchestratorKeys | None = None,
        egress: EgressPolicy | None = None,
        resolver: Resolver | None = None,
        models: ModelLookup | None = None,
        default_page_size: int = 50,
        max_page_size: int = 200,
    ) -> None:
        self._store = store
        self._models = models
        self._keys = keys or OrchestratorKeys(None)
        self._egress = egress or EgressPolicy()
        self._resolver = resolver
        self._default_page = default_page_size
        self._max_page = max_page_size

    async def _check_destination(self, base_url: str) -> None:
        """Refuses a base URL the egress guard refuses: an internal or metadata address or a port outside
        the policy, or a name that resolves to one now. A name that does not resolve (yet) is let
        through: every call resolves and checks it again."""
        try:
            async with asyncio.timeout(RESOLVE_SECONDS):
                await validate_base_url(base_url, self._egress, resolver=self._resolver)
        except TimeoutError:
            return
        except EgressError as error:
            if error.code is EgressErrorCode.DNS_FAILED:
                return
            raise invalid(
                "config.base_url",
                "points at an address or port external applications may not be called at (private, "
                "loopback, link-local and metadata addresses, and ports outside the egress policy, unless "
                "the operator allow-lists them)",
            ) from None

    async def _seal_key(
        self,
        tenant_id: str,
        orchestrator: pb.Orchestrator,
        parsed: ModeConfig,
        *,
        stored: bool = False,
        hint: str = "",
        peer: str = "",
    ) -> SecretChanges:
        """Takes the API key out of the configuration (sealed, to be written with the record) and puts
        its hint in; ``stored``: the orchestrator has a key already, masked as ``hint``, given for
        ``peer``. A kept key stays with its peer: pointing the orchestrator elsewhere needs the key again
        (else whoever may edit it could send the stored key to a server of theirs and read it)."""
        fields = orchestrator.config.fields
        for name in (API_KEY, API_KEY_HINT):
            if name in fields:
                del fields[name]
        if not isinstance(parsed, ExternalConfig):
            return {API_KEY: None} if stored else {}
        await self._check_destination(parsed.base_url)
        if parsed.api_key:
            try:
                sealed = self._keys.seal(tenant_id, orchestrator.id, parsed.api_key)
            except KeyUnavailable:
                raise precondition("config.api_key", f"cannot be kept: {MASTER_KEY_MISSING}") from None
            orchestrator.config[API_KEY_HINT] = mask(parsed.api_key)
            return {API_KEY: sealed}
        if stored and parsed.api_key is None:
            if peer_of(parsed) != peer:
                raise invalid(
                    "config.api_key",
                    "changing provider or base_url requires the API key again (the stored key was given for "
                    "the previous one); send api_key, or an empty one to drop it",
                )
            orchestrator.config[API_KEY_HINT] = hint
            return {}
        if parsed.provider == "dify":
            raise invalid("config.api_key", "required: Dify authenticates every call with the app's API key")
        return {API_KEY: None} if stored else {}

    async def _owned(self, orchestrator_id: str) -> pb.Orchestrator:
        if not orchestrator_id:
            raise invalid("orchestrator_id", "required")
        found = await self._store.get_orchestrator(require_identity().tenant_id, orchestrator_id)
        if found is None:
            raise not_found("orchestrator", orchestrator_id)
        return found

    async def CreateOrchestrator(
        self, request: pb.CreateOrchestratorRequest, context: Any
    ) -> pb.CreateOrchestratorResponse:
        async def work() -> pb.CreateOrchestratorResponse:
            now = _timestamp(datetime.now(UTC))
            orchestrator = pb.Orchestrator(
                id=uuid.uuid4().hex,
                name=request.name,
                display_name=request.display_name or request.name,
                description=request.description,
                mode=request.mode,
                member_agent_ids=request.member_agent_ids,
                config=request.config,
                active=request.active,
                create_time=now,
                update_time=now,
            )
            tenant = require_identity().tenant_id
            parsed = await check_orchestrator(self._store, tenant, orchestrator, self._models)
            secrets = await self._seal_key(tenant, orchestrator, parsed)
            if not await self._store.create_orchestrator(tenant, orchestrator, secrets=secrets):
                raise taken("name", f"an orchestrator named {orchestrator.name!r} already exists")
            return pb.CreateOrchestratorResponse(orchestrator=orchestrator)

        return await answer(context, work)

    async def GetOrchestrator(
        self, request: pb.GetOrchestratorRequest, context: Any
    ) -> pb.GetOrchestratorResponse:
        async def work() -> pb.GetOrchestratorResponse:
            return pb.GetOrchestratorResponse(orchestrator=await self._owned(request.orchestrator_id))

        return await answer(context, work)

    async def ListOrchestrators(
        self, request: pb.ListOrchestratorsRequest, context: Any
    ) -> pb.ListOrchestratorsResponse:
        async def work() -> pb.ListOrchestratorsResponse:
            offset, size = _page(request.page_token, request.page_size, self._default_page, self._max_page)
            found, following = await self._store.list_orchestrators(
                require_identity().tenant_id, int(request.mode), offset, size
            )
            token = encode_page_token([str(following)]) if following else ""
            return pb.ListOrchestratorsResponse(orchestrators=found, next_page_token=token)

        return await answer(context, work)

    async def UpdateOrchestrator(
        self, request: pb.UpdateOrchestratorRequest, context: Any
    ) -> pb.UpdateOrchestratorResponse:
        async def work() -> pb.UpdateOrchestratorResponse:
            orchestrator = await self._owned(request.orchestrator_id)
            hint, peer = _hint(orchestrator), _peer(orchestrator)
            for field in ("name", "display_name", "description", "active"):
                if request.HasField(field):
                    setattr(orchestrator, field, getattr(request, field))
            if request.mode != pb.ORCHESTRATION_MODE_UNSPECIFIED:
                orchestrator.mode = request.mode
            if request.HasField("config"):
                orchestrator.config.Clear()
                orchestrator.config.update(json_format.MessageToDict(request.config))
                # The members follow the new configuration (plus any sent with it).
                del orchestrator.member_agent_ids[:]
            if request.HasField("member_agent_ids"):
                del orchestrator.member_agent_ids[:]
                orchestrator.member_agent_ids.extend(request.member_agent_ids.values)
            orchestrator.update_time.CopyFrom(_timestamp(datetime.now(UTC)))
            tenant = require_identity().tenant_id
            parsed = await check_orchestrator(self._store, tenant, orchestrator, self._models)
            stored = await self._store.get_orchestrator_secret(tenant, orchestrator.id, API_KEY) is not None
            secrets = await self._seal_key(tenant, orchestrator, parsed, stored=stored, hint=hint, peer=peer)
            if not await self._store.replace_orchestrator(tenant, orchestrator, secrets=secrets):
                raise taken("name", f"an orchestrator named {orchestrator.name!r} already exists")
            return pb.UpdateOrchestratorResponse(orchestrator=orchestrator)

        return await answer(context, work)

    async def DeleteOrchestrator(
        self, request: pb.DeleteOrchestratorRequest, context: Any
    ) -> pb.DeleteOrchestratorResponse:
        async def work() -> pb.DeleteOrchestratorResponse:
            orchestrator = await self._owned(request.orchestrator_id)
            await self._store.delete_orchestrator(require_identity().tenant_id, orchestrator.id)
            return pb.DeleteOrchestratorResponse()

        return await answer(context, work)


def build_binding(
    servicer: ConversationServicer | None = None,
    agents: AgentServicer | None = None,
    orchestrators: OrchestratorServicer | None = None,
) -> ServiceBinding:
    servicers = [s for s in (servicer, agents, orchestrators) if s is not None]
    return bind_service(CONTRACTS["conversation"].descriptor, servicers or None, pending=PENDING_CAPABILITY)


__all__ = [
    "PENDING_CAPABILITY",
    "AgentServicer",
    "ConversationServicer",
    "OrchestratorServicer",
    "build_binding",
    "check_agent",
    "check_orchestrator",
]
