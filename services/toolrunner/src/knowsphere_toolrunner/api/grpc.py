"""The gRPC face of the toolrunner service.

ListTools, ExecuteTool, GetStoredData and DownloadArtifact are served here; the skills methods by
:mod:`knowsphere_toolrunner.api.skills`. Problems the model should read come back inside
ExecuteToolResponse; gRPC errors are kept for the caller's own mistakes (a missing ref id) and for
ids that are not the caller's (NOT_FOUND, never "forbidden").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from knowsphere.toolrunner.v1 import toolrunner_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import current_identity, require_identity
from knowsphere_runtime.rpc import ServiceBinding, bind_service
from knowsphere_runtime.rpc.errors import abort, answer, invalid, not_found
from knowsphere_toolrunner.api.convert import (
    arguments_of,
    artifact_message,
    context_of,
    execution_message,
    sources_of,
    spec_message,
    stored_data_message,
    switches_of,
)
from knowsphere_toolrunner.domain.catalog import Catalogue
from knowsphere_toolrunner.domain.execution import ToolExecutor
from knowsphere_toolrunner.domain.ports import ToolResultStore
from knowsphere_toolrunner.domain.tools.base import Tool
from knowsphere_toolrunner.skills.store import SkillError, SkillStore

# Distinct listings kept ready (switch combinations × agents' selections); the cache starts over when full.
LISTING_CACHE_SIZE = 1024


class ToolServicer:
    def __init__(
        self,
        catalogue: Catalogue,
        executor: ToolExecutor,
        store: ToolResultStore,
        skills: SkillStore,
        *,
        snippet_chars: int,
        artifact_chunk_bytes: int,
    ) -> None:
        self._catalogue = catalogue
        self._executor = executor
        self._store = store
        self._skills = skills
        self._snippet_chars = snippet_chars
        self._chunk_bytes = artifact_chunk_bytes
        # Built once: the messages (and so their bytes) of a tool never change while the service runs.
        self._spec_messages = {spec.name: spec_message(spec) for spec in catalogue.specs}
        self._listings: dict[tuple[object, ...], pb.ListToolsResponse] = {}

    def add_tools(self, tools: Sequence[Tool]) -> None:
        """Offer more tools from now on (MCP servers' tools, once discovered)."""
        self._catalogue.add(tools)
        self._spec_messages.update({tool.spec.name: spec_message(tool.spec) for tool in tools})
        self._listings.clear()

    async def ListTools(self, request: pb.ListToolsRequest, context: Any) -> pb.ListToolsResponse:
        # The answer depends only on which switches are on, the selection as a set, whether skills are
        # bound, whether one of them has scripts and the workspace (never on the ids), so every turn
        # with the same shape shares one ready answer.
        switches = request.switches
        skill_scripts = bool(request.skill_names) and await self._bound_skill_has_scripts(request.skill_names)
        key = (
            bool(switches.knowledge_base_ids),
            switches.web_search,
            switches.knowledge_graph,
            frozenset(request.tool_names),
            bool(request.skill_names),
            skill_scripts,
            request.catalog_view,
            request.workspace,
        )
        cached = self._listings.get(key)
        if cached is not None:
            return cached
        listing = self._catalogue.list_tools(
            switches_of(switches),
            tuple(request.tool_names),
            tuple(request.skill_names),
            skill_scripts=skill_scripts,
            catalog_view=request.catalog_view,
            workspace=request.workspace,
        )
        response = pb.ListToolsResponse(
            tools=[self._spec_messages[spec.name] for spec in listing.tools],
            omitted=[pb.OmittedTool(name=o.name, reason=o.reason) for o in listing.omitted],
        )
        if len(self._listings) >= LISTING_CACHE_SIZE:
            self._listings.clear()
        self._listings[key] = response
        return response

    async def _bound_skill_has_scripts(self, names: Sequence[str]) -> bool:
        identity = current_identity()
        if identity is None:
            return False  # no tenant, no skills: read_file alone is offered and answers "not found"
        # A handful of directory reads (no file is opened), in line: a thread hop would cost more than
        # the look-up, and ListTools is on every turn's path (p95 goal 2 ms).
        try:
            return self._skills.any_has_scripts(identity.tenant_id, names)
        except SkillError:
            return False  # a tenant id the store refuses has no skills

    async def ExecuteTool(self, request: pb.ExecuteToolRequest, context: Any) -> pb.ExecuteToolResponse:
        async def work() -> pb.ExecuteToolResponse:
            existing = sources_of(request.context)
            tool_context = context_of(request.context, require_identity(), existing, self._snippet_chars)
            outcome = await self._executor.execute(
                request.name, arguments_of(request.arguments), tool_context, existing
            )
            return execution_message(outcome)

        return await answer(context, work)

    async def GetStoredData(self, request: pb.GetStoredDataRequest, context: Any) -> pb.GetStoredDataResponse:
        async def work() -> pb.GetStoredDataResponse:
            if not request.ref_id:
                raise invalid("ref_id", "required")
            identity = require_identity()
            stored = await self._store.get_result(identity.tenant_id, identity.user_id, request.ref_id)
            if stored is None:
                raise not_found("stored result", request.ref_id)
            return pb.GetStoredDataResponse(data=stored_data_message(stored))

        return await answer(context, work)

    async def DownloadArtifact(
        self, request: pb.DownloadArtifactRequest, context: Any
    ) -> AsyncIterator[pb.DownloadArtifactResponse]:
        if not request.artifact_id:
            await abort(context, invalid("artifact_id", "required"))
        identity = require_identity()
        found = await self._store.get_artifact(identity.tenant_id, identity.user_id, request.artifact_id)
        if found is None:
            await abort(context, not_found("artifact", request.artifact_id))
        assert found is not None
        artifact, data = found
        yield pb.DownloadArtifactResponse(artifact=artifact_message(artifact))
        for start in range(0, len(data), self._chunk_bytes):
            yield pb.DownloadArtifactResponse(chunk=data[start : start + self._chunk_bytes])


def build_binding(servicers: Sequence[object]) -> ServiceBinding:
    """The toolrunner service over its servicers (tools and stored results; skills)."""
    return bind_service(CONTRACTS["toolrunner"].descriptor, list(servicers), pending="")
