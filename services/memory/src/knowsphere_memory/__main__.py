"""Wiring of the memory service: settings and its gRPC server. No logic lives here."""

from knowsphere_memory import SERVICE_NAME
from knowsphere_memory.api.grpc import build_binding
from knowsphere_memory.settings import Settings
from knowsphere_runtime.lifecycle import run_grpc_service
from knowsphere_runtime.settings import load_settings


def main() -> None:
    run_grpc_service(SERVICE_NAME, load_settings(Settings), lambda: [build_binding()])


if __name__ == "__main__":
    main()
