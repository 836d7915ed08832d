"""The interfaces modelhub's domain and API depend on; each adapter module implements one.

- :class:`ModelStore` — the registry's persistence (SQLite by default, PostgreSQL in production).
- :class:`ProviderAdapter` — one provider wire format (OpenAI-compatible, Anthropic, the local
  embedding model). Adapters raise :class:`~knowsphere_modelhub.domain.errors.ModelError` for every
  failure a user should hear about; they never return partial results silently.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelConsumerKind, ModelType
from knowsphere_modelhub.domain.records import CallTarget, ModelRecord


@dataclass(frozen=True)
class Page:
    records: list[ModelRecord]
    next_page_token: str


@dataclass(frozen=True)
class Usage:
    model_id: str
    consumer_kind: ModelConsumerKind | None  # None: not given (the registry refuses it)
    consumer_id: str
    consumer_name: str


@dataclass(frozen=True)
class StoredKey:
    """One encrypted API key as the store holds it, with the row it belongs to (for re-encryption after
    a MASTER_KEY rotation or a change of ciphertext format)."""

    tenant_id: str
    model_id: str
    ciphertext: str


class ModelReferenced(Exception):
    """``ModelStore.delete`` refused: a default or a usage still refers to the model."""


class ModelStore(Protocol):
    """Tenant-scoped persistence of model records, defaults and usages.

    Every read and write takes the tenant id; a tenant sees its own records plus built-in ones
    (``tenant_id == ""``) and never another tenant's. Lists are ordered built-in first, then by
    (create_time, id); page tokens are opaque and a bad one raises ``ValueError``. ``update`` raises
    ``LookupError`` when the tenant has no such record; ``delete`` raises :class:`ModelReferenced`
    while defaults or usages refer to the model (it never removes them itself).
    ``set_default`` with an empty model id clears the default.
    """

    async def create(self, record: ModelRecord) -> None: ...

    async def get(self, tenant_id: str, model_id: str) -> ModelRecord | None: ...

    async def list(
        self,
        tenant_id: str,
        *,
        model_type: ModelType | None,
        provider_id: str | None,
        page_size: int,
        page_token: str,
    ) -> Page: ...

    async def update(self, record: ModelRecord) -> None: ...

    async def delete(self, tenant_id: str, model_id: str) -> bool: ...

    async def upsert_builtin(self, record: ModelRecord) -> None: ...

    async def set_default(self, tenant_id: str, model_type: ModelType, model_id: str) -> None: ...

    async def get_default(self, tenant_id: str, model_type: ModelType) -> str | None: ...

    async def defaults_of(self, tenant_id: str, model_id: str) -> builtins.list[ModelType]:
        """The types the model is the tenant's default for, in proto number order."""
        ...

    async def put_usage(self, tenant_id: str, usage: Usage) -> None: ...

    async def delete_usage(
        self, tenant_id: str, model_id: str, consumer_kind: ModelConsumerKind, consumer_id: str
    ) -> bool: ...

    async def list_usages(self, tenant_id: str, model_id: str) -> builtins.list[Usage]: ...

    async def get_setting(self, key: str) -> str | None: ...

    async def put_setting(self, key: str, value: str) -> None: ...

    async def add_setting(self, key: str, value: str) -> str:
        """Store ``value`` unless the key has one already; the value in force either way."""
        ...

    async def list_api_keys(self) -> builtins.list[StoredKey]:
        """Every stored API key ciphertext, across all tenants (key rotation only)."""
        ...

    async def replace_api_key(self, model_id: str, old_ciphertext: str, new_ciphertext: str) -> bool:
        """Swap a key's ciphertext if it is still ``old_ciphertext`` (no ``update_time`` change)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class EmbedResult:
    vectors: list[list[float]]
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float


class ProviderAdapter(Protocol):
    """One provider wire format. Methods a provider does not offer raise ModelError WRONG_MODEL_TYPE."""

    def chat_stream(
        self, target: CallTarget, request: pb.ChatStreamRequest
    ) -> AsyncIterator[pb.ChatStreamResponse]:
        """Text/tool-call deltas, then finish, then usage. No ``started`` event (the service sends it)."""
        ...

    async def next_token_logprobs(
        self, target: CallTarget, messages: Sequence[pb.ChatMessage], top: int
    ) -> list[TokenLogprob]:
        """Top alternatives for the first generated token (Decide's logprobs path)."""
        ...

    async def embed(self, target: CallTarget, texts: Sequence[str], input_type: int) -> EmbedResult:
        """Unit vectors in input order; ``input_type`` is the request's EmbedInputType number."""
        ...

    async def rerank(
        self, target: CallTarget, query: str, documents: Sequence[str], top_n: int
    ) -> list[tuple[int, float]]:
        """(index, score) best first."""
        ...

    async def transcribe(
        self, target: CallTarget, request: pb.TranscribeRequest
    ) -> pb.TranscribeResponse: ...

    async def close(self) -> None: ...
