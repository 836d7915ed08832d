"""The few calls of the Kubernetes REST API a pod-per-run sandbox needs, over ``httpx``: create, read
and delete namespaced objects and read a container's log. It authenticates with a bearer token read
from a file (the pod's service-account token by default, which the kubelet rotates, so it is read again
for every client) and verifies the server with the given CA bundle."""

from __future__ import annotations

import ssl
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from knowsphere_toolrunner.sandbox.pod_settings import PodSandboxSettings

_ERROR_TEXT_CHARS = 300


class KubernetesApiError(Exception):
    """The API server refused a request (``status`` is its HTTP status) or could not be reached
    (``status`` is None)."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubernetesApi:
    """One client for the duration of a run: ``async with KubernetesApi(settings) as api: ...``."""

    def __init__(self, settings: PodSandboxSettings) -> None:
        self._settings = settings
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> KubernetesApi:
        settings = self._settings
        try:
            token = settings.token_path.read_text().strip()
        except OSError as error:
            raise KubernetesApiError(
                f"cannot read the API token {settings.token_path}: {error.strerror}"
            ) from None
        verify: ssl.SSLContext | bool = False
        if settings.api_url.startswith("https:"):
            verify = _ssl_context(settings.ca_path)
        self._client = httpx.AsyncClient(
            base_url=settings.api_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            verify=verify,
            timeout=settings.request_timeout_seconds,
            trust_env=False,
        )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self._send("POST", path, json=body)
        return dict(answer.json())

    async def get(self, path: str) -> dict[str, Any]:
        answer = await self._send("GET", path)
        return dict(answer.json())

    async def delete(self, path: str) -> bool:
        """Delete at once (no grace period); False when it was already gone."""
        try:
            await self._send(
                "DELETE",
                path,
                json={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "propagationPolicy": "Background",
                },
            )
        except KubernetesApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def log(self, pod_path: str, container: str, limit_bytes: int) -> bytes:
        answer = await self._send(
            "GET", f"{pod_path}/log", params={"container": container, "limitBytes": str(limit_bytes)}
        )
        return answer.content

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert self._client is not None, "use KubernetesApi as an async context manager"
        try:
            answer = await self._client.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise KubernetesApiError(
                f"{method} {path}: the API server cannot be reached ({type(error).__name__})"
            ) from error
        if answer.status_code >= 400:
            reason, message = "", answer.text[:_ERROR_TEXT_CHARS]
            try:
                status = answer.json()
                reason, message = str(status.get("reason", "")), str(status.get("message", message))
            except ValueError:
                pass
            raise KubernetesApiError(
                f"{method} {path}: {answer.status_code} {reason} {message}".strip(),
                status=answer.status_code,
                reason=reason,
            )
        return answer


def _ssl_context(ca_path: Path) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=str(ca_path))
    except (OSError, ssl.SSLError) as error:
        raise KubernetesApiError(f"cannot load the API server's CA bundle {ca_path}: {error}") from None
