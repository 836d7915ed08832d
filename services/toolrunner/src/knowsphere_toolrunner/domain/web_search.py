"""The port of a web search backend, and what it answers. Adapters: ``adapters/search_searxng.py``
(a SearXNG instance's JSON API) and ``adapters/search_tavily.py`` (Tavily's hosted API)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str


class SearchFailed(Exception):
    """The provider could not answer. ``retryable``: a time-out or a server error, worth another
    attempt; otherwise (bad key, refused query, misconfiguration) the message says what to fix."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, *, max_results: int) -> list[SearchHit]:
        """At most ``max_results`` hits, best first; raises :class:`SearchFailed`."""


class NoSearchProvider:
    """No provider configured: each search says how to configure one."""

    name = "none"

    async def search(self, query: str, *, max_results: int) -> list[SearchHit]:
        raise SearchFailed(
            "no web search provider is configured on this server. An operator sets "
            "KS_TOOLRUNNER_WEB_SEARCH_PROVIDER=searxng with KS_TOOLRUNNER_SEARXNG_URL, or "
            "KS_TOOLRUNNER_WEB_SEARCH_PROVIDER=tavily with KS_TOOLRUNNER_TAVILY_API_KEY",
            retryable=False,
        )
