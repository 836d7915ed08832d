"""The internal gRPC services: short name → generated descriptor, stub and default port.

This is the one place that ties a service's short name (used for its folder, process, image,
``OTEL_SERVICE_NAME``) to its contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor

from knowsphere.conversation.v1 import conversation_pb2, conversation_pb2_grpc
from knowsphere.ingestion.v1 import ingestion_pb2, ingestion_pb2_grpc
from knowsphere.memory.v1 import memory_pb2, memory_pb2_grpc
from knowsphere.modelhub.v1 import modelhub_pb2, modelhub_pb2_grpc
from knowsphere.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from knowsphere.toolrunner.v1 import toolrunner_pb2, toolrunner_pb2_grpc


@dataclass(frozen=True)
class ServiceContract:
    name: str
    descriptor: ServiceDescriptor
    stub: type[Any]
    default_grpc_port: int

    @property
    def full_name(self) -> str:
        return self.descriptor.full_name


def _only_service(module: Any) -> ServiceDescriptor:
    services = list(module.DESCRIPTOR.services_by_name.values())
    if len(services) != 1:
        raise RuntimeError(f"{module.__name__} defines {len(services)} services; expected one")
    return services[0]


CONTRACTS: dict[str, ServiceContract] = {
    "conversation": ServiceContract(
        "conversation", _only_service(conversation_pb2), conversation_pb2_grpc.ConversationServiceStub, 7411
    ),
    "retrieval": ServiceContract(
        "retrieval", _only_service(retrieval_pb2), retrieval_pb2_grpc.RetrievalServiceStub, 7412
    ),
    "ingestion": ServiceContract(
        "ingestion", _only_service(ingestion_pb2), ingestion_pb2_grpc.IngestionServiceStub, 7413
    ),
    "memory": ServiceContract("memory", _only_service(memory_pb2), memory_pb2_grpc.MemoryServiceStub, 7414),
    "toolrunner": ServiceContract(
        "toolrunner", _only_service(toolrunner_pb2), toolrunner_pb2_grpc.ToolRunnerServiceStub, 7415
    ),
    "modelhub": ServiceContract(
        "modelhub", _only_service(modelhub_pb2), modelhub_pb2_grpc.ModelHubServiceStub, 7416
    ),
}

GATEWAY_GRPC_PORT = 7410
GATEWAY_HTTP_PORT = 8780
