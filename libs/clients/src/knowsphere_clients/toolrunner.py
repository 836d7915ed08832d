"""The toolrunner client: one typed method per RPC of ``knowsphere.toolrunner.v1.ToolRunnerService``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from knowsphere.toolrunner.v1 import toolrunner_pb2 as tpb
from knowsphere_clients.base import ServiceClient


class ToolRunnerClient(ServiceClient):
    service = "toolrunner"

    async def list_tools(self, request: tpb.ListToolsRequest) -> tpb.ListToolsResponse:
        response: tpb.ListToolsResponse = await self._call("ListTools", request)
        return response

    async def execute_tool(self, request: tpb.ExecuteToolRequest) -> tpb.ExecuteToolResponse:
        response: tpb.ExecuteToolResponse = await self._call("ExecuteTool", request)
        return response

    async def get_stored_data(self, request: tpb.GetStoredDataRequest) -> tpb.GetStoredDataResponse:
        response: tpb.GetStoredDataResponse = await self._call("GetStoredData", request)
        return response

    def download_artifact(
        self, request: tpb.DownloadArtifactRequest
    ) -> AsyncIterator[tpb.DownloadArtifactResponse]:
        return self._stream("DownloadArtifact", request)

    async def list_skills(self, request: tpb.ListSkillsRequest) -> tpb.ListSkillsResponse:
        response: tpb.ListSkillsResponse = await self._call("ListSkills", request)
        return response

    async def get_skill(self, request: tpb.GetSkillRequest) -> tpb.GetSkillResponse:
        response: tpb.GetSkillResponse = await self._call("GetSkill", request)
        return response

    async def read_skill_file(self, request: tpb.ReadSkillFileRequest) -> tpb.ReadSkillFileResponse:
        response: tpb.ReadSkillFileResponse = await self._call("ReadSkillFile", request)
        return response

    async def execute_skill_script(
        self, request: tpb.ExecuteSkillScriptRequest
    ) -> tpb.ExecuteSkillScriptResponse:
        response: tpb.ExecuteSkillScriptResponse = await self._call("ExecuteSkillScript", request)
        return response
