"""The tool catalogue and the tenant's skills, read from the tool runner (``/api/v1/tools``,
``/api/v1/skills``): what an agent editor offers to select.

The tools are the platform's, the same for every tenant. Skills are each tenant's own (installed in the
tool runner's data folder per tenant): another tenant's skill is a 404 like one that never was, as is a
missing file; a path that leaves the skill's folder is a 400 naming ``path``.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_clients import ToolRunnerClient
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES
from knowsphere_gateway.api.knowledge import PageSize
from knowsphere_gateway.api.protojson import json_model, to_json

ToolListJson = json_model(pb.ListToolsResponse.DESCRIPTOR)
SkillListJson = json_model(pb.ListSkillsResponse.DESCRIPTOR)
SkillJson = json_model(pb.GetSkillResponse.DESCRIPTOR)
FALLBACK_CONTENT_TYPE = "application/octet-stream"


def build_tools_router(toolrunner: ToolRunnerClient, caller: Callable[..., Caller]) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["tools and skills"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]

    @router.get("/tools", response_model=ToolListJson)
    async def list_tools(
        who: Who,
        turn_view: bool = Query(
            default=False,
            description="false: every selectable tool (for agent editors); true: the tools a turn with "
            "these switches would bind",
        ),
        knowledge_bases: bool = Query(default=False, description="turn view: a knowledge base is selected"),
        web_search: bool = Query(default=False, description="turn view: web search is on"),
        knowledge_graph: bool = Query(default=False, description="turn view: the knowledge graph is on"),
    ) -> dict[str, Any]:
        """The tool catalogue, in its stable order, with each tool's JSON Schema."""
        switches = pb.TurnSwitches(
            knowledge_base_ids=["selected"] if knowledge_bases else [],
            web_search=web_search,
            knowledge_graph=knowledge_graph,
        )
        request = pb.ListToolsRequest(switches=switches, catalog_view=not turn_view)
        with who.bound():
            return to_json(await toolrunner.list_tools(request))

    @router.get("/skills", response_model=SkillListJson)
    async def list_skills(who: Who, page_size: PageSize = 0, page_token: str = "") -> dict[str, Any]:
        """The tenant's skills by name (their SKILL.md path, whether they have scripts)."""
        with who.bound():
            return to_json(
                await toolrunner.list_skills(pb.ListSkillsRequest(page_size=page_size, page_token=page_token))
            )

    @router.get("/skills/{skill_name}", response_model=SkillJson)
    async def get_skill(skill_name: str, who: Who) -> dict[str, Any]:
        """One skill with its instructions (SKILL.md) and its files."""
        with who.bound():
            return to_json(await toolrunner.get_skill(pb.GetSkillRequest(name=skill_name)))

    @router.get(
        "/skills/{skill_name}/file",
        response_class=Response,
        responses={200: {"content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}},
    )
    async def read_skill_file(
        skill_name: str,
        who: Who,
        path: str = Query(min_length=1, max_length=1024, description="relative to the skill's folder"),
    ) -> Response:
        """One file of a skill as it is (``X-KS-Truncated: true`` when cut at the tool runner's cap)."""
        with who.bound():
            found = await toolrunner.read_skill_file(
                pb.ReadSkillFileRequest(skill_name=skill_name, path=path)
            )
        body = found.text.encode() if found.WhichOneof("content") == "text" else found.data
        return Response(
            content=body,
            media_type=found.content_type or FALLBACK_CONTENT_TYPE,
            headers={
                "x-ks-truncated": "true" if found.truncated else "false",
                "x-content-type-options": "nosniff",
            },
        )

    return router


__all__ = ["build_tools_router"]
