"""Wiring of the ingestion API: storage, peers, Temporal client, progress events, gRPC server.

The workflow workers run as their own process: ``python -m knowsphere_ingestion.worker``.
"""

from temporalio.client import Client

from knowsphere_clients.model_changes import MODELHUB
from knowsphere_ingestion import SERVICE_NAME
from knowsphere_ingestion.api.bus import DOCUMENT_EVENTS, DocumentEvent, build_bus
from knowsphere_ingestion.api.documents import DocumentRemoval
from knowsphere_ingestion.api.grpc import build_binding
from knowsphere_ingestion.api.reconciler import Reconciler
from knowsphere_ingestion.api.runs import Runs
from knowsphere_ingestion.core import Storage, peer_channels, peers
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings
from knowsphere_runtime.workflows import TemporalConnection


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        storage = Storage(settings)
        modelhub_channel, retrieval_channel = peer_channels(settings)
        modelhub, retrieval = peers(settings, modelhub_channel, retrieval_channel)
        temporal = TemporalConnection(
            settings.temporal_address,
            settings.temporal_namespace,
            connect_timeout=settings.temporal_connect_timeout_seconds,
        )
        broker = build_broker(
            settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
        )
        bus = build_bus()
        events: Fanout[DocumentEvent] = Fanout()
        broker.include_router(bus.subscribers)
        broker.include_router(bus.model_changes)
        broker.include_router(bus.deletions)
        broker.context.set_global(DOCUMENT_EVENTS, events)
        broker.context.set_global(MODELHUB, modelhub)

        def client() -> Client:
            if temporal.client is None:
                raise RuntimeError("Temporal is not connected")
            return temporal.client

        runs = Runs(settings=settings, store=storage.store, temporal=client)
        removal = DocumentRemoval(
            store=storage.store,
            blobs=storage.blobs,
            retrieval=retrieval,
            runs=runs,
            announce=bus.announce_deleted,
        )
        binding = build_binding(
            settings=settings,
            store=storage.store,
            blobs=storage.blobs,
            modelhub=modelhub,
            retrieval=retrieval,
            runs=runs,
            removal=removal,
            events=events,
        )
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[binding],
            grace=settings.shutdown_grace_seconds,
        )
        return [
            ChannelsComponent([modelhub_channel, retrieval_channel]),
            storage,
            temporal,
            BrokerComponent(broker),
            Reconciler(storage.store, removal, runs),
            server,
        ]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
