"""Wiring of the gateway: settings, peer clients, NATS, the HTTP API and a gRPC health endpoint."""

from functools import partial

from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from knowsphere_clients import (
    ConversationClient,
    IngestionClient,
    MemoryClient,
    ModelHubClient,
    RetrievalClient,
    ToolRunnerClient,
    service_channel,
)
from knowsphere_contracts.events import CHAT_EVENTS_STREAM, ChatTurnEvent
from knowsphere_egress import EgressClient
from knowsphere_gateway import SERVICE_NAME
from knowsphere_gateway.adapters.applications_sql import ApplicationStoreComponent, SqlApplicationStore
from knowsphere_gateway.adapters.evaluations_sql import SqlEvaluationStore
from knowsphere_gateway.adapters.http_server import HttpServerComponent
from knowsphere_gateway.adapters.tokens_sql import SqlTokenStore, TokenStoreComponent
from knowsphere_gateway.adapters.wecom_api import WeComApi
from knowsphere_gateway.api.bus import build_bus
from knowsphere_gateway.api.evaluation_runs import EvaluationRuns
from knowsphere_gateway.api.http import GatewayContext, create_app
from knowsphere_gateway.domain.channel_config import ChannelSecrets
from knowsphere_gateway.domain.tokens import LastUsedFlusher, TokenHasher, TokenService
from knowsphere_gateway.settings import Settings
from knowsphere_runtime.bus import Fanout, build_broker
from knowsphere_runtime.identity import Identity
from knowsphere_runtime.lifecycle import BrokerComponent, ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer, check_health, open_channel
from knowsphere_runtime.settings import load_settings
from knowsphere_runtime.streams import read_subject


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        channels = {
            name: service_channel(name, address, settings)
            for name, address in settings.peer_addresses().items()
        }
        # The gateway's own gRPC endpoint (health for probes) is checked like any other service.
        own = open_channel(f"127.0.0.1:{settings.grpc_port}")
        probes = {"gateway": partial(check_health, own, "", settings.health_check_timeout_seconds)}
        probes.update(
            {
                name: partial(check_health, channel, "", settings.health_check_timeout_seconds)
                for name, channel in channels.items()
            }
        )
        broker = build_broker(
            settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
        )
        chat_events: Fanout[ChatTurnEvent] = Fanout()
        bus = build_bus(chat_events)
        broker.include_router(bus.router)
        token_store = SqlTokenStore(settings.sqlalchemy_url())
        tokens = TokenService(token_store, TokenHasher(settings.hash_key()))
        application_store = SqlApplicationStore(settings.sqlalchemy_url())
        # WeCom channels: their secrets under MASTER_KEY (checked at start-up), WeCom's API behind the
        # egress guard.
        channel_secrets = ChannelSecrets(settings.key_ring())
        wecom_api = WeComApi(EgressClient(settings.egress), settings.wecom_api_base)
        proxy_secret = settings.proxy_secret.get_secret_value() if settings.proxy_secret else None
        retrieval = RetrievalClient(channels["retrieval"])
        evaluations = EvaluationRuns(
            SqlEvaluationStore(settings.sqlalchemy_url()), retrieval, settings.evaluations()
        )
        app = create_app(
            GatewayContext(
                bus=bus,
                chat_events=chat_events,
                health_probes=probes,
                bus_connected=partial(broker.ping, 0.5),
                chat_turn_timeout=settings.chat_turn_timeout_seconds,
                web_dist=settings.web_dist,
                tokens=tokens,
                applications=application_store,
                evaluations=evaluations,
                local_identity=(
                    Identity(settings.local_tenant_id, settings.local_user_id)
                    if settings.local_mode
                    else None
                ),
                proxy_secret=proxy_secret,
                allowed_hosts=settings.host_allow_list(),
                allowed_origins=frozenset(settings.allowed_origins),
                token_default_ttl_days=settings.token_default_ttl_days,
                token_max_ttl_days=settings.token_max_ttl_days,
                limits=settings.limits(),
                channel_secrets=channel_secrets,
                wecom_api=wecom_api,
                wecom=settings.wecom(),
                modelhub=ModelHubClient(channels["modelhub"]),
                retrieval=retrieval,
                ingestion=IngestionClient(channels["ingestion"]),
                conversation=ConversationClient(channels["conversation"]),
                memory=MemoryClient(channels["memory"]),
                toolrunner=ToolRunnerClient(channels["toolrunner"]),
                stored_turn_events=lambda tenant_id, turn_id: read_subject(
                    broker.config.connection_state.stream,
                    CHAT_EVENTS_STREAM,
                    ChatTurnEvent.subject_for(tenant_id, turn_id),
                ),
            )
        )
        FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz")
        server = GrpcServer(
            name=SERVICE_NAME, bind=settings.grpc_bind, bindings=[], grace=settings.shutdown_grace_seconds
        )
        return [
            TokenStoreComponent(token_store),
            ApplicationStoreComponent(application_store, channel_secrets),
            LastUsedFlusher(tokens, settings.token_last_used_flush_seconds),
            ChannelsComponent([*channels.values(), own]),
            # After the channels: stopping cancels the runs while retrieval can still be reached.
            evaluations,
            BrokerComponent(broker),
            server,
            HttpServerComponent(app, settings.http_host, settings.http_port),
        ]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
