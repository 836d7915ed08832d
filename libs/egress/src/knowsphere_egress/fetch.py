"""One guarded fetch: redirects followed by hand and re-checked, one time budget and one size budget
for the whole fetch.

The time budget covers resolution, every connect, every redirect and the whole body, so a server that
trickles one byte a second (slow loris) is cut off at the budget, not kept alive by per-read timeouts.
The size budget counts decoded body bytes as they arrive and stops reading at the limit, so a server
that streams forever, or a small gzip that inflates, costs at most the budget in memory.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import ssl
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx

from knowsphere_egress.errors import EgressError, EgressErrorCode
from knowsphere_egress.policy import EgressPolicy, check_url
from knowsphere_egress.resolver import Resolver
from knowsphere_egress.transport import EgressTransport


@dataclass(frozen=True)
class EgressResponse:
    """A complete response; ``url`` is the final one after redirects."""

    url: str
    status_code: int
    headers: httpx.Headers
    content: bytes
    """The body, already decoded from gzip/deflate."""
    redirects: list[str] = field(default_factory=list)
    """The URLs that redirected, in order."""

    @property
    def encoding(self) -> str:
        return httpx.Response(self.status_code, headers=self.headers).charset_encoding or "utf-8"

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding, errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class EgressClient:
    """Guarded outbound HTTP for one service. Create once, share, ``aclose`` at shutdown.

    ``http_client()`` gives an ``httpx.AsyncClient`` on the same guard for libraries that want one
    (e.g. ``openai.AsyncOpenAI(http_client=...)``): every request and redirect it makes is checked,
    but the per-fetch budgets are the caller's to apply there.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        user_agent: str = "KnowSphere/0.1 (+egress-guard)",
    ) -> None:
        self.policy = policy
        self._resolver = resolver
        self._verify = verify
        self._user_agent = user_agent
        self._client = self.http_client()

    def http_client(self, **client_options: Any) -> httpx.AsyncClient:
        """A new ``httpx.AsyncClient`` whose every connection goes through the guard."""
        client_options.setdefault("timeout", httpx.Timeout(self.policy.total_timeout_seconds))
        client_options.setdefault("follow_redirects", False)
        client_options.setdefault("max_redirects", self.policy.max_redirects)
        return httpx.AsyncClient(
            transport=EgressTransport(self.policy, resolver=self._resolver, verify=self._verify),
            trust_env=False,
            headers={"user-agent": self._user_agent, "accept-encoding": "gzip, deflate"},
            **client_options,
        )

    async def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        max_bytes: int | None = None,
        timeout_seconds: float | None = None,
    ) -> EgressResponse:
        """Fetch ``url`` within the policy; budgets may be narrowed (never widened) per call."""
        limit = min(max_bytes or self.policy.max_response_bytes, self.policy.max_response_bytes)
        budget = min(timeout_seconds or self.policy.total_timeout_seconds, self.policy.total_timeout_seconds)
        try:
            async with asyncio.timeout(budget):
                return await self._follow(url, method, headers, content, limit)
        except TimeoutError as exc:
            raise EgressError(EgressErrorCode.TIMED_OUT) from exc

    async def get(self, url: str, **options: Any) -> EgressResponse:
        return await self.fetch(url, method="GET", **options)

    async def _follow(
        self, url: str, method: str, headers: dict[str, str] | None, content: bytes | None, limit: int
    ) -> EgressResponse:
        check_url(url, self.policy)
        request = self._client.build_request(method, url, headers=headers, content=content)
        redirects: list[str] = []
        while True:
            try:
                response = await self._client.send(request, stream=True)
            except httpx.TimeoutException as exc:
                raise EgressError(EgressErrorCode.TIMED_OUT) from exc
            except httpx.TransportError as exc:
                # Before any response: "refused", "closed at once" and "not HTTP" all read the same,
                # so the answer tells nothing about what listens on that port.
                raise EgressError(EgressErrorCode.UNREACHABLE) from exc
            try:
                next_request = response.next_request
                if next_request is None:
                    body = await _read_within(response, limit)
                    return EgressResponse(
                        url=str(response.url),
                        status_code=response.status_code,
                        headers=response.headers,
                        content=body,
                        redirects=redirects,
                    )
            finally:
                await response.aclose()
            redirects.append(str(request.url))
            if len(redirects) > self.policy.max_redirects:
                raise EgressError(EgressErrorCode.TOO_MANY_REDIRECTS)
            check_url(next_request.url, self.policy)
            request = next_request

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> EgressClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _read_within(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit and "content-encoding" not in response.headers:
        raise EgressError(EgressErrorCode.TOO_LARGE)
    decoder = _BoundedDecoder(response.headers.get("content-encoding", ""), limit)
    try:
        async for chunk in response.aiter_raw():
            decoder.feed(chunk)
    except httpx.TimeoutException as exc:
        raise EgressError(EgressErrorCode.TIMED_OUT) from exc
    except httpx.TransportError as exc:
        raise EgressError(EgressErrorCode.BAD_RESPONSE) from exc
    return decoder.finish()


_WINDOW_BITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class _BoundedDecoder:
    """Decodes ``gzip``/``deflate`` bodies without ever inflating more than the budget (httpx's own
    decoder would inflate a whole network chunk at once: 64 KiB of zeros become 64 MiB)."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        encoding = content_encoding.strip().lower()
        if encoding in ("", "identity"):
            self._inflater = None
        elif encoding in _WINDOW_BITS:
            self._inflater = zlib.decompressobj(_WINDOW_BITS[encoding])
        else:  # we ask for gzip and deflate only; anything else is not what we asked for
            raise EgressError(EgressErrorCode.BAD_RESPONSE)
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            raise EgressError(EgressErrorCode.TOO_LARGE)
        self._chunks.append(data)

    def feed(self, chunk: bytes) -> None:
        if self._inflater is None:
            self._keep(chunk)
            return
        pending = chunk
        try:
            while pending:
                self._keep(self._inflater.decompress(pending, self._limit - self._size + 1))
                pending = self._inflater.unconsumed_tail
        except zlib.error as exc:
            raise EgressError(EgressErrorCode.BAD_RESPONSE) from exc

    def finish(self) -> bytes:
        if self._inflater is not None:
            try:
                self._keep(self._inflater.flush(self._limit - self._size + 1))
            except zlib.error as exc:
                raise EgressError(EgressErrorCode.BAD_RESPONSE) from exc
        return b"".join(self._chunks)
