"""The tools this service runs, built from its settings and ports: the one list to edit when a tool
arrives. A web or skills tool replaces the placeholder of the same name from
:mod:`knowsphere_toolrunner.domain.tools.pending`."""

from __future__ import annotations

from knowsphere_toolrunner.adapters.distiller_modelhub import ChatCompleter, ModelHubDistiller
from knowsphere_toolrunner.api.grpc import ToolServicer
from knowsphere_toolrunner.domain.catalog import Catalogue
from knowsphere_toolrunner.domain.execution import ExecutionLimits, ToolExecutor
from knowsphere_toolrunner.domain.externalise import ExternaliseLimits, Externaliser
from knowsphere_toolrunner.domain.ports import Distiller, ToolResultStore
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
from knowsphere_toolrunner.domain.tools.pending import pending_tools
from knowsphere_toolrunner.domain.tools.planning import WritePlan
from knowsphere_toolrunner.domain.tools.stored import GetStoredData
from knowsphere_toolrunner.settings import Settings


def build_tools(settings: Settings, reader: KnowledgeReader, store: ToolResultStore) -> list[Tool]:
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
        *pending_tools(),
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


def build_servicer(
    settings: Settings, store: ToolResultStore, reader: KnowledgeReader, models: ChatCompleter
) -> ToolServicer:
    """The toolrunner's servicer over its store and peers (retrieval's and modelhub's clients)."""
    distiller = ModelHubDistiller(
        models,
        model_id=settings.distil_model_id,
        timeout_seconds=settings.distil_timeout_seconds,
        max_input_chars=settings.distil_max_input_chars,
    )
    catalogue = Catalogue(build_tools(settings, reader, store))
    return ToolServicer(
        catalogue,
        build_executor(settings, catalogue, store, distiller),
        store,
        snippet_chars=settings.source_snippet_chars,
        artifact_chunk_bytes=settings.artifact_chunk_bytes,
    )
