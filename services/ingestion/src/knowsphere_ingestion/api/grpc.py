"""The gRPC face of ingestion: one IngestionService made of servicers split by concern.

- :mod:`.knowledge_bases`: create, read, list, update, delete knowledge bases;
- :mod:`.uploads`: the upload policy and the upload streams;
- :mod:`.documents`: read, list, delete, re-ingest documents;
- :mod:`.progress`: progress watches, fed by the bus.

Handlers read the tenant from the caller's identity and pass it to every store call, so ids of another
tenant's knowledge bases or documents answer NOT_FOUND. Bad input answers INVALID_ARGUMENT naming the
field and the limit, before anything is stored.
"""

from __future__ import annotations

from knowsphere_clients import ModelHubClient, RetrievalClient
from knowsphere_contracts.services import CONTRACTS
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.api.bus import DocumentEvent
from knowsphere_ingestion.api.documents import DocumentRemoval, Documents
from knowsphere_ingestion.api.knowledge_bases import KnowledgeBases
from knowsphere_ingestion.api.progress import ProgressWatch
from knowsphere_ingestion.api.runs import Runs
from knowsphere_ingestion.api.uploads import Uploads
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore
from knowsphere_runtime.bus import Fanout
from knowsphere_runtime.rpc import ServiceBinding, bind_service


def build_binding(
    *,
    settings: Settings,
    store: IngestionStore,
    blobs: BlobStore,
    modelhub: ModelHubClient,
    retrieval: RetrievalClient,
    runs: Runs,
    removal: DocumentRemoval,
    events: Fanout[DocumentEvent],
) -> ServiceBinding:
    """IngestionService, every method implemented by one of its servicers."""
    servicers = [
        KnowledgeBases(
            settings=settings,
            store=store,
            blobs=blobs,
            modelhub=modelhub,
            retrieval=retrieval,
            runs=runs,
            announce=removal.announce,
        ),
        Uploads(settings=settings, store=store, blobs=blobs, modelhub=modelhub, runs=runs),
        Documents(settings=settings, store=store, runs=runs, removal=removal),
        ProgressWatch(settings=settings, store=store, events=events),
    ]
    return bind_service(CONTRACTS["ingestion"].descriptor, servicers, pending="")
