"""Agents (``/api/v1/agents``) and orchestrators (``/api/v1/orchestrators``), backed by the conversation
service. Another tenant's agent or orchestrator is a 404 like one that never was.

Responses are the conversation's messages as JSON (``protojson``). The request bodies are hand-written:
they refuse early, with a 422 naming the field, what the conversation's servicers would refuse for its
form alone (the name, text lengths, list sizes, parameter ranges, a ``config`` over the size limit or
that a ``google.protobuf.Struct`` cannot hold); the service stays the judge. What only the service
knows comes back from it naming the field: a name already taken → 409 (``name``); a config that does not
fit its mode or names an unknown agent → 400 (``config.agent_id``); deleting an agent an orchestrator
runs → 409; a mode that cannot be configured yet → 501.
"""

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from google.protobuf import json_format, struct_pb2
from pydantic import AfterValidator, Field

from knowsphere.conversation.v1 import conversation_pb2 as pb
from knowsphere.conversation.v1.conversation_enums import OrchestrationMode
from knowsphere_clients import ConversationClient
from knowsphere_contracts.agents import (
    AGENT_MODEL_TYPES,
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
)
from knowsphere_contracts.events import MAX_KNOWLEDGE_BASES_PER_TURN
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES
from knowsphere_gateway.api.knowledge import INT32_MAX, PageSize
from knowsphere_gateway.api.protojson import (
    JSON_INTEGER,
    JsonBool,
    JsonFloat,
    RequestBody,
    from_json,
    json_model,
    to_json,
)

AgentJson = json_model(pb.Agent.DESCRIPTOR)
AgentListJson = json_model(pb.ListAgentsResponse.DESCRIPTOR)
OrchestratorJson = json_model(pb.Orchestrator.DESCRIPTOR)
OrchestratorListJson = json_model(pb.ListOrchestratorsResponse.DESCRIPTOR)


# Fields of an update whose values replace a whole list: they travel as ``StringList`` messages so that
# "not given" and "[]" differ.
AGENT_LISTS = ("tool_names", "knowledge_base_ids", "skill_names", "model_types")
ORCHESTRATOR_LISTS = ("member_agent_ids",)

Name = Annotated[str, Field(pattern=NAME_PATTERN, description=NAME_RULE)]
DisplayName = Annotated[str, Field(max_length=MAX_DISPLAY_NAME_CHARS, description='"" shows the name')]
Description = Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS)]
SystemPrompt = Annotated[str, Field(max_length=MAX_SYSTEM_PROMPT_CHARS)]
ModelId = Annotated[str, Field(max_length=MAX_ID_CHARS, description='a modelhub id; "" = the tenant default')]
Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
ToolNames = Annotated[list[Id], Field(max_length=MAX_TOOLS, description="from the tool runner's catalog")]
KnowledgeBaseIds = Annotated[list[Id], Field(max_length=MAX_KNOWLEDGE_BASES_PER_TURN)]
SkillNames = Annotated[list[Id], Field(max_length=MAX_SKILLS)]
ModelTypes = Annotated[
    list[Literal["LLM", "VISION"]],
    Field(
        max_length=len(AGENT_MODEL_TYPES),
        description="LLM (always) and VISION: the agent reads a message's images itself, so its model "
        'must be a VLM model (refused naming model_types otherwise); [] means ["LLM"]',
    ),
]
MemberAgentIds = Annotated[
    list[Id],
    Field(
        max_length=MAX_MEMBER_AGENTS,
        description="agents run besides those the config names (the answer lists all of them)",
    ),
]


def _storable_config(config: dict[str, Any]) -> dict[str, Any]:
    # What a google.protobuf.Struct cannot hold (NaN, an integer beyond a double, nesting past
    # protobuf's depth) is refused here rather than failing on the way to the service.
    stored = struct_pb2.Struct()
    try:
        json_format.ParseDict(config, stored)
    except (json_format.ParseError, ValueError, OverflowError) as error:
        raise ValueError(f"cannot be stored: {error}") from None
    size = stored.ByteSize()
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"{size} bytes encoded; the limit is {MAX_CONFIG_BYTES}")
    return config


Config = Annotated[
    dict[str, Any],
    AfterValidator(_storable_config),
    Field(
        description=f"the mode's configuration (shapes per mode on OrchestrationMode); "
        f"at most {MAX_CONFIG_BYTES} bytes encoded"
    ),
]


class AgentModelParametersBody(RequestBody):
    temperature: Annotated[JsonFloat, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER] | None = None


class AgentCreate(RequestBody):
    name: Name = Field(description=f"unique in the tenant; {NAME_RULE}")
    display_name: DisplayName = ""
    description: Description = ""
    system_prompt: SystemPrompt = ""
    model_id: ModelId = ""
    model_parameters: AgentModelParametersBody | None = None
    tool_names: ToolNames = Field(default_factory=list)
    knowledge_base_ids: KnowledgeBaseIds = Field(default_factory=list)
    skill_names: SkillNames = Field(default_factory=list)
    model_types: ModelTypes = Field(default_factory=list)
    active: JsonBool = Field(
        default=True, description="false: kept, but sessions and orchestrators cannot run it"
    )


