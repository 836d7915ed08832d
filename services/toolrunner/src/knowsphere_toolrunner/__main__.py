"""Wiring of the toolrunner service: store, skills, sandbox, egress guard, peers (retrieval, modelhub),
tools, MCP servers' tools, gRPC server. No logic."""

from knowsphere_clients import ModelHubClient, RetrievalClient, service_channel
from knowsphere_egress import EgressClient
from knowsphere_runtime.lifecycle import ChannelsComponent, Component, run_service
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.settings import load_settings
from knowsphere_toolrunner import SERVICE_NAME
from knowsphere_toolrunner.adapters.sql_store import SqlToolResultStore
from knowsphere_toolrunner.api.grpc import build_binding
from knowsphere_toolrunner.core import EgressComponent, ToolRunnerCore
from knowsphere_toolrunner.settings import Settings
from knowsphere_toolrunner.skills import SkillStore
from knowsphere_toolrunner.toolbox import build_mcp_discovery, build_sandbox, build_servicers


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        store = SqlToolResultStore(settings.result_store_url())
        retrieval_channel = service_channel("retrieval", settings.retrieval_addr, settings)
        modelhub_channel = service_channel("modelhub", settings.modelhub_addr, settings)
        egress = EgressClient(settings.egress)
        sandbox = build_sandbox(settings)
        servicers = build_servicers(
            settings,
            store,
            RetrievalClient(retrieval_channel),
            ModelHubClient(modelhub_channel),
            SkillStore(settings.data_dir, settings.skills),
            sandbox,
            egress,
        )
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[build_binding(servicers.all)],
            grace=settings.shutdown_grace_seconds,
        )
        return [
            ChannelsComponent([retrieval_channel, modelhub_channel]),
            ToolRunnerCore(settings, store),
            EgressComponent(egress),
            # Before the server: tools offered from the start.
            build_mcp_discovery(settings, egress, servicers, sandbox),
            server,
        ]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
