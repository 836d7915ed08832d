"""Wiring of the ingestion service: settings, Temporal client, gRPC server. No logic lives here."""

from knowsphere_ingestion import SERVICE_NAME
from knowsphere_ingestion.api.grpc import build_binding
from knowsphere_ingestion.settings import Settings
from knowsphere_runtime.lifecycle import Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings
from knowsphere_runtime.workflows import TemporalConnection


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        temporal = TemporalConnection(
            settings.temporal_address,
            settings.temporal_namespace,
            connect_timeout=settings.temporal_connect_timeout_seconds,
        )
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding()],
            grace=settings.shutdown_grace_seconds,
        )
        return [temporal, server]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
