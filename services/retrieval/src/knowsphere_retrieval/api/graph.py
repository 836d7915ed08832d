"""Retrieval's gRPC face for knowledge-graph reads: QueryKnowledgeGraph over fixed templates.

Only the parameterised templates of the graph store run — never user-supplied Cypher. Knowledge bases
configured without the graph are skipped and named in the answer.
"""

from __future__ import annotations

from typing import Any

import grpc

from knowsphere.retrieval.v1 import retrieval_pb2 as pb
from knowsphere_retrieval.api.convert import entity_message, relation_message, supporting_chunk
from knowsphere_retrieval.api.stores import Stores
from knowsphere_retrieval.domain.ports import Neighbourhood, Scope
from knowsphere_retrieval.settings import Settings
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import RequestError, answer, invalid


class GraphServicer:
    def __init__(self, *, settings: Settings, stores: Stores) -> None:
        self._settings = settings
        self._stores = stores

    async def QueryKnowledgeGraph(self, request: pb.QueryKnowledgeGraphRequest, context: Any) -> Any:
        async def work() -> pb.QueryKnowledgeGraphResponse:
            tenant = require_identity().tenant_id
            graph = self._stores.graph
            if graph is None:
                raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "the graph store is turned off")
            configs = await self._stores.configs(
                tenant,
                list(request.knowledge_base_ids),
                "knowledge_base_ids",
                self._settings.max_knowledge_bases_per_search,
            )
            enabled = [c.knowledge_base_id for c in configs if c.graph_enabled]
            response = pb.QueryKnowledgeGraphResponse(
                skipped_knowledge_base_ids=[kb for kb in request.knowledge_base_ids if kb not in enabled]
            )
            params = request.parameters
            if not params.entity_name.strip():
                raise invalid("parameters.entity_name", "required")
            if not enabled:
                return response
            scope = Scope(tenant, tuple(enabled))
            max_entities = params.max_entities or self._settings.graph_max_entities
            if request.template == pb.GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP:
                found = await graph.find_entities(scope, params.entity_name, max_entities)
                response.entities.extend(entity_message(entity) for entity in found)
                return response
            if request.template == pb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD:
                hops = params.hops or 1
                if hops not in (1, 2):
                    raise invalid("parameters.hops", f"{hops}; must be 1 or 2")
                hood = await graph.neighbourhood(scope, params.entity_name, hops, max_entities)
                await self._answer_neighbourhood(tenant, hood, params, response)
                return response
            raise RequestError(
                grpc.StatusCode.UNIMPLEMENTED,
                "template: only ENTITY_LOOKUP and NEIGHBOURHOOD are available; "
                "CONNECTION is not implemented yet",
            )

        return await answer(context, work)

    async def _answer_neighbourhood(
        self,
        tenant: str,
        hood: Neighbourhood,
        params: pb.GraphQueryParameters,
        response: pb.QueryKnowledgeGraphResponse,
    ) -> None:
        """Entities and relations, each relation with the chunks that support it (each chunk read once)."""
        settings = self._settings
        response.entities.extend(entity_message(entity) for entity in hood.entities)
        per_relation = params.max_supporting_chunks or settings.graph_supporting_chunks
        relations = hood.relations[: params.max_relations or settings.graph_max_relations]
        chunk_ids = list(dict.fromkeys(cid for r in relations for cid in r.source_chunk_ids[:per_relation]))
        stored = {c.chunk_id: c for c in await self._stores.chunks.get_chunks(tenant, chunk_ids)}
        for relation in relations:
            supporting = [
                supporting_chunk(stored[chunk_id], settings.graph_snippet_chars)
                for chunk_id in relation.source_chunk_ids[:per_relation]
                if chunk_id in stored
            ]
            response.relations.append(relation_message(relation, supporting))
