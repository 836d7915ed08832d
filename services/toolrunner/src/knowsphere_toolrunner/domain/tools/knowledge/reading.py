"""list_chunks and get_document_info: reading what a search found, and what a document is."""

from __future__ import annotations

from typing import Any

from knowsphere.retrieval.v1 import retrieval_pb2 as rpb
from knowsphere.retrieval.v1.retrieval_enums import DocumentStatus
from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_contracts.convert import datetime_of
from knowsphere_toolrunner.domain.sources import index_of_label
from knowsphere_toolrunner.domain.tools.base import (
    BadArguments,
    Needs,
    NothingFound,
    ToolContext,
    ToolOutput,
    ToolSpec,
)
from knowsphere_toolrunner.domain.tools.knowledge.common import (
    CITE_NOTE,
    MAX_DOCUMENT_IDS,
    KnowledgeReader,
    chunk_source,
    drop_empty,
    headings,
    read,
)


class ListChunks:
    def __init__(
        self, reader: KnowledgeReader, *, max_selectors: int, max_neighbours: int, timeout: float
    ) -> None:
        self._reader = reader
        self.spec = ToolSpec(
            name="list_chunks",
            display_name="Read passages",
            description=(
                "Read passages in full: the chunks behind source labels from doc_retrieval or grep_chunks "
                '(e.g. ["c2", "c5"]) or chunk ids, optionally with neighbouring chunks before and after, '
                "or a range of positions of one document in reading order. Use it after a hit, before "
                "answering from it. Returns each chunk's text, its section context and its source label."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "sources": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "minItems": 1,
                        "maxItems": max_selectors,
                        "description": 'Source labels of this turn ("c3") or chunk ids to read.',
                    },
                    "neighbours_before": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": max_neighbours,
                        "description": "Also read this many chunks before each one (default 0).",
                    },
                    "neighbours_after": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": max_neighbours,
                        "description": "Also read this many chunks after each one (default 0).",
                    },
                    "document_id": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Read a range of this document.",
                    },
                    "start_position": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "First position of the range.",
                    },
                    "end_position": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Last position of the range.",
                    },
                    "page_token": {"type": "string", "description": "next_page_token of a previous call."},
                },
                "additionalProperties": False,
            },
            category=ToolCategory.KNOWLEDGE_BASE,
            produces_sources=True,
            needs=frozenset({Needs.KNOWLEDGE_BASE}),
            timeout_seconds=timeout,
        )

    def _selectors(self, arguments: dict[str, Any], context: ToolContext) -> list[rpb.ChunkSelector]:
        before = arguments.get("neighbours_before", 0)
        after = arguments.get("neighbours_after", 0)
        selectors = []
        for item in arguments.get("sources", ()):
            if index_of_label(item) is not None:
                source = context.sources.resolve(item)
                if source is None:
                    raise NothingFound(
                        f"{item} is not a source of this turn; use a label from this turn's results"
                    )
                selector = (
                    rpb.ChunkSelector(handle=source.handle)
                    if source.handle
                    else rpb.ChunkSelector(chunk_id=source.chunk_id)
                )
            else:
                selector = rpb.ChunkSelector(chunk_id=item)
            selector.neighbours_before = before
            selector.neighbours_after = after
            selectors.append(selector)
        if "document_id" in arguments:
            if "start_position" not in arguments or "end_position" not in arguments:
                raise BadArguments("a document range needs document_id, start_position and end_position")
            if arguments["end_position"] < arguments["start_position"]:
                raise BadArguments("end_position is before start_position")
            selectors.append(
                rpb.ChunkSelector(
                    range=rpb.PositionRange(
                        document_id=arguments["document_id"],
                        start_position=arguments["start_position"],
                        end_position=arguments["end_position"],
                    )
                )
            )
        if not selectors:
            raise BadArguments(
                "name the chunks to read: sources, or document_id with start_position and end_position"
            )
        return selectors

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        request = rpb.ListChunksRequest(
            selectors=self._selectors(arguments, context),
            knowledge_base_ids=context.switches.knowledge_base_ids,
            include_parent_text=True,
            page_token=arguments.get("page_token", ""),
        )
        found = await read(lambda: self._reader.list_chunks(request))
        chunks = []
        for chunk in found.chunks:
            source = context.sources.cite(chunk_source(chunk, chunk.text))
            chunks.append(
                drop_empty(
                    {
                        "source": source.label,
                        "file_name": chunk.file_name,
                        "document_id": chunk.document_id,
                        "chunk_id": chunk.chunk_id,
                        "position": chunk.position,
                        "section": headings(chunk.heading_path),
                        "page": chunk.page,
                        "neighbour": chunk.neighbour,
                        "text": chunk.text,
                        "context": chunk.parent_text if chunk.parent_text != chunk.text else "",
                    }
                )
            )
        result: dict[str, Any] = {"chunks": chunks}
        if found.not_found:
            result["not_found"] = list(found.not_found)
        if found.next_page_token:
            result["next_page_token"] = found.next_page_token
        result["note"] = CITE_NOTE if chunks else "Nothing to read for these sources."
        return ToolOutput(result)


class GetDocumentInfo:
    def __init__(self, reader: KnowledgeReader, *, timeout: float) -> None:
        self._reader = reader
        self.spec = ToolSpec(
            name="get_document_info",
            display_name="Document details",
            description=(
                "Metadata of documents — file name, title, type, size, pages, language, upload time, "
                "processing status and chunk count — never their text. Name documents by document_id or by "
                'a source label of this turn ("c3"). Use it for questions about the documents themselves.'
            ),
            parameters={
                "type": "object",
                "properties": {
                    "document_ids": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "minItems": 1,
                        "maxItems": MAX_DOCUMENT_IDS,
                        "description": 'Document ids, or source labels ("c3") whose documents to describe.',
                    }
                },
                "required": ["document_ids"],
                "additionalProperties": False,
            },
            category=ToolCategory.KNOWLEDGE_BASE,
            needs=frozenset({Needs.KNOWLEDGE_BASE}),
            timeout_seconds=timeout,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        ids: list[str] = []
        for item in arguments["document_ids"]:
            if index_of_label(item) is not None:
                source = context.sources.resolve(item)
                if source is None:
                    raise NothingFound(f"{item} is not a source of this turn")
                item = source.document_id
            if item not in ids:
                ids.append(item)
        found = await read(lambda: self._reader.get_document_info(ids))
        selected = set(context.switches.knowledge_base_ids)
        documents = []
        not_found = list(found.not_found)
        for info in found.documents:
            meta = info.metadata
            # Only documents of the turn's knowledge bases: another of the tenant's is not in scope.
            if meta.knowledge_base_id and meta.knowledge_base_id not in selected:
                not_found.append(meta.document_id)
                continue
            created = datetime_of(meta, "create_time")
            status = DocumentStatus.from_number(meta.status)
            documents.append(
                drop_empty(
                    {
                        "document_id": meta.document_id,
                        "file_name": meta.file_name,
                        "title": meta.title,
                        "content_type": meta.content_type,
                        "size_bytes": meta.size_bytes,
                        "page_count": meta.page_count,
                        "language": meta.language,
                        "status": status.value if status else "",
                        "uploaded": created.isoformat() if created else "",
                        "chunk_count": info.index.chunk_count,
                    }
                )
            )
        result: dict[str, Any] = {"documents": documents}
        if not_found:
            result["not_found"] = not_found
        return ToolOutput(result)
