"""Start-up and shutdown of retrieval's stores: the chunk store, the indexes and the graph server."""

from __future__ import annotations

import asyncio

import structlog

from knowsphere_retrieval.adapters.graph_bolt import BoltGraphStore
from knowsphere_retrieval.adapters.graph_server import EmbeddedBoltServer
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.analysis import Analyzer
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.lifecycle import StartupError

log = structlog.get_logger(__name__)


class RetrievalCore:
    name = "retrieval-core"

    def __init__(self, settings: Settings, stores: Stores, analyzer: Analyzer | None = None) -> None:
        self._analyzer = analyzer
        self._settings = settings
        self._stores = stores
        self._graph_server: EmbeddedBoltServer | None = None
        self._graph: BoltGraphStore | None = None

    async def start(self) -> object:
        settings = self._settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            await self._stores.chunks.open()
        except Exception as error:
            # A server URL may hold a password: name the setting rather than print it.
            where = "KS_RETRIEVAL_DATABASE_URL" if settings.database_url else settings.chunk_store_url()
            raise StartupError(f"cannot open the chunk store ({where}): {error}") from error
        if self._analyzer is not None:
            # Load jieba's dictionary now rather than in the first Chinese request (about a second).
            await asyncio.to_thread(self._analyzer.warm_up)
        if settings.neo4j_url:
            self._graph = BoltGraphStore(settings.neo4j_url, settings.neo4j_user, settings.neo4j_password)
            self._stores.attach_graph(self._graph, "neo4j")
        elif settings.graph_enabled:
            self._graph_server = EmbeddedBoltServer(settings.data_dir / "graph", settings.graph_bolt_port)
            try:
                await self._graph_server.start()
            except Exception as error:
                raise StartupError(
                    f"cannot start the embedded graph server (ArcadeDB over Bolt): {error}"
                ) from error
            credentials = self._graph_server.credentials
            self._graph = BoltGraphStore(
                self._graph_server.uri, credentials.user, credentials.password, self._graph_server.database
            )
            self._stores.attach_graph(self._graph, "arcadedb-embedded (bolt)")
            log.info("graph server started", uri=self._graph_server.uri)
        return None

    async def stop(self, grace: float | None = None) -> None:
        if self._graph is not None:
            await self._graph.close()
        if self._graph_server is not None:
            await self._graph_server.stop()
        await self._stores.lexical.close()
        await self._stores.vectors.close()
        await self._stores.chunks.close()
