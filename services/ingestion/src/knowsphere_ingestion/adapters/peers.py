"""Ingestion's calls to modelhub (models, embeddings, VLM, ASR, LLM) and retrieval (indexing).

Thin wrappers over the generated stubs: they turn protos into the values ingestion works with and
nothing else. Identity and trace context travel through the channel's interceptors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import grpc

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb
from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_runtime.identity import Identity, bound_identity, current_identity


@dataclass(frozen=True)
class EmbeddingModel:
    model_id: str
    dimension: int


class ModelHub:
    def __init__(self, channel: grpc.aio.Channel, *, embed_timeout: float = 300.0) -> None:
        self._stub = CONTRACTS["modelhub"].stub(channel)
        self._embed_timeout = embed_timeout

    async def resolve_embedding_model(self, model_id: str) -> EmbeddingModel:
        """The given model (or the tenant's default when empty) with its vector dimension."""
        if not model_id:
            resolved = await self._stub.GetDefaultModel(
                mpb.GetDefaultModelRequest(type=mpb.MODEL_TYPE_EMBEDDING)
            )
            if not resolved.default_model.HasField("model"):
                raise LookupError("no embedding model is configured for this tenant")
            model = resolved.default_model.model
        else:
            model = (await self._stub.GetModel(mpb.GetModelRequest(model_id=model_id))).model
        if mpb.MODEL_TYPE_EMBEDDING not in model.types:
            raise ValueError(f"model {model.id} is not an embedding model")
        dimension = (
            model.parameters.embedding_dimension if model.parameters.HasField("embedding_dimension") else 0
        )
        if dimension <= 0:
            probe = await self.embed(model.id, ["dimension probe"])
            dimension = len(probe[0])
        return EmbeddingModel(model.id, dimension)

    async def embed(self, model_id: str, texts: Sequence[str]) -> list[list[float]]:
        response = await self._stub.Embed(
            mpb.EmbedRequest(model_id=model_id, texts=list(texts), input_type=mpb.EMBED_INPUT_TYPE_DOCUMENT),
            timeout=self._embed_timeout,
        )
        return [list(e.values) for e in response.embeddings]

    async def has_default(self, model_type: int) -> bool:
        resolved = await self._stub.GetDefaultModel(mpb.GetDefaultModelRequest(type=model_type))  # type: ignore[arg-type]
        return resolved.default_model.HasField("model")

    async def has_asr(self) -> bool:
        return await self.has_default(mpb.MODEL_TYPE_ASR)

    async def has_vlm(self) -> bool:
        return await self.has_default(mpb.MODEL_TYPE_VLM)

    async def describe_image(self, data: bytes, mime_type: str, language: str) -> str:
        response = await self._stub.DescribeImage(
            mpb.DescribeImageRequest(
                image=mpb.ImageInput(data=data, mime_type=mime_type),
                language=language,
                purpose="ingestion_image_description",
            ),
            timeout=self._embed_timeout,
        )
        return response.description

    async def transcribe(self, data: bytes, mime_type: str, file_name: str, language: str) -> tuple[str, str]:
        response = await self._stub.Transcribe(
            mpb.TranscribeRequest(audio=data, mime_type=mime_type, file_name=file_name, language=language),
            timeout=self._embed_timeout,
        )
        return response.text, response.language

    async def complete(self, messages: Sequence[dict[str, str]], purpose: str) -> str:
        """One non-streamed answer of the tenant's default KnowledgeQA model."""
        request = mpb.ChatStreamRequest(
            messages=[
                mpb.ChatMessage(role=_ROLES[m["role"]], content=[mpb.ContentPart(text=m["content"])])
                for m in messages
            ],
            purpose=purpose,
            temperature=0.0,
        )
        parts: list[str] = []
        async for event in self._stub.ChatStream(request, timeout=self._embed_timeout):
            if event.HasField("text_delta"):
                parts.append(event.text_delta.text)
        return "".join(parts)


T = TypeVar("T")
R = TypeVar("R")

_ROLES = {
    "system": mpb.CHAT_ROLE_SYSTEM,
    "user": mpb.CHAT_ROLE_USER,
    "assistant": mpb.CHAT_ROLE_ASSISTANT,
}


class Retrieval:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = CONTRACTS["retrieval"].stub(channel)

    async def configure(
        self, kb_id: str, model_id: str, dimension: int, language_hint: str, graph_enabled: bool
    ) -> None:
        await self._stub.ConfigureKnowledgeBase(
            rpb.ConfigureKnowledgeBaseRequest(
                knowledge_base_id=kb_id,
                embedding_model_id=model_id,
                embedding_dimension=dimension,
                language_hint=language_hint,
                graph_enabled=graph_enabled,
            )
        )

    async def index(self, chunks: Sequence[rpb.Chunk]) -> int:
        response = await self._stub.IndexChunks(rpb.IndexChunksRequest(chunks=list(chunks)), timeout=120.0)
        return response.indexed_count

    async def put_document_infos(self, infos: Sequence[rpb.DocumentMetadata]) -> None:
        await self._stub.PutDocumentInfo(rpb.PutDocumentInfoRequest(documents=list(infos)))

    async def prune(self, kb_id: str, document_id: str, keep_run_id: str) -> int:
        response = await self._stub.PruneDocumentChunks(
            rpb.PruneDocumentChunksRequest(
                knowledge_base_id=kb_id, document_id=document_id, keep_ingest_run_id=keep_run_id
            )
        )
        return response.deleted_chunk_count

    async def delete_document(self, kb_id: str, document_id: str) -> int:
        response = await self._stub.DeleteDocument(
            rpb.DeleteDocumentRequest(knowledge_base_id=kb_id, document_id=document_id), timeout=120.0
        )
        return response.deleted_chunk_count

    async def delete_knowledge_base(self, kb_id: str) -> None:
        await self._stub.DeleteKnowledgeBase(
            rpb.DeleteKnowledgeBaseRequest(knowledge_base_id=kb_id), timeout=300.0
        )

    async def delete_embeddings(self, kb_id: str, model_id: str) -> int:
        response = await self._stub.DeleteEmbeddings(
            rpb.DeleteEmbeddingsRequest(knowledge_base_id=kb_id, embedding_model_id=model_id), timeout=300.0
        )
        return response.deleted_vector_count

    async def index_graph(
        self,
        kb_id: str,
        document_id: str,
        entities: Sequence[rpb.EntityInput],
        relations: Sequence[rpb.RelationInput],
    ) -> tuple[int, int]:
        response = await self._stub.IndexGraph(
            rpb.IndexGraphRequest(
                knowledge_base_id=kb_id,
                document_id=document_id,
                entities=list(entities),
                relations=list(relations),
            ),
            timeout=120.0,
        )
        return response.entity_count, response.relation_count


@dataclass
class _Pending(Generic[T, R]):
    items: list[T]
    future: asyncio.Future[list[R]]
    identity: Identity | None


@dataclass
class _Queue(Generic[T, R]):
    pending: list[_Pending[T, R]] = field(default_factory=list)
    in_flight: int = 0


class Coalescer(Generic[T, R]):
    """Merges concurrent requests of many documents into few calls: batches fill while a call runs.

    Requests share a queue per (tenant, ``key``). At most ``max_in_flight`` calls per queue run at a
    time; requests arriving meanwhile leave together, up to ``batch_size`` items per call, as soon as
    one returns. A lone request on an idle queue therefore goes at once, and a busy backend gets full
    batches however the documents trickle in. ``max_wait`` adds a short pause before a call that would
    leave less than half full, to let stragglers join. ``call(key, items)`` returns one result per item.
    """

    def __init__(
        self,
        call: Callable[[str, list[T]], Awaitable[list[R]]],
        *,
        batch_size: int,
        max_wait: float = 0.0,
        max_in_flight: int = 1,
    ) -> None:
        self._call = call
        self._batch_size = batch_size
        self._max_wait = max_wait
        self._max_in_flight = max_in_flight
        self._queues: dict[tuple[str, str], _Queue[T, R]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def submit(self, key: str, items: Sequence[T]) -> list[R]:
        if not items:
            return []
        identity = current_identity()
        queue_key = (identity.tenant_id if identity else "", key)
        queue = self._queues.setdefault(queue_key, _Queue())
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        queue.pending.append(_Pending(list(items), future, identity))
        self._pump(queue_key, queue)
        return await future

    def _take(self, queue: _Queue[T, R], batch: list[_Pending[T, R]]) -> int:
        """Moves waiting requests into ``batch`` while they fit in one call; returns its size."""
        size = sum(len(p.items) for p in batch)
        while queue.pending and (not batch or size + len(queue.pending[0].items) <= self._batch_size):
            request = queue.pending.pop(0)
            batch.append(request)
            size += len(request.items)
        return size

    def _pump(self, queue_key: tuple[str, str], queue: _Queue[T, R]) -> None:
        while queue.pending and queue.in_flight < self._max_in_flight:
            batch: list[_Pending[T, R]] = []
            size = self._take(queue, batch)
            queue.in_flight += 1
            task = asyncio.create_task(self._send(queue_key, queue, batch, wait=size * 2 < self._batch_size))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(
        self, queue_key: tuple[str, str], queue: _Queue[T, R], batch: list[_Pending[T, R]], *, wait: bool
    ) -> None:
        try:
            if wait and self._max_wait > 0:
                await asyncio.sleep(self._max_wait)
                self._take(queue, batch)  # stragglers that arrived during the pause ride along
            items = [item for request in batch for item in request.items]
            try:
                with bound_identity(batch[0].identity):
                    results: list[R] = []
                    for start in range(0, len(items), self._batch_size):
                        results.extend(
                            await self._call(queue_key[1], items[start : start + self._batch_size])
                        )
            except Exception as error:
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)
                return
            offset = 0
            for request in batch:
                part = results[offset : offset + len(request.items)]
                offset += len(request.items)
                if not request.future.done():
                    request.future.set_result(part)
        finally:
            queue.in_flight -= 1
            self._pump(queue_key, queue)


class EmbedBatcher:
    """Embeds texts of many documents together (per model and tenant) through one :class:`Coalescer`."""

    def __init__(
        self, modelhub: ModelHub, *, batch_size: int, max_wait: float, max_in_flight: int = 1
    ) -> None:
        self._calls: Coalescer[str, list[float]] = Coalescer(
            modelhub.embed, batch_size=batch_size, max_wait=max_wait, max_in_flight=max_in_flight
        )

    async def embed(self, model_id: str, texts: Sequence[str]) -> list[list[float]]:
        return await self._calls.submit(model_id, texts)


class WriteBatcher(Generic[T]):
    """Writes items of many documents to retrieval together (per tenant), e.g. their chunks or their
    metadata.

    Each write costs retrieval a commit, whatever its size, so documents finishing at the same time
    share calls. A caller's items are written when its await returns.
    """

    def __init__(
        self, write: Callable[[list[T]], Awaitable[None]], *, batch_size: int, max_in_flight: int = 1
    ) -> None:
        async def call(_: str, items: list[T]) -> list[None]:
            await write(items)
            return [None] * len(items)

        self._calls: Coalescer[T, None] = Coalescer(call, batch_size=batch_size, max_in_flight=max_in_flight)

    async def write(self, items: Sequence[T]) -> None:
        await self._calls.submit("", items)
