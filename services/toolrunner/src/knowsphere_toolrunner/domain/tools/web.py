"""The web tools, offered when web search is on this turn: ``web_search`` (a configured provider's
results, each a citable source) and ``web_fetch`` (a page's main text or a PDF's text, a citable
source). Every request goes through the egress guard (``knowsphere_egress``): private, loopback,
link-local and metadata addresses are refused unless the operator allow-listed them, every redirect is
re-checked, and each fetch has one time and size budget.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from knowsphere.toolrunner.v1.toolrunner_enums import SourceKind, ToolCategory
from knowsphere_egress import EgressClient, EgressError, EgressErrorCode
from knowsphere_toolrunner.domain.page_text import UnreadablePage, page_text
from knowsphere_toolrunner.domain.sources import Source
from knowsphere_toolrunner.domain.tools.base import (
    Needs,
    ToolContext,
    ToolOutput,
    ToolProblem,
    ToolSpec,
    TransientProblem,
)
from knowsphere_toolrunner.domain.web_search import SearchFailed, SearchProvider

CITE_NOTE = "Cite what you use from a result as [[cN]] with its source label."
_SERVER_ERROR = 500
_CLIENT_ERROR = 400
# Egress failures worth another attempt; the others (blocked, too large …) would fail the same way.
_TRANSIENT_EGRESS = frozenset({EgressErrorCode.TIMED_OUT, EgressErrorCode.BAD_RESPONSE})


@dataclass(frozen=True)
class WebSearchLimits:
    default_results: int
    max_results: int
    timeout_seconds: float


@dataclass(frozen=True)
class WebFetchLimits:
    max_bytes: int
    fetch_timeout_seconds: float
    max_chars: int
    max_pdf_pages: int
    timeout_seconds: float


def web_search_spec(limits: WebSearchLimits) -> ToolSpec:
    return ToolSpec(
        name="web_search",
        display_name="Web search",
        description=(
            "Search the web for current or public information the knowledge bases do not hold (news, "
            "prices, public facts). Returns results with title, URL and snippet, each with a source label "
            "to cite as [[cN]]. Open a promising result with web_fetch before relying on it."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 500, "description": "Search terms."},
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": limits.max_results,
                    "description": f"Default {limits.default_results}.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        category=ToolCategory.WEB,
        produces_sources=True,
        needs=frozenset({Needs.WEB}),
        timeout_seconds=limits.timeout_seconds,
    )


def web_fetch_spec(limits: WebFetchLimits) -> ToolSpec:
    return ToolSpec(
        name="web_fetch",
        display_name="Open web page",
        description=(
            "Open a web page or PDF by URL (usually one from web_search) and return its main text, without "
            "menus and ads, with a source label to cite as [[cN]]."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "http(s) URL."},
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        category=ToolCategory.WEB,
        produces_sources=True,
        needs=frozenset({Needs.WEB}),
        timeout_seconds=limits.timeout_seconds,
    )


class WebSearch:
    def __init__(self, provider: SearchProvider, limits: WebSearchLimits) -> None:
        self._provider = provider
        self._limits = limits
        self.spec = web_search_spec(limits)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        query = arguments["query"].strip()
        wanted = arguments.get("max_results", self._limits.default_results)
        try:
            hits = await self._provider.search(query, max_results=wanted)
        except SearchFailed as error:
            if error.retryable:
                raise TransientProblem(f"web search: {error}") from error
            raise ToolProblem(f"web_search is unavailable: {error}.") from None
        results = []
        for hit in hits:
            source = context.sources.cite(
                Source(kind=SourceKind.WEB, url=hit.url, title=hit.title, snippet=hit.snippet)
            )
            results.append(
                {"source": source.label, "title": hit.title, "url": hit.url, "snippet": hit.snippet}
            )
        note = (
            CITE_NOTE + " Snippets are short: open a result with web_fetch before relying on it."
            if results
            else "Nothing found. Try other words."
        )
        return ToolOutput({"query": query, "results": results, "note": note})


class WebFetch:
    def __init__(self, egress: EgressClient, limits: WebFetchLimits) -> None:
        self._egress = egress
        self._limits = limits
        self.spec = web_fetch_spec(limits)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        url = arguments["url"].strip()
        limits = self._limits
        try:
            response = await self._egress.fetch(
                url,
                headers={
                    "accept": "text/html,application/xhtml+xml,application/pdf,text/plain;q=0.9,*/*;q=0.5"
                },
                max_bytes=limits.max_bytes,
                timeout_seconds=limits.fetch_timeout_seconds,
            )
        except EgressError as error:
            # The guard's messages are fixed per code and never name addresses or ports.
            if error.code in _TRANSIENT_EGRESS:
                raise TransientProblem(f"web_fetch: {error}") from error
            if error.code == EgressErrorCode.TOO_LARGE:
                raise ToolProblem(
                    f"web_fetch could not open {url}: the page is larger than {limits.max_bytes} bytes."
                ) from None
            raise ToolProblem(f"web_fetch could not open {url}: {error}.") from None
        status = response.status_code
        if status >= _SERVER_ERROR:
            raise TransientProblem(f"the site answered HTTP {status}")
        if status >= _CLIENT_ERROR:
            raise ToolProblem(f"web_fetch could not open {url}: the site answered HTTP {status}.")
        try:
            page = await asyncio.to_thread(
                page_text,
                response.content,
                response.headers.get("content-type", ""),
                response.encoding,
                max_pdf_pages=limits.max_pdf_pages,
            )
        except UnreadablePage as error:
            raise ToolProblem(f"web_fetch could not read {url}: {error}.") from None
        if not page.text:
            raise ToolProblem(f"web_fetch found no readable text at {url}.")
        text = page.text[: limits.max_chars]
        title = page.title or response.url
        source = context.sources.cite(
            Source(kind=SourceKind.WEB, url=response.url, title=title, snippet=text)
        )
        result: dict[str, Any] = {
            "source": source.label,
            "url": response.url,
            "title": title,
            "kind": page.kind.value,
            "text": text,
        }
        if len(page.text) > limits.max_chars:
            result["truncated"] = f"cut at {limits.max_chars} of {len(page.text)} characters"
        if page.pages_total > page.pages:
            result["pages"] = f"read {page.pages} of {page.pages_total} pages"
        result["note"] = CITE_NOTE
        return ToolOutput(result)
