"""The knowledge-base tools, each one call to retrieval's RPC of the same purpose (see ``common``)."""

from knowsphere_toolrunner.domain.tools.knowledge.common import KnowledgeReader
from knowsphere_toolrunner.domain.tools.knowledge.graph import QueryKnowledgeGraph
from knowsphere_toolrunner.domain.tools.knowledge.reading import GetDocumentInfo, ListChunks
from knowsphere_toolrunner.domain.tools.knowledge.search import DocRetrieval, GrepChunks

__all__ = [
    "DocRetrieval",
    "GetDocumentInfo",
    "GrepChunks",
    "KnowledgeReader",
    "ListChunks",
    "QueryKnowledgeGraph",
]
