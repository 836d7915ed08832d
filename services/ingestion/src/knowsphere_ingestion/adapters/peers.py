"""Ingestion's calls to modelhub (models, embeddings, VLM, ASR, LLM) and retrieval (indexing).

Thin wrappers over the generated stubs: they turn protos into the values ingestion works with and
nothing else. Identity and trace context travel through the channel's interceptors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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

    async def put_document_info(self, info: rpb.DocumentMetadata) -> None:
        await self._stub.PutDocumentInfo(rpb.PutDocumentInfoRequest(document=info))

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
class _Pending:
    texts: list[str]
    future: asyncio.Future[list[list[float]]]
    identity: Identity | None


@dataclass
class _Queue:
    items: list[_Pending] = field(default_factory=list)
    in_flight: int = 0


class EmbedBatcher:
    """Embeds texts of many documents together: batches fill up while the model is busy.

    Documents of one worker run concurrently and each asks for its chunks' vectors. Per model and
    tenant at most ``max_in_flight`` Embed calls run at a time; requests arriving meanwhile wait and
    leave together, up to ``batch_size`` texts per call, as soon as a call returns. An idle model
    therefore answers a lone document at once, and a busy one gets full batches: the embedding model
    works at the efficiency of a bulk job however the documents trickle in. ``max_wait`` adds a short
    pause before a call that would leave a batch less than half full, to let stragglers join.
    """

    def __init__(
        self, modelhub: ModelHub, *, batch_size: int, max_wait: float, max_in_flight: int = 1
    ) -> None:
        self._modelhub = modelhub
        self._batch_size = batch_size
        self._max_wait = max_wait
        self._max_in_flight = max_in_flight
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self.calls = 0
        self.texts = 0
        self.busy_seconds = 0.0

    async def embed(self, model_id: str, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        identity = current_identity()
        key = (identity.tenant_id if identity else "", model_id)
        queue = self._queues.setdefault(key, _Queue())
        future: asyncio.Future[list[list[float]]] = asyncio.get_running_loop().create_future()
        queue.items.append(_Pending(list(texts), future, identity))
        self._pump(key, queue)
        return await future

    def _pump(self, key: tuple[str, str], queue: _Queue) -> None:
        while queue.items and queue.in_flight < self._max_in_flight:
            batch: list[_Pending] = []
            size = 0
            while queue.items and (not batch or size + len(queue.items[0].texts) <= self._batch_size):
                item = queue.items.pop(0)
                batch.append(item)
                size += len(item.texts)
            queue.in_flight += 1
            task = asyncio.create_task(self._send(key, queue, batch, wait=size * 2 < self._batch_size))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, key: tuple[str, str], queue: _Queue, items: list[_Pending], *, wait: bool) -> None:
        try:
            if wait and self._max_wait > 0:
                await asyncio.sleep(self._max_wait)
                # Stragglers that arrived during the pause ride along, up to a full batch.
                size = sum(len(item.texts) for item in items)
                while queue.items and size + len(queue.items[0].texts) <= self._batch_size:
                    item = queue.items.pop(0)
                    items.append(item)
                    size += len(item.texts)
            texts = [text for item in items for text in item.texts]
            try:
                with bound_identity(items[0].identity):
                    vectors: list[list[float]] = []
                    for start in range(0, len(texts), self._batch_size):
                        vectors.extend(await self._call(key[1], texts[start : start + self._batch_size]))
            except Exception as error:
                for item in items:
                    if not item.future.done():
                        item.future.set_exception(error)
                return
            offset = 0
            for item in items:
                part = vectors[offset : offset + len(item.texts)]
                offset += len(item.texts)
                if not item.future.done():
                    item.future.set_result(part)
        finally:
            queue.in_flight -= 1
            self._pump(key, queue)

    async def _call(self, model_id: str, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await self._modelhub.embed(model_id, texts)
        finally:
            self.calls += 1
            self.texts += len(texts)
            self.busy_seconds += time.perf_counter() - started


@dataclass
class _IndexRequest:
    chunks: list[rpb.Chunk]
    future: asyncio.Future[None]
    identity: Identity | None


class IndexBatcher:
    """Writes chunks of many documents to retrieval together, like :class:`EmbedBatcher` for vectors.

    Each IndexChunks call costs retrieval an index commit, whatever its size; documents finishing
    at the same time therefore share calls (up to ``batch_size`` chunks, one tenant per call) while an
    earlier call is still running. A caller's chunks are written when its await returns.
    """

    def __init__(self, retrieval: Retrieval, *, batch_size: int, max_in_flight: int = 1) -> None:
        self._retrieval = retrieval
        self._batch_size = batch_size
        self._max_in_flight = max_in_flight
        self._queues: dict[str, list[_IndexRequest]] = {}
        self._in_flight: dict[str, int] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def index(self, chunks: Sequence[rpb.Chunk]) -> None:
        if not chunks:
            return
        identity = current_identity()
        key = identity.tenant_id if identity else ""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append(_IndexRequest(list(chunks), future, identity))
        self._pump(key)
        await future

    def _pump(self, key: str) -> None:
        queue = self._queues.get(key, [])
        while queue and self._in_flight.get(key, 0) < self._max_in_flight:
            batch: list[_IndexRequest] = []
            size = 0
            while queue and (not batch or size + len(queue[0].chunks) <= self._batch_size):
                item = queue.pop(0)
                batch.append(item)
                size += len(item.chunks)
            self._in_flight[key] = self._in_flight.get(key, 0) + 1
            task = asyncio.create_task(self._send(key, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, key: str, items: list[_IndexRequest]) -> None:
        try:
            chunks = [chunk for item in items for chunk in item.chunks]
            with bound_identity(items[0].identity):
                for start in range(0, len(chunks), self._batch_size):
                    await self._retrieval.index(chunks[start : start + self._batch_size])
        except Exception as error:
            for item in items:
                if not item.future.done():
                    item.future.set_exception(error)
        else:
            for item in items:
                if not item.future.done():
                    item.future.set_result(None)
        finally:
            self._in_flight[key] -= 1
            self._pump(key)
