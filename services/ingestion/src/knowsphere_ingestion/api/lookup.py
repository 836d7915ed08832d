"""The caller's knowledge bases and documents as requests name them, and the page size of list requests.

Every lookup is scoped to the caller's tenant, so an id of another tenant's knowledge base or document
answers NOT_FOUND, exactly like an id that never existed.
"""

from __future__ import annotations

from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.domain.records import Document, KnowledgeBase
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import invalid, not_found


async def knowledge_base(
    store: IngestionStore, kb_id: str, field: str = "knowledge_base_id", *, with_counts: bool = True
) -> KnowledgeBase:
    """The caller's knowledge base ``kb_id`` (named by request ``field``)."""
    if not kb_id:
        raise invalid(field, "required")
    kb = await store.get_kb(require_identity().tenant_id, kb_id, with_counts=with_counts)
    if kb is None:
        raise not_found("knowledge base", kb_id)
    return kb


async def document(store: IngestionStore, document_id: str) -> Document:
    """The caller's document ``document_id`` (one being deleted counts as gone)."""
    if not document_id:
        raise invalid("document_id", "required")
    found = await store.get_document(require_identity().tenant_id, document_id)
    if found is None:
        raise not_found("document", document_id)
    return found


def page_size(settings: Settings, requested: int) -> int:
    """The page size a list request asked for, the default when it asked for none."""
    if requested < 0:
        raise invalid("page_size", f"{requested} is negative")
    if requested > settings.max_page_size:
        raise invalid("page_size", f"{requested}; the limit is {settings.max_page_size}")
    return requested or settings.default_page_size
