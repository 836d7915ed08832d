"""Wiring of the memory service: settings, SQL store, gRPC server, (with a modelhub address) the model
channel for compaction and (with a NATS URL) the durable consumer of turn-completed events. No logic
lives here."""

from knowsphere_clients import ModelHubClient, service_channel
from knowsphere_memory import SERVICE_NAME
from knowsphere_memory.adapters.sql_store import SqlMemoryStore
from knowsphere_memory.api.bus import TURN_RECORDER, TurnRecorder, build_bus
from knowsphere_memory.api.grpc import build_binding
from knowsphere_memory.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings


class StoreComponent:
    """The SQL store: opened (tables created) first, closed last."""

    name = "store"

    def __init__(self, store: SqlMemoryStore) -> None:
        self.store = store

    async def start(self) -> object:
        await self.store.open()
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self.store.close()


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        store = SqlMemoryStore(settings.sqlalchemy_url())
        components: list[Component] = [StoreComponent(store)]
        if settings.nats_url:  # without NATS memory serves gRPC only (RecordCitedDocuments still counts)
            bus = build_bus(
                durable_name=settings.consumer_durable_name,
                max_deliver=settings.consumer_max_deliver,
                ack_wait_seconds=settings.consumer_ack_wait_seconds,
            )
            broker = build_broker(
                settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
            )
            broker.include_router(bus.router)
            broker.context.set_global(TURN_RECORDER, TurnRecorder(store, settings))
            components.append(BrokerComponent(broker))
        modelhub: ModelHubClient | None = None
        if settings.modelhub_addr:  # without modelhub compaction uses the deterministic extract
            channel = service_channel("modelhub", settings.modelhub_addr, settings)
            modelhub = ModelHubClient(channel)
            components.append(ChannelsComponent([channel]))
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding(settings=settings, store=store, modelhub=modelhub)],
            grace=settings.shutdown_grace_seconds,
        )
        return [*components, server]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
