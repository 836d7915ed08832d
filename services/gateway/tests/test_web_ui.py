"""The web UI's files as the gateway serves them: headers, client routes, gzip, and nothing outside
the build, on an app holding only the web UI's routes and a tiny hand-made build in a temporary folder."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from knowsphere_gateway.api.web import UI_PREFIX, accepts_gzip, web_ui_router

SECRET = "KS_GATEWAY_HASH_KEY=do-not-leak"
INDEX = '<!doctype html><html><head><script type="module" src="/ui/assets/index-abc123.js"></script></head>'
SCRIPT = "console.log('the app');\n" * 50


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    """A build: index.html, a hashed script with its gzipped copy, a stylesheet, a favicon, and beside
    it, outside the build, a file that must never be served."""
    build = tmp_path / "dist"
    (build / "assets").mkdir(parents=True)
    (build / "index.html").write_text(INDEX)
    (build / "assets" / "index-abc123.js").write_text(SCRIPT)
    (build / "assets" / "index-abc123.js.gz").write_bytes(gzip.compress(SCRIPT.encode()))
    (build / "assets" / "index-def456.css").write_text("body { margin: 0 }")
    (build / "favicon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (build / ".env").write_text(SECRET)
    (tmp_path / "settings.py").write_text(SECRET)
    (build / "assets" / "linked.js").symlink_to(tmp_path / "settings.py")
    return build


def client_for(dist: Path) -> TestClient:
    app = FastAPI()
    app.include_router(web_ui_router(dist))
    return TestClient(app)


@pytest.fixture
def client(dist: Path) -> TestClient:
    return client_for(dist)


def assert_security_headers(headers: Any) -> None:
    policy = {
        directive.split(" ", 1)[0]: directive.split(" ", 1)[1]
        for directive in headers["content-security-policy"].split("; ")
    }
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"


def test_the_page_is_revalidated_and_carries_the_security_headers(client: TestClient) -> None:
    page = client.get("/ui/")
    assert page.status_code == 200
    assert page.text == INDEX
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-cache"
    assert_security_headers(page.headers)
    redirected = client.get(UI_PREFIX, follow_redirects=False)
    assert redirected.status_code == 308 and redirected.headers["location"] == "/ui/"


def test_client_routes_get_the_page(client: TestClient) -> None:
    for path in ("/ui/chat", "/ui/chat/0f3a9c", "/ui/knowledge/kb-1", "/ui/knowledge/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.text == INDEX, path
        assert response.headers["cache-control"] == "no-cache", path
        assert_security_headers(response.headers)


def test_hashed_assets_are_cached_for_good_and_sent_gzipped_to_who_accepts_it(client: TestClient) -> None:
    plain = client.get("/ui/assets/index-abc123.js", headers={"accept-encoding": "identity"})
    zipped = client.get("/ui/assets/index-abc123.js", headers={"accept-encoding": "br, gzip"})
    refused = client.get("/ui/assets/index-abc123.js", headers={"accept-encoding": "gzip;q=0"})
    for response in (plain, zipped, refused):
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/javascript; charset=utf-8"
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert response.headers["vary"] == "accept-encoding"
        assert response.text == SCRIPT  # httpx decodes the gzipped one
        assert_security_headers(response.headers)
    assert "content-encoding" not in plain.headers and "content-encoding" not in refused.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert int(zipped.headers["content-length"]) < len(SCRIPT)
    css = client.get("/ui/assets/index-def456.css")
    assert css.headers["content-type"] == "text/css; charset=utf-8"
    assert "content-encoding" not in css.headers  # no gzipped copy: sent as it is
    icon = client.get("/ui/favicon.svg")
    assert icon.headers["content-type"] == "image/svg+xml" and icon.headers["cache-control"] == "no-cache"


def test_a_missing_file_is_a_404_not_the_page(client: TestClient) -> None:
    for path in ("/ui/assets/index-old999.js", "/ui/assets/", "/ui/logo.png"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
        assert_security_headers(response.headers)


@pytest.mark.parametrize(
    "path",
    [
        "/ui/%2e%2e/settings.py",
        "/ui/%2E%2E/%2e%2e/etc/passwd",
        "/ui/assets/..%2f..%2fsettings.py",
        "/ui/assets/%2e%2e%2f%2e%2e%2fsettings.py",
        "/ui/..%5csettings.py",
        "/ui//etc/passwd",
        "/ui/%2fetc%2fpasswd",
        "/ui/.env",
        "/ui/assets/linked.js",  # a symbolic link to a file outside the build
        "/ui/index.html%00.js",
    ],
)
def test_nothing_outside_the_build_is_served(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404, response.text
    assert SECRET not in response.text
    assert_security_headers(response.headers)


async def test_a_raw_dot_dot_path_is_refused_by_the_route_itself(dist: Path) -> None:
    # HTTP clients remove `..` segments before sending; a raw request keeps them, as an attacker's would.
    app = FastAPI()
    app.include_router(web_ui_router(dist))
    for raw in ("/ui/../settings.py", "/ui/assets/../../settings.py", "/ui/./.env"):
        status, headers, body = await raw_get(app, raw)
        assert status == 404, raw
        assert SECRET.encode() not in body
        assert headers["x-frame-options"] == "DENY"


def test_without_a_build_every_page_says_to_run_make_setup(tmp_path: Path) -> None:
    dist = tmp_path / "frontend" / "dist"
    client = client_for(dist)
    for path in ("/ui/", "/ui/chat", "/ui/assets/index-abc123.js"):
        response = client.get(path)
        assert response.status_code == 503, path
        assert "make setup" in response.text
        assert response.headers["cache-control"] == "no-store"
        assert_security_headers(response.headers)
    # Built while the gateway runs: served at once.
    dist.mkdir(parents=True)
    (dist / "index.html").write_text(INDEX)
    assert client.get("/ui/chat").text == INDEX


def test_head_and_the_openapi_document(client: TestClient) -> None:
    head = client.head("/ui/")
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(INDEX)
    assert not [path for path in client.app.openapi()["paths"] if path.startswith("/ui")]  # type: ignore[attr-defined]


def test_accept_encoding_is_read_with_its_weights() -> None:
    assert accepts_gzip("gzip, deflate, br")
    assert accepts_gzip("br;q=1.0, gzip;q=0.8")
    assert accepts_gzip("*")
    assert accepts_gzip("gzip;q=0.5;level=1")
    assert not accepts_gzip("gzip;q=0")
    assert not accepts_gzip("*, gzip;q=0")  # named, gzip's own weight decides
    assert not accepts_gzip("gzip;q=nonsense")
    assert not accepts_gzip("identity")
    assert not accepts_gzip("")


async def raw_get(app: FastAPI, raw_path: str) -> tuple[int, dict[str, str], bytes]:
    """A GET of ``raw_path`` exactly as written, sent to ``app`` over ASGI."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {name.decode(): value.decode() for name, value in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], headers, body
