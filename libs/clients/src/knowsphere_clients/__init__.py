"""KnowSphere clients: one typed async client per internal gRPC service.

Every caller of another service uses these; none writes its own. A client wraps a channel from
``knowsphere_runtime.rpc.open_channel`` (identity, language, trace context and deadlines travel in
its interceptors) and raises :mod:`knowsphere_clients.errors` types, decoded once, instead of raw
gRPC errors.
"""

from knowsphere_clients.base import service_channel
from knowsphere_clients.conversation import ConversationClient
from knowsphere_clients.errors import ModelFailure, ServiceError
from knowsphere_clients.ingestion import IngestionClient
from knowsphere_clients.memory import MemoryClient
from knowsphere_clients.modelhub import EmbeddingModel, ModelHubClient, NoModelConfigured, WrongModelType
from knowsphere_clients.retrieval import RetrievalClient
from knowsphere_clients.toolrunner import ToolRunnerClient

__all__ = [
    "ConversationClient",
    "EmbeddingModel",
    "IngestionClient",
    "MemoryClient",
    "ModelFailure",
    "ModelHubClient",
    "NoModelConfigured",
    "RetrievalClient",
    "ServiceError",
    "ToolRunnerClient",
    "WrongModelType",
    "service_channel",
]
