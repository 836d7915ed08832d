"""What the gRPC API and the workers share: the document database, the object store, peer channels.

Both processes build them from the same settings; each adds its own parts (the API its server and
reconciler, :mod:`knowsphere_ingestion.api.reconciler`; the worker the Temporal worker).
"""

from __future__ import annotations

import grpc

from knowsphere_clients import ModelHubClient, RetrievalClient, service_channel
from knowsphere_ingestion.adapters.store import IngestionStore
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.storage.blobs import BlobStore
from knowsphere_ingestion.storage.factory import blob_store_for
from knowsphere_runtime.lifecycle import StartupError


class Storage:
    """The database and the object store as one lifecycle component."""

    name = "ingestion-storage"

    def __init__(self, settings: Settings) -> None:
        data = settings.data_dir
        self.store = IngestionStore(settings.database_url or f"sqlite+aiosqlite:///{data}/ingestion.db")
        self.blobs: BlobStore = blob_store_for(settings)

    async def start(self) -> object:
        try:
            await self.store.open()
        except Exception as error:
            raise StartupError(f"cannot open the document database at {self.store.url}: {error}") from error
        try:
            await self.blobs.start()
        except Exception as error:
            raise StartupError(f"cannot open the object store: {error}") from error
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self.blobs.close()
        await self.store.close()


def peer_channels(settings: Settings) -> tuple[grpc.aio.Channel, grpc.aio.Channel]:
    """Channels to modelhub and retrieval, with the deadlines of the settings."""
    return (
        service_channel("modelhub", settings.modelhub_addr, settings),
        service_channel("retrieval", settings.retrieval_addr, settings),
    )


def peers(
    settings: Settings, modelhub: grpc.aio.Channel, retrieval: grpc.aio.Channel, *, outage_wait: float = 0.0
) -> tuple[ModelHubClient, RetrievalClient]:
    """The clients of modelhub and retrieval over the channels of :func:`peer_channels`; their calls
    wait out an outage of either for ``outage_wait`` seconds (the worker's stages do; the API answering
    a user does not)."""
    return (
        ModelHubClient(modelhub, embed_timeout=settings.embed_timeout_seconds, outage_wait=outage_wait),
        RetrievalClient(retrieval, outage_wait=outage_wait),
    )
