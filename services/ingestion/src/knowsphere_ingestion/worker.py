"""The ingestion workers: ``python -m knowsphere_ingestion.worker`` runs IngestDocuments and its activities.

Workers scale apart from the gRPC API (run as many as the embedding and parsing load needs); they share
its database and object store and take work from the Temporal task queue. Each file is parsed in a
child process of its own within the parse budget (``parsing/budget.py``), so heartbeats and progress
keep flowing while a large PDF is read, and a hostile file cannot keep the worker's memory or a parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from datetime import timedelta

import structlog
from temporalio.worker import Worker

from knowsphere_clients.model_changes import MODELHUB
from knowsphere_ingestion import SERVICE_NAME
from knowsphere_ingestion.activities import IngestionActivities
from knowsphere_ingestion.adapters.batching import EmbedBatcher
from knowsphere_ingestion.api.bus import build_bus
from knowsphere_ingestion.core import Storage, peer_channels, peers
from knowsphere_ingestion.parsing.budget import BudgetedParser
from knowsphere_ingestion.settings import Settings
from knowsphere_ingestion.workflows import IngestDocuments, MigrateEmbeddings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.settings import load_settings
from knowsphere_runtime.workflows import TemporalConnection

log = structlog.get_logger(__name__)


class WorkerComponent:
    """Runs a Temporal worker until stopped; on stop, running activities get the grace period."""

    name = "temporal-worker"

    def __init__(
        self, temporal: TemporalConnection, settings: Settings, activities: IngestionActivities
    ) -> None:
        self._temporal = temporal
        self._settings = settings
        self._activities = activities
        self._worker: Worker | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> object:
        assert self._temporal.client is not None
        self._worker = Worker(
            self._temporal.client,
            task_queue=self._settings.task_queue,
            workflows=[IngestDocuments, MigrateEmbeddings],
            activities=self._activities.all(),
            max_concurrent_activities=self._settings.worker_max_concurrent_activities,
            max_concurrent_workflow_tasks=self._settings.worker_max_concurrent_workflows,
            graceful_shutdown_timeout=timedelta(seconds=self._settings.shutdown_grace_seconds),
        )
        self._task = asyncio.create_task(self._worker.run())
        self._task.add_done_callback(self._ended)
        log.info("worker polling", task_queue=self._settings.task_queue)
        return None

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A worker that stopped polling on its own is useless: stop the process so it is restarted."""
        if self._stopping or task.cancelled():
            return
        log.error("the Temporal worker stopped polling; stopping the process", error=repr(task.exception()))
        os.kill(os.getpid(), signal.SIGTERM)

    async def stop(self, grace: float | None = None) -> None:
        self._stopping = True
        if self._worker is not None:
            await self._worker.shutdown()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        storage = Storage(settings)
        modelhub_channel, retrieval_channel = peer_channels(settings)
        modelhub, retrieval = peers(
            settings, modelhub_channel, retrieval_channel, outage_wait=settings.peer_outage_wait_seconds
        )
        broker = build_broker(
            settings.nats_url,
            client_name=f"{SERVICE_NAME}-worker",
            graceful_timeout=settings.shutdown_grace_seconds,
        )
        bus = build_bus()
        broker.include_router(bus.publishers)  # the workers publish document events
        broker.include_router(bus.model_changes)  # and drop cached model facts when a model changes
        broker.context.set_global(MODELHUB, modelhub)
        parser = BudgetedParser(settings.parse_limits(), processes=settings.parse_processes)
        activities = IngestionActivities(
            store=storage.store,
            blobs=storage.blobs,
            modelhub=modelhub,
            retrieval=retrieval,
            batcher=EmbedBatcher(
                modelhub,
                batch_size=settings.embed_batch_size,
                max_wait=settings.embed_batch_wait_ms / 1000,
                max_in_flight=settings.embed_calls_in_flight,
            ),
            publish=bus.publish,
            parser=parser,
            index_batch_size=settings.index_batch_size,
            chunk_sizes_fit_model=settings.chunk_sizes_fit_model,
        )
        temporal = TemporalConnection(
            settings.temporal_address,
            settings.temporal_namespace,
            connect_timeout=settings.temporal_connect_timeout_seconds,
        )
        return [
            ChannelsComponent([modelhub_channel, retrieval_channel]),
            storage,
            BrokerComponent(broker),
            temporal,
            parser,  # started before the worker polls, stopped after it
            WorkerComponent(temporal, settings, activities),
        ]

    run_service(f"{SERVICE_NAME}-worker", settings, build)


if __name__ == "__main__":
    main()
