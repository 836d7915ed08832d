"""Wiring of the modelhub service: settings, gRPC server, lifecycle. No logic lives here."""

from knowsphere_modelhub import SERVICE_NAME
from knowsphere_modelhub.api.grpc import build_binding
from knowsphere_modelhub.settings import Settings
from knowsphere_runtime.lifecycle import Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding()],
            grace=settings.shutdown_grace_seconds,
        )
        return [server]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
