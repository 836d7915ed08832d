"""The retrieval client: index configuration and writes (ingestion's side), every read (search, grep,
list, document info, graph queries, stats) and retrieval evaluation."""

from __future__ import annotations

from collections.abc import Sequence

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere_clients.base import ServiceClient

# Writes of many chunks or a whole knowledge base take longer than a default deadline.
WRITE_TIMEOUT_SECONDS = 120.0
PURGE_TIMEOUT_SECONDS = 300.0
# One evaluation call runs up to 50 queries in each of several modes.
EVALUATE_TIMEOUT_SECONDS = 300.0


class RetrievalClient(ServiceClient):
    service = "retrieval"

    # --- configuration and writes -----------------------------------------------------------------

    async def configure_knowledge_base(
        self,
        knowledge_base_id: str,
        *,
        embedding_model_id: str,
        embedding_dimension: int,
        language_hint: str = "",
        graph_enabled: bool = False,
    ) -> rpb.KnowledgeBaseIndexConfig:
        response: rpb.ConfigureKnowledgeBaseResponse = await self._call(
            "ConfigureKnowledgeBase",
            rpb.ConfigureKnowledgeBaseRequest(
                knowledge_base_id=knowledge_base_id,
                embedding_model_id=embedding_model_id,
                embedding_dimension=embedding_dimension,
                language_hint=language_hint,
                graph_enabled=graph_enabled,
            ),
        )
        return response.config

    async def index_chunks(self, chunks: Sequence[rpb.Chunk]) -> int:
        response: rpb.IndexChunksResponse = await self._call(
            "IndexChunks", rpb.IndexChunksRequest(chunks=list(chunks)), timeout=WRITE_TIMEOUT_SECONDS
        )
        return response.indexed_count

    async def put_document_infos(self, documents: Sequence[rpb.DocumentMetadata]) -> None:
        await self._call("PutDocumentInfo", rpb.PutDocumentInfoRequest(documents=list(documents)))

    async def prune_document_chunks(
        self, knowledge_base_id: str, document_id: str, keep_ingest_run_id: str
    ) -> int:
        response: rpb.PruneDocumentChunksResponse = await self._call(
            "PruneDocumentChunks",
            rpb.PruneDocumentChunksRequest(
                knowledge_base_id=knowledge_base_id,
                document_id=document_id,
                keep_ingest_run_id=keep_ingest_run_id,
            ),
            timeout=WRITE_TIMEOUT_SECONDS,
        )
        return response.deleted_chunk_count

    async def delete_document(self, knowledge_base_id: str, document_id: str) -> rpb.DeleteDocumentResponse:
        response: rpb.DeleteDocumentResponse = await self._call(
            "DeleteDocument",
            rpb.DeleteDocumentRequest(knowledge_base_id=knowledge_base_id, document_id=document_id),
            timeout=WRITE_TIMEOUT_SECONDS,
        )
        return response

    async def delete_knowledge_base(self, knowledge_base_id: str) -> rpb.DeleteKnowledgeBaseResponse:
        response: rpb.DeleteKnowledgeBaseResponse = await self._call(
            "DeleteKnowledgeBase",
            rpb.DeleteKnowledgeBaseRequest(knowledge_base_id=knowledge_base_id),
            timeout=PURGE_TIMEOUT_SECONDS,
        )
        return response

    async def delete_embeddings(self, knowledge_base_id: str, embedding_model_id: str) -> int:
        response: rpb.DeleteEmbeddingsResponse = await self._call(
            "DeleteEmbeddings",
            rpb.DeleteEmbeddingsRequest(
                knowledge_base_id=knowledge_base_id, embedding_model_id=embedding_model_id
            ),
            timeout=PURGE_TIMEOUT_SECONDS,
        )
        return response.deleted_vector_count

    async def index_graph(
        self,
        knowledge_base_id: str,
        document_id: str,
        entities: Sequence[rpb.EntityInput],
        relations: Sequence[rpb.RelationInput],
    ) -> rpb.IndexGraphResponse:
        response: rpb.IndexGraphResponse = await self._call(
            "IndexGraph",
            rpb.IndexGraphRequest(
                knowledge_base_id=knowledge_base_id,
                document_id=document_id,
                entities=list(entities),
                relations=list(relations),
            ),
            timeout=WRITE_TIMEOUT_SECONDS,
        )
        return response

    # --- reads ------------------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        knowledge_base_ids: Sequence[str],
        *,
        top_k: int = 0,
        document_ids: Sequence[str] = (),
        options: rpb.SearchOptions | None = None,
    ) -> rpb.SearchResponse:
        """Ranked chunks for a query (doc_retrieval) with what the search did."""
        response: rpb.SearchResponse = await self._call(
            "Search",
            rpb.SearchRequest(
                query=query,
                knowledge_base_ids=list(knowledge_base_ids),
                top_k=top_k,
                document_ids=list(document_ids),
                options=options,
            ),
        )
        return response

    async def grep_chunks(self, request: rpb.GrepChunksRequest) -> rpb.GrepChunksResponse:
        response: rpb.GrepChunksResponse = await self._call("GrepChunks", request)
        return response

    async def list_chunks(self, request: rpb.ListChunksRequest) -> rpb.ListChunksResponse:
        response: rpb.ListChunksResponse = await self._call("ListChunks", request)
        return response

    async def get_document_info(self, document_ids: Sequence[str]) -> rpb.GetDocumentInfoResponse:
        response: rpb.GetDocumentInfoResponse = await self._call(
            "GetDocumentInfo", rpb.GetDocumentInfoRequest(document_ids=list(document_ids))
        )
        return response

    async def query_knowledge_graph(
        self, request: rpb.QueryKnowledgeGraphRequest
    ) -> rpb.QueryKnowledgeGraphResponse:
        response: rpb.QueryKnowledgeGraphResponse = await self._call("QueryKnowledgeGraph", request)
        return response

    async def get_index_stats(self, knowledge_base_ids: Sequence[str] = ()) -> rpb.GetIndexStatsResponse:
        response: rpb.GetIndexStatsResponse = await self._call(
            "GetIndexStats", rpb.GetIndexStatsRequest(knowledge_base_ids=list(knowledge_base_ids))
        )
        return response

    # --- evaluation -------------------------------------------------------------------------------

    async def evaluate_queries(
        self,
        knowledge_base_id: str,
        modes: Sequence[rpb.SearchMode],
        queries: Sequence[rpb.EvaluationQuery],
    ) -> rpb.EvaluateQueriesResponse:
        """Each labelled query searched in each mode and scored (nDCG@10, Recall@5/10/20, MRR@10)."""
        response: rpb.EvaluateQueriesResponse = await self._call(
            "EvaluateQueries",
            rpb.EvaluateQueriesRequest(
                knowledge_base_id=knowledge_base_id, modes=list(modes), queries=list(queries)
            ),
            timeout=EVALUATE_TIMEOUT_SECONDS,
        )
        return response
