"""Wiring of the conversation service: settings, gRPC server, NATS bus, peer clients."""

from knowsphere_clients import RetrievalClient, service_channel
from knowsphere_conversation import SERVICE_NAME
from knowsphere_conversation.adapters.retrieval import RetrievalSearch
from knowsphere_conversation.api.bus import TURN_RUNNER, build_bus
from knowsphere_conversation.api.grpc import build_binding
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_conversation.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        retrieval = service_channel("retrieval", settings.retrieval_addr, settings)
        broker = build_broker(
            settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
        )
        bus = build_bus()
        broker.include_router(bus.router)
        runner = TurnRunner(
            search=RetrievalSearch(RetrievalClient(retrieval), settings.retrieval_top_k),
            publish=bus.publish_turn_event,
        )
        broker.context.set_global(TURN_RUNNER, runner)
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding()],
            grace=settings.shutdown_grace_seconds,
        )
        return [ChannelsComponent([retrieval]), server, BrokerComponent(broker)]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
