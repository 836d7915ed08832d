"""A scripted OpenSearch on 127.0.0.1 that replays hand-written wire exchanges, in order.

The exchanges were written by hand from OpenSearch 2.x's documented request and response shapes, not
recorded from a server: they show that the adapter sends what the documentation asks for and reads
what it promises, not that a real server agrees. A fixture file (``fixtures/opensearch/<name>.json``)
holds ``exchanges``: each a ``request`` the
client must send — ``method``, ``path``, ``query`` (the query-string parameters) and its body as
``json`` or, for ``_bulk``, ``ndjson`` (a list of the lines) — and the ``response`` to answer with
(``status`` and ``json``). The string ``"<any>"`` in an expected body matches any value. A request
that differs from the next expected one is answered with HTTP 400 (an OpenSearch-shaped error of
type ``replay_mismatch``) and recorded in ``mismatches`` with what differed.

The server runs on aiohttp (already installed for opensearch-py's async client) in the test's own
event loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

FIXTURES = Path(__file__).parent / "fixtures" / "opensearch"
ANY = "<any>"


def differences(expected: Any, actual: Any, where: str = "body") -> list[str]:
    """Where ``actual`` differs from ``expected`` (``"<any>"`` in ``expected`` matches anything)."""
    if expected == ANY:
        return []
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = [f"{where}.{k}: missing" for k in expected if k not in actual]
        found += [f"{where}.{k}: unexpected {actual[k]!r}" for k in actual if k not in expected]
        for key in expected.keys() & actual.keys():
            found += differences(expected[key], actual[key], f"{where}.{key}")
        return found
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: expected {len(expected)} items, got {len(actual)}: {actual!r}"]
        return [
            d
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for d in differences(e, a, f"{where}[{i}]")
        ]
    return [] if expected == actual else [f"{where}: expected {expected!r}, got {actual!r}"]


class OpenSearchReplay:
    """``async with OpenSearchReplay("scenario") as replay:`` then point a client at ``replay.url``."""

    def __init__(self, scenario: str) -> None:
        fixture = json.loads((FIXTURES / f"{scenario}.json").read_text(encoding="utf-8"))
        self.exchanges: list[dict[str, Any]] = fixture["exchanges"]
        self.received: list[dict[str, Any]] = []
        self.mismatches: list[str] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> OpenSearchReplay:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def assert_all_replayed(self) -> None:
        assert not self.mismatches, "requests differ from the fixture:\n" + "\n".join(self.mismatches)
        left = self.exchanges[len(self.received) :]
        assert not left, f"{len(left)} expected requests never sent, next: {left[0]['request']}"

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.text()
        actual: dict[str, Any] = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
        }
        if raw:
            if request.path.endswith("/_bulk"):
                actual["ndjson"] = [json.loads(line) for line in raw.splitlines() if line.strip()]
            else:
                actual["json"] = json.loads(raw)
        number = len(self.received)
        self.received.append(actual)
        if number >= len(self.exchanges):
            return self._mismatch(f"request {number + 1} is not in the fixture: {actual}")
        expected = self.exchanges[number]["request"]
        found = [
            f"{field}: expected {expected.get(field)!r}, got {actual.get(field)!r}"
            for field in ("method", "path")
            if expected.get(field) != actual.get(field)
        ]
        found += differences(expected.get("query", {}), actual["query"], "query")
        for body in ("json", "ndjson"):
            if body in expected or body in actual:
                found += differences(expected.get(body), actual.get(body), body)
        if found:
            return self._mismatch(
                f"request {number + 1} ({actual['method']} {actual['path']}): " + "; ".join(found)
            )
        response = self.exchanges[number]["response"]
        return web.json_response(response.get("json", {}), status=response["status"])

    def _mismatch(self, message: str) -> web.Response:
        self.mismatches.append(message)
        error = {"type": "replay_mismatch", "reason": message}
        return web.json_response({"error": {"root_cause": [error], **error}, "status": 400}, status=400)
