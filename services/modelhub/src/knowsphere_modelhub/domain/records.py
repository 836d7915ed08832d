"""What the registry stores and what a model call is aimed at.

Model types are the proto enum values of ``knowsphere.modelhub.v1.ModelType`` (ints), so records,
storage and the API agree without a second enum.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from knowsphere.modelhub.v1 import modelhub_pb2 as pb

EMBEDDING = pb.MODEL_TYPE_EMBEDDING
RERANK = pb.MODEL_TYPE_RERANK
KNOWLEDGE_QA = pb.MODEL_TYPE_KNOWLEDGE_QA
VLM = pb.MODEL_TYPE_VLM
ASR = pb.MODEL_TYPE_ASR
MODEL_TYPES = (EMBEDDING, RERANK, KNOWLEDGE_QA, VLM, ASR)


def type_name(model_type: int) -> str:
    """``MODEL_TYPE_KNOWLEDGE_QA`` → ``knowledge_qa`` (for messages, settings and storage)."""
    return pb.ModelType.Name(model_type).removeprefix("MODEL_TYPE_").lower()


@dataclass(frozen=True)
class ModelParams:
    temperature: float | None = None
    max_tokens: int | None = None
    context_window: int | None = None
    embedding_dimension: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelRecord:
    """A registered model. ``api_key_ciphertext`` is what the store holds; never the key itself."""

    id: str
    tenant_id: str  # "" for built-in models
    display_name: str
    provider_id: str
    model_name: str
    types: frozenset[int]
    base_url: str
    parameters: ModelParams
    api_key_ciphertext: str | None
    api_key_hint: str
    builtin: bool
    description: str
    create_time: datetime
    update_time: datetime


@dataclass(frozen=True)
class CallTarget:
    """Everything an adapter needs for one call: the record resolved, its key decrypted.

    Lives only for the duration of a call; never stored or logged (``__repr__`` hides the key).
    """

    model_id: str
    provider_id: str
    model_name: str
    base_url: str
    api_key: str | None = field(repr=False)
    parameters: ModelParams
    types: frozenset[int]
