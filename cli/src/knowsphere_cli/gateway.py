"""The gateway's HTTP API as ``ks`` uses it: JSON requests, server-sent event streams, and every
refusal turned into one :class:`ApiError` carrying the gateway's own message; and the caller's knowledge
bases, agents and orchestrators found by id or name.

The gateway answers a refusal with ``{"error": {"code", "message", "field"?}}``; a body that FastAPI
rejected before a route ran has ``{"detail": [...]}`` (each with ``loc`` and ``msg``); anything else
(a proxy's page) is reduced to its first line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource

from knowsphere_cli.settings import REQUEST_TIMEOUT_SECONDS, STREAM_READ_TIMEOUT_SECONDS, Settings

API_PREFIX = "/api/v1"
# The longest piece of an unexpected (non-JSON) error body repeated to the user.
MAX_PLAIN_ERROR_CHARS = 200


class ApiError(Exception):
    """The gateway refused a request (``status`` ≥ 400) with ``code`` and ``message``."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        return f"{self.status} {self.code}: {text}" if self.code else f"{self.status}: {text}"


class Unreachable(Exception):
    """No answer from the gateway at all (refused connection, timeout, bad address)."""


def error_of(response: httpx.Response) -> ApiError:
    """The refusal a response carries, with the gateway's message."""
    status = response.status_code
    try:
        body = json.loads(response.read() or b"null")
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        return ApiError(
            status, str(error.get("code", "")), str(error.get("message", "")), error.get("field") or None
        )
    if isinstance(body, dict) and isinstance(body.get("detail"), list):
        problems = []
        for item in body["detail"]:
            where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
            problems.append(f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", "")))
        return ApiError(status, "invalid_request", "; ".join(problems))
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return ApiError(status, "", body["detail"])
    text = response.text.strip().splitlines()[0][:MAX_PLAIN_ERROR_CHARS] if response.text.strip() else ""
    return ApiError(status, "", text or response.reason_phrase)


@dataclass(frozen=True)
class Event:
    """One server-sent event: its name, its data as JSON, its id."""

    name: str
    data: Any
    id: str


class Gateway:
    """A session with the gateway at ``settings.url``, sending ``settings.token`` when there is one."""

    def __init__(self, settings: Settings) -> None:
        self.url = settings.url
        headers = {"authorization": f"Bearer {settings.token}"} if settings.token else {}
        self._http = httpx.Client(
            base_url=f"{settings.url}{API_PREFIX}",
            headers=headers,
            timeout=httpx.Timeout(REQUEST_TIMEOUT_SECONDS),
        )

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The answer's JSON (None for an empty answer); a refusal raises :class:`ApiError`."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise Unreachable(self._unreachable(error)) from None
        if response.status_code >= 400:
            raise error_of(response)
        return response.json() if response.content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Any:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    @contextmanager
    def events(self, method: str, path: str, **kwargs: Any) -> Iterator[Iterator[Event]]:
        """The events of a server-sent event stream; a refusal before the stream raises :class:`ApiError`."""
        timeout = httpx.Timeout(REQUEST_TIMEOUT_SECONDS, read=STREAM_READ_TIMEOUT_SECONDS)
        try:
            with self._http.stream(method, path, timeout=timeout, **kwargs) as response:
                if response.status_code >= 400:
                    raise error_of(response)
                yield self._parsed(EventSource(response))
        except httpx.TransportError as error:
            raise Unreachable(self._unreachable(error)) from None

    @staticmethod
    def _parsed(source: EventSource) -> Iterator[Event]:
        for sse in source.iter_sse():
            if sse.data:
                yield Event(sse.event, json.loads(sse.data), sse.id)

    def _unreachable(self, error: httpx.TransportError) -> str:
        reason = str(error) or type(error).__name__
        if isinstance(error, httpx.TimeoutException):
            reason = f"no answer in time ({type(error).__name__})"
        return f"cannot reach the gateway at {self.url}: {reason} (is it running? `make up` starts it)"

    def paged(self, path: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paged list (``next_page_token``)."""
        token = ""
        while True:
            page = self.get(path, params={**params, "page_token": token})
            yield from page.get(key) or []
            token = page.get("next_page_token") or ""
            if not token:
                return


def by_id_or_name(
    gateway: Gateway, path: str, key: str, ref: str, noun: str, list_command: str
) -> dict[str, Any]:
    """The caller's item of the list at ``path`` (items under ``key``) whose id or name is ``ref``; an id
    wins over a name; none or several → :class:`ApiError` 404 or 409 naming ``list_command``."""
    found = [item for item in gateway.paged(path, key) if ref in (item["id"], item["name"])]
    by_id = [item for item in found if item["id"] == ref]
    if by_id:
        return by_id[0]
    if len(found) > 1:
        raise ApiError(409, "ambiguous", f"{len(found)} {noun}s are named {ref!r}; give the id instead")
    if not found:
        raise ApiError(404, "not_found", f"no {noun} with the id or name {ref!r} (see `{list_command}`)")
    return found[0]


def knowledge_base(gateway: Gateway, ref: str) -> dict[str, Any]:
    """The caller's knowledge base whose id or name is ``ref``."""
    return by_id_or_name(gateway, "/knowledge-bases", "knowledge_bases", ref, "knowledge base", "ks kb list")


def agent(gateway: Gateway, ref: str) -> dict[str, Any]:
    """The tenant's agent whose id or name is ``ref`` (names are unique in a tenant)."""
    return by_id_or_name(gateway, "/agents", "agents", ref, "agent", "ks agent list")


def orchestrator(gateway: Gateway, ref: str) -> dict[str, Any]:
    """The tenant's orchestrator whose id or name is ``ref`` (names are unique in a tenant)."""
    return by_id_or_name(
        gateway, "/orchestrators", "orchestrators", ref, "orchestrator", "ks orchestrator list"
    )


__all__ = [
    "ApiError",
    "Event",
    "Gateway",
    "Unreachable",
    "agent",
    "by_id_or_name",
    "error_of",
    "knowledge_base",
    "orchestrator",
]
