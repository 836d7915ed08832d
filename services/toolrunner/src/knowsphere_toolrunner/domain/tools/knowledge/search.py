"""doc_retrieval and grep_chunks: finding passages, by meaning and words or by exact pattern."""

from __future__ import annotations

from typing import Any

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_toolrunner.domain.tools.base import BadArguments, Needs, ToolContext, ToolOutput, ToolSpec
from knowsphere_toolrunner.domain.tools.knowledge.common import (
    CITE_NOTE,
    DOCUMENT_IDS_SCHEMA,
    MAX_GREP_MATCHES,
    MAX_PATTERN_CHARS,
    MAX_QUERY_CHARS,
    KnowledgeReader,
    chunk_source,
    drop_empty,
    headings,
    read,
)


class DocRetrieval:
    def __init__(
        self, reader: KnowledgeReader, *, default_top_k: int, max_top_k: int, timeout: float
    ) -> None:
        self._reader = reader
        self._default_top_k = default_top_k
        self.spec = ToolSpec(
            name="doc_retrieval",
            display_name="Search knowledge base",
            description=(
                "Search the selected knowledge bases for passages about a question (semantic and keyword "
                "search combined, best first). Each result has a source label (c1, c2 …), the file name, "
                "document and chunk ids, its section and page, the passage text and the surrounding context. "
                "Facts in your answer must come from such results; cite them as [[cN]]. A hit is often "
                "only part of the answer: read it in full with list_chunks (and its neighbours) before "
                "relying on it. For exact codes, names or numbers use grep_chunks."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "A question or key phrase, in the documents' language.",
                    },
                    "top_k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": max_top_k,
                        "description": f"How many passages to return (default {default_top_k}).",
                    },
                    "document_ids": DOCUMENT_IDS_SCHEMA,
                    "second_hop": {
                        "type": "boolean",
                        "description": (
                            "Also search for the names that the best passages mention (default: off). Use "
                            "it when the question needs a bridge between two facts, e.g. 'the university "
                            "where X's advisor studied': the first passage names the advisor, the second "
                            "is about the advisor. Slower; not needed for a question one passage answers."
                        ),
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            category=ToolCategory.KNOWLEDGE_BASE,
            produces_sources=True,
            needs=frozenset({Needs.KNOWLEDGE_BASE}),
            timeout_seconds=timeout,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        query = arguments["query"].strip()
        if not query:
            raise BadArguments("query is blank; say what to look for")
        found = await read(
            lambda: self._reader.search(
                query,
                context.switches.knowledge_base_ids,
                top_k=arguments.get("top_k", self._default_top_k),
                document_ids=arguments.get("document_ids", ()),
                # Unset leaves the server's default; set either way, it is the model's choice.
                options=rpb.SearchOptions(second_hop=arguments["second_hop"])
                if "second_hop" in arguments
                else None,
            )
        )
        results = []
        for hit in found.results:
            source = context.sources.cite(chunk_source(hit, hit.text))
            results.append(
                drop_empty(
                    {
                        "source": source.label,
                        "file_name": hit.file_name,
                        "document_id": hit.document_id,
                        "chunk_id": hit.chunk_id,
                        "section": headings(hit.heading_path),
                        "page": hit.page,
                        "score": round(hit.score, 4),
                        "text": hit.text,
                        "context": hit.parent_text if hit.parent_text != hit.text else "",
                    }
                )
            )
        note = (
            CITE_NOTE + " Read a hit in full with list_chunks before relying on it."
            if results
            else "Nothing matched. Try other words or synonyms, or grep_chunks for an exact term."
        )
        return ToolOutput({"query": query, "results": results, "note": note})


class GrepChunks:
    def __init__(self, reader: KnowledgeReader, *, timeout: float) -> None:
        self._reader = reader
        self.spec = ToolSpec(
            name="grep_chunks",
            display_name="Find exact text",
            description=(
                "Find exact text in the selected knowledge bases with a regular expression (RE2 syntax): "
                "error codes, model numbers, names, clause numbers, dates. Returns each match with a little "
                "context and its source label; read a match in full with list_chunks. Use doc_retrieval "
                "for questions in natural language."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PATTERN_CHARS,
                        "description": 'RE2 regular expression, e.g. "E04\\\\d{2}" or "XJ-2000-[A-C]".',
                    },
                    "ignore_case": {
                        "type": "boolean",
                        "description": "Match case-insensitively (default false).",
                    },
                    "document_ids": DOCUMENT_IDS_SCHEMA,
                    "max_matches": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_GREP_MATCHES,
                        "description": "At most this many matches (default: the server's).",
                    },
                },
                "required": ["pattern"],
                "additionalProperties": False,
            },
            category=ToolCategory.KNOWLEDGE_BASE,
            produces_sources=True,
            needs=frozenset({Needs.KNOWLEDGE_BASE}),
            timeout_seconds=timeout,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        request = rpb.GrepChunksRequest(
            pattern=arguments["pattern"],
            ignore_case=arguments.get("ignore_case", False),
            knowledge_base_ids=context.switches.knowledge_base_ids,
            document_ids=arguments.get("document_ids", ()),
            max_matches=arguments.get("max_matches", 0),
        )
        found = await read(lambda: self._reader.grep_chunks(request))
        matches = []
        for match in found.matches:
            source = context.sources.cite(chunk_source(match, f"{match.before}{match.match}{match.after}"))
            matches.append(
                drop_empty(
                    {
                        "source": source.label,
                        "file_name": match.file_name,
                        "document_id": match.document_id,
                        "section": headings(match.heading_path),
                        "page": match.page,
                        "before": match.before,
                        "match": match.match,
                        "after": match.after,
                    }
                )
            )
        result: dict[str, Any] = {"pattern": request.pattern, "matches": matches}
        if found.truncated:
            result["truncated"] = "more matches exist; narrow the pattern or the documents"
        if found.timed_out:
            result["timed_out"] = "the scan hit its time limit; matches are partial"
        result["note"] = CITE_NOTE if matches else "No match. Check the pattern, or use doc_retrieval."
        return ToolOutput(result)