class AgentUpdate(RequestBody):
    """Only the fields given change; a list or ``model_parameters`` replaces the whole set."""

    name: Name | None = None
    display_name: DisplayName | None = None
    description: Description | None = None
    system_prompt: SystemPrompt | None = None
    model_id: ModelId | None = None
    model_parameters: AgentModelParametersBody | None = None
    tool_names: ToolNames | None = None
    knowledge_base_ids: KnowledgeBaseIds | None = None
    skill_names: SkillNames | None = None
    model_types: ModelTypes | None = None
    active: JsonBool | None = None


class OrchestratorCreate(RequestBody):
    name: Name = Field(description=f"unique in the tenant; {NAME_RULE}")
    display_name: DisplayName = ""
    description: Description = ""
    mode: OrchestrationMode
    member_agent_ids: MemberAgentIds = Field(default_factory=list)
    config: Config = Field(default_factory=dict)
    active: JsonBool = Field(default=True, description="false: kept, but sessions cannot run it")


class OrchestratorUpdate(RequestBody):
    """Only the fields given change; ``member_agent_ids`` and ``config`` replace the whole value, and the
    config must fit the resulting mode."""

    name: Name | None = None
    display_name: DisplayName | None = None
    description: Description | None = None
    mode: OrchestrationMode | None = None
    member_agent_ids: MemberAgentIds | None = None
    config: Config | None = None
    active: JsonBool | None = None


def _changes(body: RequestBody, lists: tuple[str, ...]) -> dict[str, Any]:
    """The fields of an update body that were given, lists wrapped as ``StringList`` messages."""
    changes: Mapping[str, Any] = body.model_dump(exclude_unset=True)
    return {
        key: {"values": value} if key in lists and value is not None else value
        for key, value in changes.items()
    }


def build_agents_router(conversation: ConversationClient, caller: Callable[..., Caller]) -> APIRouter:
    """``caller`` is the dependency giving each route its :class:`Caller`."""
    router = APIRouter(prefix="/api/v1", tags=["agents"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    @router.post("/agents", status_code=201, response_model=AgentJson)
    async def create_agent(body: AgentCreate, who: Who) -> dict[str, Any]:
        """A new agent: a model, a system prompt, tools, knowledge bases and skills."""
        with who.bound():
            # Every field, defaults included (``active`` defaults to true here, false in the message).
            return to_json(
                await conversation.create_agent(from_json(pb.CreateAgentRequest, body.model_dump()))
            )

    @router.get("/agents", response_model=AgentListJson)
    async def list_agents(who: Who, page_size: PageSize = 0, page_token: str = "") -> dict[str, Any]:
        """The tenant's agents by name."""
        request = pb.ListAgentsRequest(page_size=page_size, page_token=page_token)
        with who.bound():
            return to_json(await conversation.list_agents(request))

    @router.get("/agents/{agent_id}", response_model=AgentJson)
    async def get_agent(agent_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await conversation.get_agent(agent_id))

    @router.patch("/agents/{agent_id}", response_model=AgentJson)
    async def update_agent(agent_id: str, body: AgentUpdate, who: Who) -> dict[str, Any]:
        request = from_json(pb.UpdateAgentRequest, {**_changes(body, AGENT_LISTS), "agent_id": agent_id})
        with who.bound():
            return to_json(await conversation.update_agent(request))

    @router.delete("/agents/{agent_id}", status_code=204)
    async def delete_agent(agent_id: str, who: Who) -> Response:
        """Refused with 409, naming them, while an orchestrator runs the agent."""
        with who.bound():
            await conversation.delete_agent(agent_id)
        return Response(status_code=204)

    @router.post("/orchestrators", status_code=201, response_model=OrchestratorJson)
    async def create_orchestrator(body: OrchestratorCreate, who: Who) -> dict[str, Any]:
        """A new orchestrator: how agents combine to answer; its config is checked for its mode."""
        with who.bound():
            return to_json(
                await conversation.create_orchestrator(
                    from_json(pb.CreateOrchestratorRequest, body.model_dump())
                )
            )

    @router.get("/orchestrators", response_model=OrchestratorListJson)
    async def list_orchestrators(
        who: Who, mode: OrchestrationMode | None = None, page_size: PageSize = 0, page_token: str = ""
    ) -> dict[str, Any]:
        """The tenant's orchestrators by name, of one mode if given."""
        request = from_json(
            pb.ListOrchestratorsRequest, {"mode": mode, "page_size": page_size, "page_token": page_token}
        )
        with who.bound():
            return to_json(await conversation.list_orchestrators(request))

    @router.get("/orchestrators/{orchestrator_id}", response_model=OrchestratorJson)
    async def get_orchestrator(orchestrator_id: str, who: Who) -> dict[str, Any]:
        with who.bound():
            return to_json(await conversation.get_orchestrator(orchestrator_id))

    @router.patch("/orchestrators/{orchestrator_id}", response_model=OrchestratorJson)
    async def update_orchestrator(orchestrator_id: str, body: OrchestratorUpdate, who: Who) -> dict[str, Any]:
        request = from_json(
            pb.UpdateOrchestratorRequest,
            {**_changes(body, ORCHESTRATOR_LISTS), "orchestrator_id": orchestrator_id},
        )
        with who.bound():
            return to_json(await conversation.update_orchestrator(request))

    @router.delete("/orchestrators/{orchestrator_id}", status_code=204)
    async def delete_orchestrator(orchestrator_id: str, who: Who) -> Response:
        with who.bound():
            await conversation.delete_orchestrator(orchestrator_id)
        return Response(status_code=204)

    return router


__all__ = ["build_agents_router"]
