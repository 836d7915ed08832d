"""What the registry stores and what a model call is aimed at.

Model types are the generated :class:`~knowsphere.modelhub.v1.modelhub_enums.ModelType` (the proto
enum as strings: ``knowledge_qa``), so records, storage, messages and the API agree without a second
vocabulary; :meth:`ModelType.to_proto` and :meth:`ModelType.from_number` cross the proto boundary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from knowsphere.modelhub.v1.modelhub_enums import ModelType


def in_proto_order(types: Iterable[ModelType]) -> list[ModelType]:
    """``types`` in proto number order (embedding, rerank, knowledge_qa, vlm, asr), as lists show them."""
    return sorted(types, key=lambda model_type: model_type.number)


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
    types: frozenset[ModelType]
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
    types: frozenset[ModelType]
    operator_configured: bool = False
    """The operator's model (from the environment), not a tenant's: its base URL is called as given,
    without the egress guard a tenant's base URL goes through."""
