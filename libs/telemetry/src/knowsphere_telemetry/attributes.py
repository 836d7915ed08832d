"""The custom span attributes KnowSphere sets, registered in one place.

Standard attributes (``rpc.*``, ``messaging.*``, ``gen_ai.*``, ``http.*``) come from the
instrumentations and semantic conventions; only attributes of our own domain live here. Code sets
attributes through these names, never a ``"ks.…"`` literal (a test holds every service to it).
"""

from typing import Final

# --- who and where -------------------------------------------------------------------------------
TENANT_ID: Final = "ks.tenant.id"
USER_ID: Final = "ks.user.id"
SESSION_ID: Final = "ks.session.id"
TURN_ID: Final = "ks.turn.id"
KNOWLEDGE_BASE_ID: Final = "ks.knowledge_base.id"
KNOWLEDGE_BASE_IDS: Final = "ks.knowledge_base.ids"
DOCUMENT_ID: Final = "ks.document.id"
ERROR_CODE: Final = "ks.error.code"

# --- counts of what a step produced ----------------------------------------------------------------
RESULT_COUNT: Final = "ks.result.count"
PARENT_COUNT: Final = "ks.parent.count"

# --- retrieval evaluations -------------------------------------------------------------------------
EVALUATION_QUERIES: Final = "ks.evaluation.queries"
EVALUATION_MODES: Final = "ks.evaluation.modes"

# --- uploads and files -----------------------------------------------------------------------------
UPLOAD_FILES: Final = "ks.upload.files"
UPLOAD_REFUSED: Final = "ks.upload.refused"
FILE_DECLARED_SIZE_BYTES: Final = "ks.file.declared_size_bytes"
FILE_SIZE_BYTES: Final = "ks.file.size_bytes"
FILE_EXTENSION: Final = "ks.file.extension"
DOCUMENT_DUPLICATE: Final = "ks.document.duplicate"
DOCUMENT_PAGES: Final = "ks.document.pages"
DOCUMENT_BLOCKS: Final = "ks.document.blocks"
DOCUMENT_COUNT: Final = "ks.document.count"
PARSE_PEAK_RSS_BYTES: Final = "ks.parse.peak_rss_bytes"
PARSE_CPU_SECONDS: Final = "ks.parse.cpu_seconds"

# --- ingestion stages ------------------------------------------------------------------------------
INGESTION_STAGE: Final = "ks.ingestion.stage"
CHUNKS: Final = "ks.chunks"
CHUNKS_RESUMED: Final = "ks.chunks.resumed"
EMBEDDING_MODEL_ID: Final = "ks.embedding.model_id"

# --- retrieval -------------------------------------------------------------------------------------
EMBED_MODELS: Final = "ks.embed.models"
FUSION_METHOD: Final = "ks.fusion.method"
EXPANSION_METHOD: Final = "ks.expansion.method"
EXPANSION_QUERIES: Final = "ks.expansion.queries"
RERANK_SKIPPED: Final = "ks.rerank.skipped"

# --- model calls -----------------------------------------------------------------------------------
MODEL_ID: Final = "ks.model.id"
MODEL_PURPOSE: Final = "ks.model.purpose"
LATENCY_MS: Final = "ks.latency_ms"
EMBED_TEXTS: Final = "ks.embed.texts"
RERANK_DOCUMENTS: Final = "ks.rerank.documents"
DECIDE_METHOD: Final = "ks.decide.method"


def registered() -> frozenset[str]:
    """Every attribute name registered here."""
    return frozenset(value for name, value in globals().items() if name.isupper() and isinstance(value, str))


# --- tool calls (toolrunner) -----------------------------------------------------------------------
TOOL_NAME: Final = "ks.tool.name"
TOOL_ATTEMPT: Final = "ks.tool.attempt"
TOOL_ATTEMPTS: Final = "ks.tool.attempts"
TOOL_RESULT_CHARS: Final = "ks.tool.result_chars"
TOOL_STORED: Final = "ks.tool.stored"
TOOL_DISTILLED: Final = "ks.tool.distilled"
TOOL_DEGRADED: Final = "ks.tool.degraded"
TOOL_SOURCES: Final = "ks.tool.sources"

# --- conversation turns ----------------------------------------------------------------------------
INTENT: Final = "ks.turn.intent"
ROUTE: Final = "ks.turn.route"
ORCHESTRATION_MODE: Final = "ks.turn.orchestration_mode"
"""The session's orchestrator mode (single, conditional, knowledge_base …)."""
AGENT_ID: Final = "ks.turn.agent_id"
"""The agent an orchestrator handed the turn to."""
DECISION_METHOD: Final = "ks.turn.decision_method"
ANSWER_KIND: Final = "ks.turn.answer_kind"
CITATIONS_REMOVED: Final = "ks.turn.citations_removed"
SOURCES_COUNT: Final = "ks.turn.sources"

# --- memory: handoff compaction and document affinity ----------------------------------------------
COMPACTION_CONTEXT_WINDOW: Final = "ks.compaction.context_window"
COMPACTION_ARCHIVED_MESSAGES: Final = "ks.compaction.archived_messages"
COMPACTION_KEPT_TOKENS: Final = "ks.compaction.kept_tokens"
COMPACTION_RESULT_REFS: Final = "ks.compaction.result_refs"
COMPACTION_DEGRADED: Final = "ks.compaction.degraded"
MEMORY_TURN_RECORDED: Final = "ks.memory.turn_recorded"
MEMORY_CITED_DOCUMENTS: Final = "ks.memory.cited_documents"
MEMORY_STATEMENT_FORM: Final = "ks.memory.statement_form"
MEMORY_REMEMBERED_ITEMS: Final = "ks.memory.remembered_items"
MEMORY_FORGOTTEN_ITEMS: Final = "ks.memory.forgotten_items"
COMPACTION_HANDOFF_TOKENS: Final = "ks.compaction.handoff_tokens"
COMPACTION_SUMMARY_REVISION: Final = "ks.compaction.summary_revision"
COMPACTION_TRIGGER_TOKENS: Final = "ks.compaction.trigger_prompt_tokens"
