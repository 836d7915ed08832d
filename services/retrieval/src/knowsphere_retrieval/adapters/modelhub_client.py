"""Retrieval's calls to modelhub: query embeddings, reranking, LLM multi-query, model languages."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import grpc
from google.protobuf.json_format import MessageToDict
from grpc_status import rpc_status

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere_contracts.services import CONTRACTS
from knowsphere_retrieval.domain.search import RerankUnavailable

MULTI_QUERY_PROMPT = (
    "Write {n} alternative search queries for the question below, each on its own line, in the "
    "question's language, using other words for the same need. Output only the queries.\n\nQuestion: {query}"
)


def _model_error_code(error: grpc.aio.AioRpcError) -> int:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return 0
    for detail in status.details:
        if detail.Is(pb.ModelErrorDetail.DESCRIPTOR):
            message = pb.ModelErrorDetail()
            detail.Unpack(message)
            return int(message.code)
    return 0


class ModelHubClient:
    """Thin adapter over the ModelHubService stub, with a small cache of query vectors."""

    def __init__(
        self, channel: grpc.aio.Channel, *, cache_size: int = 1024, embed_timeout: float = 120.0
    ) -> None:
        self._stub = CONTRACTS["modelhub"].stub(channel)
        self._vectors: OrderedDict[tuple[str, str, str], list[float]] = OrderedDict()
        self._cache_size = cache_size
        self._embed_timeout = embed_timeout
        self._languages: dict[tuple[str, str], tuple[str, ...]] = {}

    async def embed_query(self, tenant_id: str, model_id: str, query: str) -> list[float]:
        key = (tenant_id, model_id, query)
        cached = self._vectors.get(key)
        if cached is not None:
            self._vectors.move_to_end(key)
            return cached
        response = await self._stub.Embed(
            pb.EmbedRequest(model_id=model_id, texts=[query], input_type=pb.EMBED_INPUT_TYPE_QUERY),
            timeout=self._embed_timeout,
        )
        vector = list(response.embeddings[0].values)
        if self._cache_size:
            self._vectors[key] = vector
            if len(self._vectors) > self._cache_size:
                self._vectors.popitem(last=False)
        return vector

    async def embed_texts(self, model_id: str, texts: Sequence[str]) -> list[list[float]]:
        response = await self._stub.Embed(
            pb.EmbedRequest(model_id=model_id, texts=list(texts), input_type=pb.EMBED_INPUT_TYPE_DOCUMENT),
            timeout=self._embed_timeout,
        )
        return [list(e.values) for e in response.embeddings]

    async def rerank(self, model_id: str, query: str, documents: Sequence[str]) -> list[float]:
        try:
            response = await self._stub.Rerank(
                pb.RerankRequest(model_id=model_id, query=query, documents=list(documents))
            )
        except grpc.aio.AioRpcError as error:
            code = _model_error_code(error)
            if code in (pb.MODEL_ERROR_CODE_NO_MODEL_CONFIGURED, pb.MODEL_ERROR_CODE_WRONG_MODEL_TYPE):
                raise RerankUnavailable("no rerank model configured") from error
            raise
        scores = [0.0] * len(documents)
        for result in response.results:
            scores[result.index] = result.relevance_score
        return scores

    async def multi_query(self, query: str, n: int = 3) -> list[str]:
        request = pb.ChatStreamRequest(
            purpose="query_expansion",
            temperature=0.3,
            max_tokens=200,
            messages=[
                pb.ChatMessage(
                    role=pb.CHAT_ROLE_USER,
                    content=[pb.ContentPart(text=MULTI_QUERY_PROMPT.format(n=n, query=query))],
                )
            ],
        )
        try:
            parts = [
                e.text_delta.text async for e in self._stub.ChatStream(request) if e.HasField("text_delta")
            ]
        except grpc.aio.AioRpcError as error:
            if _model_error_code(error) == pb.MODEL_ERROR_CODE_NO_MODEL_CONFIGURED:
                return []
            raise
        lines = [line.strip(" -•*0123456789.\t") for line in "".join(parts).splitlines()]
        return [line for line in lines if line and line != query][:n]

    async def model_languages(self, tenant_id: str, model_id: str) -> tuple[str, ...]:
        """Languages the embedding model reads, from its record (``parameters.extra.languages``)."""
        key = (tenant_id, model_id)
        if key in self._languages:
            return self._languages[key]
        languages: tuple[str, ...] = ()
        try:
            model = (await self._stub.GetModel(pb.GetModelRequest(model_id=model_id))).model
        except grpc.aio.AioRpcError:
            return ()
        extra = MessageToDict(model.parameters.extra) if model.parameters.HasField("extra") else {}
        if isinstance(extra.get("languages"), list):
            languages = tuple(str(lang) for lang in extra["languages"])
        self._languages[key] = languages
        return languages
