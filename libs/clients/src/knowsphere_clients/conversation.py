"""The conversation client: sessions, their messages, agents, orchestrators and cancelling turns (chat
turns themselves go through the bus)."""

from __future__ import annotations

from knowsphere.conversation.v1 import conversation_pb2 as cpb
from knowsphere_clients.base import ServiceClient


class ConversationClient(ServiceClient):
    service = "conversation"

    async def create_session(self, request: cpb.CreateSessionRequest) -> cpb.Session:
        response: cpb.CreateSessionResponse = await self._call("CreateSession", request)
        return response.session

    async def get_session(self, session_id: str) -> cpb.Session:
        response: cpb.GetSessionResponse = await self._call(
            "GetSession", cpb.GetSessionRequest(session_id=session_id)
        )
        return response.session

    async def list_sessions(self, request: cpb.ListSessionsRequest) -> cpb.ListSessionsResponse:
        response: cpb.ListSessionsResponse = await self._call("ListSessions", request)
        return response

    async def update_session(self, request: cpb.UpdateSessionRequest) -> cpb.Session:
        response: cpb.UpdateSessionResponse = await self._call("UpdateSession", request)
        return response.session

    async def delete_session(self, session_id: str) -> None:
        await self._call("DeleteSession", cpb.DeleteSessionRequest(session_id=session_id))

    async def list_messages(self, request: cpb.ListMessagesRequest) -> cpb.ListMessagesResponse:
        response: cpb.ListMessagesResponse = await self._call("ListMessages", request)
        return response

    async def get_agent(self, agent_id: str) -> cpb.Agent:
        response: cpb.GetAgentResponse = await self._call("GetAgent", cpb.GetAgentRequest(agent_id=agent_id))
        return response.agent

    async def list_agents(self, request: cpb.ListAgentsRequest) -> cpb.ListAgentsResponse:
        response: cpb.ListAgentsResponse = await self._call("ListAgents", request)
        return response

    async def create_agent(self, request: cpb.CreateAgentRequest) -> cpb.Agent:
        response: cpb.CreateAgentResponse = await self._call("CreateAgent", request)
        return response.agent

    async def update_agent(self, request: cpb.UpdateAgentRequest) -> cpb.Agent:
        response: cpb.UpdateAgentResponse = await self._call("UpdateAgent", request)
        return response.agent

    async def delete_agent(self, agent_id: str) -> None:
        await self._call("DeleteAgent", cpb.DeleteAgentRequest(agent_id=agent_id))

    async def create_orchestrator(self, request: cpb.CreateOrchestratorRequest) -> cpb.Orchestrator:
        response: cpb.CreateOrchestratorResponse = await self._call("CreateOrchestrator", request)
        return response.orchestrator

    async def get_orchestrator(self, orchestrator_id: str) -> cpb.Orchestrator:
        response: cpb.GetOrchestratorResponse = await self._call(
            "GetOrchestrator", cpb.GetOrchestratorRequest(orchestrator_id=orchestrator_id)
        )
        return response.orchestrator

    async def list_orchestrators(
        self, request: cpb.ListOrchestratorsRequest
    ) -> cpb.ListOrchestratorsResponse:
        response: cpb.ListOrchestratorsResponse = await self._call("ListOrchestrators", request)
        return response

    async def update_orchestrator(self, request: cpb.UpdateOrchestratorRequest) -> cpb.Orchestrator:
        response: cpb.UpdateOrchestratorResponse = await self._call("UpdateOrchestrator", request)
        return response.orchestrator

    async def delete_orchestrator(self, orchestrator_id: str) -> None:
        await self._call("DeleteOrchestrator", cpb.DeleteOrchestratorRequest(orchestrator_id=orchestrator_id))

    async def cancel_turn(self, turn_id: str, session_id: str = "") -> bool:
        response: cpb.CancelTurnResponse = await self._call(
            "CancelTurn", cpb.CancelTurnRequest(turn_id=turn_id, session_id=session_id)
        )
        return response.cancelled
