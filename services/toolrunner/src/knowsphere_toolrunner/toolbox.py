"""The tools this service runs, built from its settings and ports (the one list to edit when a tool
arrives), the adapters chosen by settings (search provider, sandbox), and the servicers over them."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from knowsphere_egress import EgressClient
from knowsphere_toolrunner.adapters.distiller_modelhub import ChatCompleter, ModelHubDistiller
from knowsphere_toolrunner.adapters.search_searxng import SearxngSearch
from knowsphere_toolrunner.adapters.search_tavily import TavilySearch
from knowsphere_toolrunner.api.grpc import ToolServicer
from knowsphere_toolrunner.api.skills import SkillServicer
from knowsphere_toolrunner.core import McpDiscovery
from knowsphere_toolrunner.domain.catalog import Catalogue
from knowsphere_toolrunner.domain.execution import ExecutionLimits, ToolExecutor
from knowsphere_toolrunner.domain.externalise import ExternaliseLimits, Externaliser
from knowsphere_toolrunner.domain.ports import Distiller, ToolResultStore, ToolStore
from knowsphere_toolrunner.domain.skill_runs import ScriptRunner, SkillRunner, UnavailableSandbox
from knowsphere_toolrunner.domain.tools.base import Tool
from knowsphere_toolrunner.domain.tools.generation import GeneratePptx
from knowsphere_toolrunner.domain.tools.knowledge import (
    DocRetrieval,
    GetDocumentInfo,
    GrepChunks,
    KnowledgeReader,
    ListChunks,
    QueryKnowledgeGraph,
)
from knowsphere_toolrunner.domain.tools.planning import WritePlan
from knowsphere_toolrunner.domain.tools.skills import ExecuteSkillScript, ReadFile
from knowsphere_toolrunner.domain.tools.stored import GetStoredData
from knowsphere_toolrunner.domain.tools.web import WebFetch, WebFetchLimits, WebSearch, WebSearchLimits
from knowsphere_toolrunner.domain.tools.workspace import (
    WorkspaceEdit,
    WorkspaceList,
    WorkspaceRead,
    WorkspaceWrite,
)
from knowsphere_toolrunner.domain.web_search import NoSearchProvider, SearchProvider
from knowsphere_toolrunner.sandbox import SandboxError, ScriptSandbox
from knowsphere_toolrunner.sandbox.pod import PodSandbox
from knowsphere_toolrunner.settings import Settings
from knowsphere_toolrunner.skills.store import SkillStore

log = structlog.get_logger(__name__)


def build_sandbox(settings: Settings) -> ScriptRunner:
    """The skill-script sandbox; where this machine cannot run it (no bwrap, no user namespaces, no
    seccomp; for ``pod``, no API token), a stand-in that refuses each run with the reason, so everything
    else still serves. ``sandbox_backend`` chooses bwrap here or one pod per run on Kubernetes."""
    try:
        sandbox: ScriptSandbox | PodSandbox
        if settings.sandbox_backend == "pod":
            sandbox = PodSandbox(settings.sandbox, settings.pod_sandbox)
        else:
            sandbox = ScriptSandbox(settings.sandbox)
    except SandboxError as error:
        log.warning("sandbox_unavailable", reason=str(error))
        return UnavailableSandbox(str(error))
    log.info("sandbox_ready", backend=settings.sandbox_backend, protections=list(sandbox.protections))
    return sandbox


def build_search_provider(settings: Settings, egress: EgressClient) -> SearchProvider:
    if settings.web_search_provider == "searxng":
        return SearxngSearch(
            egress,
            settings.searxng_url,
            timeout_seconds=settings.web_search_timeout_seconds,
            max_response_bytes=settings.web_search_max_response_bytes,
        )
    if settings.web_search_provider == "tavily":
        return TavilySearch(
            egress,
            settings.tavily_api_key,
            base_url=settings.tavily_url,
            timeout_seconds=settings.web_search_timeout_seconds,
            max_response_bytes=settings.web_search_max_response_bytes,
        )
    return NoSearchProvider()


def build_tools(
    settings: Settings,
    reader: KnowledgeReader,
    store: ToolStore,
    skills: SkillStore,
    skill_runner: SkillRunner,
    egress: EgressClient,
) -> list[Tool]:
    knowledge = settings.knowledge_tool_timeout_seconds
    return [
        WritePlan(),
        DocRetrieval(
            reader,
            default_top_k=settings.doc_retrieval_default_top_k,
            max_top_k=settings.doc_retrieval_max_top_k,
            timeout=knowledge,
        ),
        GrepChunks(reader, timeout=knowledge),
        ListChunks(
            reader,
            max_selectors=settings.list_chunks_max_selectors,
            max_neighbours=settings.list_chunks_max_neighbours,
            timeout=knowledge,
        ),
        GetDocumentInfo(reader, timeout=knowledge),
        QueryKnowledgeGraph(reader, timeout=knowledge),
        GeneratePptx(
            store,
            max_slides=settings.pptx_max_slides,
            max_bullets=settings.pptx_max_bullets,
            max_bytes=settings.artifact_max_bytes,
            timeout=settings.generation_tool_timeout_seconds,
        ),
        GetStoredData(store, page_chars=settings.stored_page_chars, timeout=settings.tool_timeout_seconds),
        ReadFile(skills, max_chars=settings.skill_read_text_chars, timeout=settings.tool_timeout_seconds),
        ExecuteSkillScript(
            skill_runner,
            settings.sandbox,
            timeout=settings.skill_script_timeout_seconds,
            workspace=store,
            workspace_limits=settings.workspace,
        ),
        WorkspaceList(store, settings.workspace),
        WorkspaceRead(store, settings.workspace),
        WorkspaceWrite(store, settings.workspace),
        WorkspaceEdit(store, settings.workspace),
        WebSearch(
            build_search_provider(settings, egress),
            WebSearchLimits(
                default_results=settings.web_search_default_results,
                max_results=settings.web_search_max_results,
                timeout_seconds=settings.web_tool_timeout_seconds,
            ),
        ),
        WebFetch(
            egress,
            WebFetchLimits(
                max_bytes=settings.web_fetch_max_bytes,
                fetch_timeout_seconds=settings.web_fetch_timeout_seconds,
                max_chars=settings.web_fetch_max_chars,
                max_pdf_pages=settings.web_fetch_max_pdf_pages,
                timeout_seconds=settings.web_tool_timeout_seconds,
            ),
        ),
    ]


def build_executor(
    settings: Settings, catalogue: Catalogue, store: ToolResultStore, distiller: Distiller
) -> ToolExecutor:
    externaliser = Externaliser(
        store,
        distiller,
        ExternaliseLimits(
            over_chars=settings.externalise_over_chars,
            over_items=settings.externalise_over_items,
            distil_over_chars=settings.distil_over_chars,
            distil_target_chars=settings.distil_target_chars,
            preview_chars=settings.summary_preview_chars,
            page_chars=settings.stored_page_chars,
        ),
    )
    return ToolExecutor(
        catalogue,
        externaliser,
        ExecutionLimits(
            max_attempts=settings.max_attempts,
            retry_backoff_seconds=settings.retry_backoff_seconds,
            default_timeout_seconds=settings.tool_timeout_seconds,
        ),
        snippet_chars=settings.source_snippet_chars,
    )


@dataclass(frozen=True)
class Servicers:
    tools: ToolServicer
    skills: SkillServicer

    @property
    def all(self) -> list[object]:
        return [self.tools, self.skills]


def build_servicers(
    settings: Settings,
    store: ToolStore,
    reader: KnowledgeReader,
    models: ChatCompleter,
    skills: SkillStore,
    sandbox: ScriptRunner,
    egress: EgressClient,
) -> Servicers:
    """The toolrunner's servicers over its store, skills, sandbox, egress guard and peers (retrieval's
    and modelhub's clients)."""
    distiller = ModelHubDistiller(
        models,
        model_id=settings.distil_model_id,
        timeout_seconds=settings.distil_timeout_seconds,
        max_input_chars=settings.distil_max_input_chars,
    )
    skill_runner = SkillRunner(skills, sandbox, store)
    catalogue = Catalogue(build_tools(settings, reader, store, skills, skill_runner, egress))
    tools = ToolServicer(
        catalogue,
        build_executor(settings, catalogue, store, distiller),
        store,
        skills,
        snippet_chars=settings.source_snippet_chars,
        artifact_chunk_bytes=settings.artifact_chunk_bytes,
    )
    skill_methods = SkillServicer(
        skills,
        skill_runner,
        page_size=settings.skills_page_size,
        max_page_size=settings.skills_max_page_size,
        inline_output_bytes=settings.skill_output_inline_bytes,
    )
    return Servicers(tools, skill_methods)


def build_mcp_discovery(
    settings: Settings, egress: EgressClient, servicers: Servicers, sandbox: ScriptRunner | None = None
) -> McpDiscovery:
    """The component that offers the configured MCP servers' tools once it has listed them (stdio
    servers run in ``sandbox``)."""
    return McpDiscovery(
        settings.mcp_servers,
        egress,
        servicers.tools.add_tools,
        tool_timeout_seconds=settings.mcp_tool_timeout_seconds,
        discovery_timeout_seconds=settings.mcp_discovery_timeout_seconds,
        max_tools_per_server=settings.mcp_max_tools_per_server,
        sandbox=sandbox,
        stdio_max_message_bytes=settings.mcp_stdio_max_message_bytes,
    )
