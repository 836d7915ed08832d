"""Web search through Tavily's hosted API (``POST {base}/search`` with ``Authorization: Bearer <key>``;
answer ``{"results": [{"title", "url", "content", "score"}, …]}``). Through the egress guard like every
outbound request."""

from __future__ import annotations

import json

from pydantic import SecretStr

from knowsphere_egress import EgressClient, EgressError
from knowsphere_toolrunner.domain.web_search import SearchFailed, SearchHit

_UNAUTHORISED = frozenset({401, 403})
_TOO_MANY_REQUESTS = 429
SEARCH_DEPTH = "basic"


class TavilySearch:
    name = "tavily"

    def __init__(
        self,
        egress: EgressClient,
        api_key: SecretStr,
        *,
        base_url: str,
        timeout_seconds: float,
        max_response_bytes: int,
    ) -> None:
        self._egress = egress
        self._api_key = api_key
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout_seconds
        self._max_bytes = max_response_bytes

    async def search(self, query: str, *, max_results: int) -> list[SearchHit]:
        body = {"query": query, "max_results": max_results, "search_depth": SEARCH_DEPTH}
        try:
            response = await self._egress.fetch(
                f"{self._base_url}/search",
                method="POST",
                headers={
                    "authorization": f"Bearer {self._api_key.get_secret_value()}",
                    "content-type": "application/json",
                    "accept": "application/json",
                },
                content=json.dumps(body).encode(),
                max_bytes=self._max_bytes,
                timeout_seconds=self._timeout,
            )
        except EgressError as error:
            raise SearchFailed(f"Tavily cannot be reached: {error}", retryable=True) from error
        status = response.status_code
        if status in _UNAUTHORISED:
            raise SearchFailed(
                "Tavily refused the API key (check KS_TOOLRUNNER_TAVILY_API_KEY)", retryable=False
            )
        if status == _TOO_MANY_REQUESTS:
            raise SearchFailed(
                "Tavily's rate limit or plan quota is reached; try again later", retryable=False
            )
        if status >= 400:
            raise SearchFailed(f"Tavily answered HTTP {status}", retryable=status >= 500)
        try:
            results = response.json().get("results", [])
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
            raise SearchFailed("Tavily's answer is not its JSON format", retryable=False) from error
        return [
            SearchHit(
                title=str(item.get("title") or ""), url=item["url"], snippet=str(item.get("content") or "")
            )
            for item in (results if isinstance(results, list) else [])
            if isinstance(item, dict) and isinstance(item.get("url"), str)
        ][:max_results]
