"""Wiring of the conversation service: settings, stores, gRPC server, NATS bus, peer clients."""

from collections.abc import Sequence

from knowsphere.memory.v1 import memory_pb2
from knowsphere_clients import (
    MemoryClient,
    ModelHubClient,
    RetrievalClient,
    ToolRunnerClient,
    service_channel,
)
from knowsphere_conversation import SERVICE_NAME
from knowsphere_conversation.adapters.checkpoints import CheckpointStore
from knowsphere_conversation.adapters.external import HttpPeers
from knowsphere_conversation.adapters.memory import MemoryContext
from knowsphere_conversation.adapters.nats import LEASE_BUCKET, KvSessionLeases, StreamEventLog, TurnCanceller
from knowsphere_conversation.adapters.retrieval import RetrievalSearch
from knowsphere_conversation.adapters.sessions_sql import SqlSessionStore
from knowsphere_conversation.api.bus import TURN_RUNNER, build_bus
from knowsphere_conversation.api.grpc import (
    AgentServicer,
    ConversationServicer,
    OrchestratorServicer,
    build_binding,
)
from knowsphere_conversation.domain.external import ExternalSupport, OrchestratorKeys, rotate_keys
from knowsphere_conversation.domain.graph import TurnLimits
from knowsphere_conversation.domain.layout import Message
from knowsphere_conversation.domain.turns import TurnRunner
from knowsphere_conversation.settings import Settings
from knowsphere_runtime.bus import build_broker
from knowsphere_runtime.lifecycle import (
    BrokerComponent,
    ChannelsComponent,
    Component,
    StartupError,
    run_service,
)
from knowsphere_runtime.rpc import GrpcServer
from knowsphere_runtime.secrets import KeyRing, MasterKeyError, key_ring_of, verify_master_key
from knowsphere_runtime.settings import load_settings
from knowsphere_runtime.streams import STREAM_REPLICAS


def limits(settings: Settings) -> TurnLimits:
    return TurnLimits(
        keep_turns=settings.stm_keep_turns,
        slide_turns=settings.stm_slide_turns,
        max_tool_rounds=settings.max_tool_rounds,
        extract_sentences=settings.extract_sentences,
        extract_chars=settings.extract_chars,
        extract_top_k=settings.retrieval_top_k,
    )


class SessionsComponent:
    """The session store; with a key ring, MASTER_KEY is checked against the stored keys once it is open
    (and they are moved off a previous one)."""

    name = "sessions"

    def __init__(self, store: SqlSessionStore, ring: KeyRing | None = None) -> None:
        self.store = store
        self.ring = ring

    async def start(self) -> object:
        await self.store.open()
        if self.ring is not None:
            ring = self.ring
            try:
                await verify_master_key(
                    self.store, ring, lambda: rotate_keys(self.store, ring), owner="this conversation service"
                )
            except MasterKeyError as error:
                raise StartupError(str(error)) from None
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self.store.close()


def main() -> None:
    settings = load_settings(Settings)

    def build() -> list[Component]:
        channels = {
            name: service_channel(name, addr, settings)
            for name, addr in (
                ("retrieval", settings.retrieval_addr),
                ("memory", settings.memory_addr),
                ("toolrunner", settings.toolrunner_addr),
                ("modelhub", settings.modelhub_addr),
            )
        }
        broker = build_broker(
            settings.nats_url, client_name=SERVICE_NAME, graceful_timeout=settings.shutdown_grace_seconds
        )
        bus = build_bus(
            settings.max_concurrent_turns, settings.turn_ack_wait_seconds, settings.max_session_wait_seconds
        )
        broker.include_router(bus.router)
        checkpoints = CheckpointStore(settings.checkpoint_url, settings.data_dir)
        sessions = SqlSessionStore(settings.sqlalchemy_url())
        ring = key_ring_of(settings.master_key, settings.master_key_previous)
        keys = OrchestratorKeys(ring)
        peers = HttpPeers(settings.egress, answer_seconds=settings.external_answer_seconds)
        memory = MemoryClient(channels["memory"])
        models = ModelHubClient(channels["modelhub"])
        runner = TurnRunner(
            lambda: checkpoints.graph,
            models=models,
            tools=ToolRunnerClient(channels["toolrunner"]),
            memory=MemoryContext(memory),
            search=RetrievalSearch(RetrievalClient(channels["retrieval"]), settings.retrieval_top_k),
            publish=bus.publish_turn_event,
            publish_completed=bus.publish_completed,
            limits=limits(settings),
            leases=KvSessionLeases(
                lambda: broker.key_value(
                    LEASE_BUCKET, ttl=settings.turn_ack_wait_seconds, replicas=STREAM_REPLICAS
                ),
                ttl=settings.turn_ack_wait_seconds,
            ),
            event_log=StreamEventLog(lambda: broker.config.connection_state.stream),
            sessions=sessions,
            agents=sessions,
            external=ExternalSupport(peers, sessions, keys),
        )
        broker.context.set_global(TURN_RUNNER, runner)

        async def history(thread: str) -> Sequence[Message]:
            state = await checkpoints.graph.aget_state({"configurable": {"thread_id": thread}})
            messages: Sequence[Message] = state.values.get("messages", []) if state else []
            return messages

        async def forget(thread: str, session_id: str) -> None:
            await checkpoints.saver.adelete_thread(thread)
            await memory.delete_session_memory(memory_pb2.DeleteSessionMemoryRequest(session_id=session_id))

        servicer = ConversationServicer(
            sessions,
            history,
            TurnCanceller(
                lambda: broker.config.connection_state.connection,
                bus.request_cancel,
                wait=settings.cancel_wait_seconds,
            ),
            forget,
            bindings=sessions,
        )
        server = GrpcServer(
            name=SERVICE_NAME,
            bind=settings.grpc_bind,
            bindings=[
                build_binding(
                    servicer,
                    AgentServicer(sessions, models=models),
                    OrchestratorServicer(sessions, keys=keys, egress=settings.egress, models=models),
                )
            ],
            grace=settings.shutdown_grace_seconds,
        )
        return [
            ChannelsComponent(list(channels.values())),
            SessionsComponent(sessions, ring),
            peers,
            checkpoints,
            server,
            BrokerComponent(broker),
        ]

    run_service(SERVICE_NAME, settings, build)


if __name__ == "__main__":
    main()
