"""Wiring of the modelhub service: store, key ring, registry, provider adapters, bus, gRPC server."""

import os

from knowsphere_modelhub import SERVICE_NAME
from knowsphere_modelhub.adapters.anthropic import AnthropicAdapter
from knowsphere_modelhub.adapters.http import ProviderHttp
from knowsphere_modelhub.adapters.local_embedding import LocalEmbeddingAdapter
from knowsphere_modelhub.adapters.openai_compat import OpenAICompatibleAdapter
from knowsphere_modelhub.adapters.sql_store import SqlModelStore
from knowsphere_modelhub.api.bus import ModelHubBus, build_bus
from knowsphere_modelhub.api.grpc import build_binding
from knowsphere_modelhub.core import ModelHubCore
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.domain.providers import PROVIDERS
from knowsphere_modelhub.domain.registry import Registry
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import BrokerComponent, Component, StartupError, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.secrets import KeyRing
from knowsphere_runtime.settings import load_settings
from knowsphere_telemetry import build_llm_observer


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        store = SqlModelStore(settings.sqlalchemy_url())
        keyring = KeyRing.from_strings(settings.master_key.get_secret_value(), settings.master_key_previous)
        try:
            registry = Registry(store, keyring, PROVIDERS, os.environ, egress=settings.egress)
        except (ModelError, ValueError) as error:  # a malformed KS_MODELHUB_<TYPE>_* fallback
            raise StartupError(str(error)) from error
        http = ProviderHttp.from_settings(settings)
        local = LocalEmbeddingAdapter(
            batch_size=settings.local_embedding_batch,
            threads=settings.local_embedding_threads or None,
            cache_dir=settings.model_cache(),
        )
        adapters = {
            "openai": OpenAICompatibleAdapter(
                http,
                PROVIDERS,
                max_image_bytes=settings.max_image_bytes,
                max_audio_bytes=settings.max_audio_bytes,
            ),
            "anthropic": AnthropicAdapter(http, PROVIDERS, max_image_bytes=settings.max_image_bytes),
            "local": local,
        }
        core = ModelHubCore(settings, store, keyring, registry, local, list(adapters.values()))
        components: list[Component] = [core]
        bus: ModelHubBus | None = None
        if settings.nats_url:  # without NATS modelhub serves as ever, announcing nothing
            bus = build_bus()
            broker = build_broker(
                settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
            )
            broker.include_router(bus.publishers)
            # Before the server, so it is connected before the first call and closed after the last.
            components.append(BrokerComponent(broker))
        binding = build_binding(registry, adapters, settings, build_llm_observer(), changes=bus)
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[binding],
            grace=settings.shutdown_grace_seconds,
            options=[
                ("grpc.max_receive_message_length", settings.max_audio_bytes + 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ],
        )
        return [*components, server]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
