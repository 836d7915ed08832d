"""What a browser must not be able to do to the API: reach it under a foreign name, or post to it from
another site.

- **Host allow-list** (DNS rebinding): a page of ``evil.example`` whose name is re-pointed at
  127.0.0.1 reaches a local gateway as same-origin, but its requests carry ``Host: evil.example``.
  A request whose Host (port aside) is not on the list is refused with 400. Local mode defaults the
  list to ``localhost``, ``127.0.0.1`` and ``::1``; without local mode there is no list unless one is
  set (a token, not the network position, is what lets a caller in).
- **Cross-site requests**: a multipart upload is a CORS "simple request", sent by any page without a
  preflight; in local mode (no credentials) or behind a proxy that authenticates by cookie it would
  act as the user. A state-changing request (anything but GET, HEAD, OPTIONS) whose ``Origin`` is
  neither the gateway's own (same host and port as ``Host``) nor an allowed origin is refused with
  403; without ``Origin``, a ``Sec-Fetch-Site`` other than ``same-origin`` or ``none`` is refused too.
  Clients that are not browsers (curl, SDKs, the CLI) send neither header and are not affected.

The API sets no cookies and answers no CORS preflight, so a cross-site page cannot send a token either.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_ORIGIN_FETCH_SITES = frozenset({"same-origin", "none"})


def host_name(host: str) -> str:
    """The name of a ``Host`` value without its port, lower-case; IPv6 without brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def origin_netloc(origin: str) -> str | None:
    """``host[:port]`` of an ``Origin`` value, lower-case; None for ``null`` or a malformed one."""
    parts = urlsplit(origin.strip().lower())
    return parts.netloc if parts.scheme in ("http", "https") and parts.netloc else None


class BrowserGuard:
    """ASGI middleware applying the Host allow-list and refusing cross-site state changes."""

    def __init__(
        self, app: ASGIApp, allowed_hosts: Iterable[str] | None = None, allowed_origins: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.allowed_hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        self.allowed_origins = frozenset(filter(None, (origin_netloc(o) for o in allowed_origins)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if self.allowed_hosts is not None and host_name(host) not in self.allowed_hosts:
            refusal = JSONResponse(
                {
                    "error": {
                        "code": "invalid_host",
                        "message": f"this gateway does not answer to Host {host!r}",
                    }
                },
                status_code=400,
            )
            await refusal(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS and self._cross_site(headers, host):
            refusal = JSONResponse(
                {
                    "error": {
                        "code": "cross_site_request",
                        "message": "a browser page of another site may not send this request "
                        "(allowed origins: KS_GATEWAY_ALLOWED_ORIGINS)",
                    }
                },
                status_code=403,
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _cross_site(self, headers: Headers, host: str) -> bool:
        origins = headers.getlist("origin")
        if origins:
            netlocs = {origin_netloc(origin) for origin in origins}
            return not all(
                n is not None and (n == host.lower() or n in self.allowed_origins) for n in netlocs
            )
        fetch_site = headers.get("sec-fetch-site")
        return fetch_site is not None and fetch_site.lower() not in SAME_ORIGIN_FETCH_SITES


__all__ = ["BrowserGuard", "host_name", "origin_netloc"]
