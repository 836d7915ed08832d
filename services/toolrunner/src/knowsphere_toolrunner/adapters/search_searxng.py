"""Web search through a SearXNG instance's JSON API (``GET /search?q=…&format=json``).

The instance must list ``json`` in ``search.formats`` of its ``settings.yml`` (it answers 403
otherwise). It is usually self-hosted on a private address: the operator then allow-lists it in the
egress policy (``KS_TOOLRUNNER_EGRESS__ALLOW_HOSTS``), since every request goes through the egress
guard like any other.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from knowsphere_egress import EgressClient, EgressError
from knowsphere_toolrunner.domain.web_search import SearchFailed, SearchHit

_FORBIDDEN = 403


class SearxngSearch:
    name = "searxng"

    def __init__(
        self, egress: EgressClient, base_url: str, *, timeout_seconds: float, max_response_bytes: int
    ) -> None:
        self._egress = egress
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout_seconds
        self._max_bytes = max_response_bytes

    async def search(self, query: str, *, max_results: int) -> list[SearchHit]:
        url = f"{self._base_url}/search?" + urlencode({"q": query, "format": "json", "pageno": 1})
        try:
            response = await self._egress.fetch(
                url,
                headers={"accept": "application/json"},
                max_bytes=self._max_bytes,
                timeout_seconds=self._timeout,
            )
        except EgressError as error:
            raise SearchFailed(f"the SearXNG instance cannot be reached: {error}", retryable=True) from error
        if response.status_code == _FORBIDDEN:
            raise SearchFailed(
                "the SearXNG instance refuses JSON answers "
                "(enable 'json' in search.formats of its settings.yml)",
                retryable=False,
            )
        if response.status_code >= 400:
            raise SearchFailed(
                f"the SearXNG instance answered HTTP {response.status_code}",
                retryable=response.status_code >= 500,
            )
        try:
            results = response.json().get("results", [])
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
            raise SearchFailed(
                "the SearXNG instance's answer is not its JSON format", retryable=False
            ) from error
        hits: list[SearchHit] = []
        seen: set[str] = set()
        for item in results if isinstance(results, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("url"), str) or item["url"] in seen:
                continue
            seen.add(item["url"])
            hits.append(
                SearchHit(
                    title=str(item.get("title") or ""),
                    url=item["url"],
                    snippet=str(item.get("content") or ""),
                )
            )
            if len(hits) == max_results:
                break
        return hits
