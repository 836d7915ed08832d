"""Wiring of the conversation service: settings, gRPC server, NATS consumer, peer channels."""

from knowsphere_contracts.services import CONTRACTS
from knowsphere_conversation import SERVICE_NAME
from knowsphere_conversation.adapters.retrieval import RetrievalSearch
from knowsphere_conversation.api.bus import register_chat_handlers
from knowsphere_conversation.api.grpc import build_binding
from knowsphere_conversation.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer, open_channel
from knowsphere_runtime.settings import load_settings


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        retrieval = open_channel(
            settings.retrieval_addr,
            services=[CONTRACTS["retrieval"].descriptor],
            unary_timeout=settings.rpc_timeout_seconds,
            stream_timeout=settings.rpc_stream_timeout_seconds,
        )
        broker = build_broker(
            settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
        )
        register_chat_handlers(
            broker,
            search=RetrievalSearch(retrieval, settings.retrieval_top_k),
            queue_group=settings.chat_queue_group,
        )
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
