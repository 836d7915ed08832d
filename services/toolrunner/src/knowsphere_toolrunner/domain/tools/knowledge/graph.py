"""query_knowledge_graph: entities and relations, each relation with the passages it was taken from."""

from __future__ import annotations

from typing import Any

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import BadArguments, Needs, ToolContext, ToolOutput, ToolSpec
from knowsphere_toolrunner.domain.tools.knowledge.common import (
    KnowledgeReader,
    chunk_source,
    drop_empty,
    read,
)

_TEMPLATES = {
    "entity_lookup": rpb.GRAPH_QUERY_TEMPLATE_ENTITY_LOOKUP,
    "neighbourhood": rpb.GRAPH_QUERY_TEMPLATE_NEIGHBOURHOOD,
    "connection": rpb.GRAPH_QUERY_TEMPLATE_CONNECTION,
}


class QueryKnowledgeGraph:
    def __init__(self, reader: KnowledgeReader, *, timeout: float) -> None:
        self._reader = reader
        self.spec = ToolSpec(
            name="query_knowledge_graph",
            display_name="Knowledge graph",
            description=(
                "Look up entities (people, organisations, products …) and how they relate in the knowledge "
                "graph built from the selected knowledge bases: entity_lookup finds an entity, neighbourhood "
                "lists what is related to it within 1 or 2 hops, connection finds how two entities are "
                "linked. Relations come with source labels of the passages they were taken from; read those "
                "with list_chunks. A supplement to doc_retrieval, not a replacement for reading."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query_type": {"type": "string", "enum": list(_TEMPLATES)},
                    "entity_name": {"type": "string", "minLength": 1, "maxLength": 200},
                    "other_entity_name": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 200,
                        "description": "The second entity (connection only).",
                    },
                    "hops": {"type": "integer", "minimum": 1, "maximum": 2, "description": "Default 1."},
                    "relation_types": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
                    "entity_types": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
                },
                "required": ["query_type", "entity_name"],
                "additionalProperties": False,
            },
            category=ToolCategory.KNOWLEDGE_BASE,
            produces_sources=True,
            needs=frozenset({Needs.KNOWLEDGE_BASE, Needs.KNOWLEDGE_GRAPH}),
            timeout_seconds=timeout,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        query_type = arguments["query_type"]
        if query_type == "connection" and not arguments.get("other_entity_name"):
            raise BadArguments("a connection query needs other_entity_name")
        request = rpb.QueryKnowledgeGraphRequest(
            knowledge_base_ids=context.switches.knowledge_base_ids,
            template=_TEMPLATES[query_type],
            parameters=rpb.GraphQueryParameters(
                entity_name=arguments["entity_name"],
                other_entity_name=arguments.get("other_entity_name", ""),
                hops=arguments.get("hops", 1),
                relation_types=arguments.get("relation_types", ()),
                entity_types=arguments.get("entity_types", ()),
            ),
        )
        found = await read(lambda: self._reader.query_knowledge_graph(request))
        entities = [
            drop_empty(
                {"name": e.name, "type": e.type, "description": e.description, "aliases": list(e.aliases)}
            )
            for e in found.entities
        ]
        relations = []
        for relation in found.relations:
            supports = []
            for chunk in relation.supporting_chunks:
                source = context.sources.cite(chunk_source(chunk, chunk.snippet))
                supports.append(
                    drop_empty(
                        {"source": source.label, "file_name": chunk.file_name, "snippet": chunk.snippet}
                    )
                )
            relations.append(
                drop_empty(
                    {
                        "source_entity": relation.source_name,
                        "relation": relation.type,
                        "target_entity": relation.target_name,
                        "description": relation.description,
                        "weight": round(relation.weight, 3),
                        "evidence": supports,
                    }
                )
            )
        result: dict[str, Any] = {"entities": entities, "relations": relations}
        if found.truncated:
            result["truncated"] = "limits cut the result; ask about a narrower entity or relation type"
        if found.skipped_knowledge_base_ids:
            result["graph_off_in"] = list(found.skipped_knowledge_base_ids)
        if not entities and not relations:
            result["note"] = "Nothing in the graph for this; use doc_retrieval."
        return ToolOutput(result)
