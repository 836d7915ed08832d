"""The web UI (``frontend/``), served from its production build under ``/ui/``.

The built files hold no data, so they are served to anyone, without a token; everything the pages
fetch is the token-authenticated API under ``/api/v1``. Every answer carries a strict
Content-Security-Policy (:data:`CONTENT_SECURITY_POLICY`: this origin only, no inline script, no
eval, no framing), ``X-Content-Type-Options: nosniff`` and ``X-Frame-Options: DENY``.

- ``/ui/assets/…`` are the build's content-hashed files: cached for a year as immutable; a gzipped
  copy beside a file (``name.gz``, written by the build) is sent to a client that accepts gzip. A
  missing asset is a 404, never the page, so a stale chunk fails plainly.
- Any other path without a file extension is a route of the app (``/ui/chat/…``): ``index.html``, which
  is revalidated on every load (``no-cache``) so a new build is picked up at once.
- A path that leaves the build directory — ``..`` segments (also percent-encoded: the path arrives
  decoded), an absolute path, a backslash, a hidden file, a symbolic link pointing outside — is a 404.
- Without a build (``index.html`` missing) every page is a 503 saying to run ``make setup``. The build is
  looked for at each request, so one made while the gateway runs is served without a restart.

The routes are left out of the OpenAPI document: they are no part of the API.
"""

from __future__ import annotations

import html
import mimetypes
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response

UI_PREFIX = "/ui"
ASSETS_DIR = "assets"
INDEX = "index.html"
GZIP_SUFFIX = ".gz"

IMMUTABLE = "public, max-age=31536000, immutable"
"""The hashed assets: a new build gives a changed file a new name."""
REVALIDATE = "no-cache"
"""The page and the files with fixed names: kept, but checked with the server before each use."""

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        # Naive UI writes its components' styles into <style> elements at run time and takes no nonce
        # for them (tusen-ai/naive-ui#6356): inline styles are allowed, inline scripts never.
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self'",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}

# Types by extension, not from the system's mime.types (which differs between machines): with nosniff
# a module script served under a wrong type does not run.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".txt": "text/plain; charset=utf-8",
}

MISSING_BUILD_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>KnowSphere: the web UI is not built</title></head>
<body>
<h1>The web UI is not built yet</h1>
<p>Run <code>make setup</code> in the KnowSphere checkout (it runs
<code>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build</code>), then reload this page.
The gateway looked for the build in <code>{dist}</code>.</p>
<p>The API works without it: see <a href="/docs">/docs</a>.</p>
</body>
</html>
"""


def _with_security_headers(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def _not_found(path: str) -> Response:
    body = {"error": {"code": "not_found", "message": f"{UI_PREFIX}/{path} is no file of the web UI"}}
    return _with_security_headers(JSONResponse(body, status_code=404, headers={"cache-control": REVALIDATE}))


def _content_type(path: Path) -> str:
    guessed = mimetypes.guess_type(path.name)[0]
    return CONTENT_TYPES.get(path.suffix.lower()) or guessed or "application/octet-stream"


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip: named with a weight above 0, or, when not named,
    ``*`` with a weight above 0."""
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        coding, *params = item.split(";")
        weight = 1.0
        for param in params:
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        weights[coding.strip().lower()] = weight
    return weights.get("gzip", weights.get("*", 0.0)) > 0


def _inside(root: Path, path: str) -> Path | None:
    """The file ``path`` names under ``root``, or None when ``path`` could name anything outside it."""
    if not path:
        return root / INDEX
    if "\x00" in path or "\\" in path or path.startswith("/"):
        return None
    parts = path.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return None
    candidate = root.joinpath(*parts)
    try:
        resolved = candidate.resolve(strict=False)
    except (OSError, RuntimeError):  # a loop of symbolic links
        return None
    # A symbolic link may still point outside the build: the resolved path decides.
    return candidate if resolved.is_relative_to(root) else None


def _is_asset_or_file(path: str) -> bool:
    """A path a page would load as a file (an asset, ``favicon.svg``) rather than navigate to."""
    return path == ASSETS_DIR or path.startswith(f"{ASSETS_DIR}/") or "." in path.rsplit("/", 1)[-1]


def _file(path: Path, cache_control: str, request: Request) -> Response:
    """``path`` with its type and caching; its gzipped copy instead, when there is one the client takes."""
    headers = {"cache-control": cache_control, "vary": "accept-encoding"}
    body = path
    compressed = path.with_name(path.name + GZIP_SUFFIX)
    if (
        path.suffix != GZIP_SUFFIX
        and accepts_gzip(request.headers.get("accept-encoding", ""))
        and compressed.is_file()
    ):
        body = compressed
        headers["content-encoding"] = "gzip"
    return _with_security_headers(FileResponse(body, media_type=_content_type(path), headers=headers))


def web_ui_router(dist: Path, prefix: str = UI_PREFIX) -> APIRouter:
    """Routes serving the web UI built into ``dist`` (``frontend/dist``) under ``prefix``."""
    router = APIRouter(include_in_schema=False)

    @router.api_route(prefix, methods=["GET", "HEAD"])
    async def web_ui_root() -> Response:
        return _with_security_headers(RedirectResponse(f"{prefix}/", status_code=308))

    # Not async: looking at the files blocks, so FastAPI runs it in its thread pool.
    @router.api_route(prefix + "/{path:path}", methods=["GET", "HEAD"])
    def web_ui(path: str, request: Request) -> Response:
        root = dist.resolve()
        index = root / INDEX
        if not index.is_file():
            page = MISSING_BUILD_PAGE.format(dist=html.escape(str(dist)))
            missing = HTMLResponse(page, status_code=503, headers={"cache-control": "no-store"})
            return _with_security_headers(missing)
        # A trailing slash names a route (``/ui/chat/``), never a file.
        route = path.removesuffix("/")
        found = _inside(root, route)
        if found is None:
            return _not_found(path)
        if route == path and found.is_file():
            cache = IMMUTABLE if path.startswith(f"{ASSETS_DIR}/") else REVALIDATE
            return _file(found, cache, request)
        if _is_asset_or_file(route):
            return _not_found(path)
        return _file(index, REVALIDATE, request)  # a route of the app: the page decides what it shows

    return router


__all__ = [
    "CONTENT_SECURITY_POLICY",
    "SECURITY_HEADERS",
    "UI_PREFIX",
    "accepts_gzip",
    "web_ui_router",
]
