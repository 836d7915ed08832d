"""Outbound HTTP to model providers: pooled clients, a concurrency limit, retries, friendly errors.

- One :class:`httpx.AsyncClient` per (provider id, base URL), created on first use and reused by
  every call until :meth:`ProviderHttp.close`.
- At most ``provider_concurrency`` requests in flight per provider (a semaphore per provider id,
  held for the whole response, streams included, and released while backing off).
- Retries with exponential backoff on 429, 5xx, timeouts and connection errors, honouring
  ``Retry-After``; every retry is an event ``gen_ai.retry`` on the current span. A stream is retried
  only until the first byte of its body has arrived: after that a retry would repeat (and bill)
  output the caller has already seen.
- A final failure becomes a :class:`ModelError` with one of the friendly codes; the provider's answer
  stays in ``ModelError.detail`` for logs and never reaches the user message. It is scrubbed first —
  the API key the call sent, bearer tokens and URL credentials become ``***`` (a provider may echo
  them) — then cut to :data:`PROVIDER_TEXT_IN_ERRORS` characters.

Also here: SSE parsing shared by the adapters, and image downloads for providers that take base64
only, through the platform's egress guard (``knowsphere_egress``: the name resolved once and the
connection made to the checked address, private/loopback/link-local/metadata ranges refused unless
the operator allow-lists them, every redirect re-checked, one time and one size budget per image).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import random
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from opentelemetry import trace

from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere_egress import (
    EgressClient,
    EgressError,
    EgressErrorCode,
    EgressPolicy,
    EgressTransport,
    Resolver,
)
from knowsphere_modelhub.domain.errors import ModelError
from knowsphere_modelhub.settings import Settings
from knowsphere_telemetry.redaction import redact_text

# Span event and attributes of one retry (the standard names where the semantic conventions have one).
RETRY_EVENT = "gen_ai.retry"
RETRY_ATTEMPT = "gen_ai.retry.attempt"
RETRY_DELAY = "gen_ai.retry.delay_seconds"
STATUS_CODE = "http.response.status_code"
ERROR_TYPE = "error.type"

# Characters of a provider's answer (an error body, an unexpected answer) kept in ModelError.detail.
PROVIDER_TEXT_IN_ERRORS = 500
# Scrubbing looks this far past the cut, so a key or token that straddles it is still recognised whole.
_SCRUB_LOOKAHEAD = 256
_URL_IN_DETAIL = 200  # characters of an image URL kept in a download error
# Request headers that carry the call's credentials (their values are scrubbed from error details).
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})

# Why an image download was refused or failed, for ModelError.detail (logs); the user sees the
# friendly IMAGE_URL_UNREACHABLE message, never these.
_EGRESS_REASONS: dict[EgressErrorCode, str] = {
    EgressErrorCode.BLOCKED_SCHEME: "not an http(s) URL",
    EgressErrorCode.BLOCKED_URL: "the URL carries credentials or is malformed",
    EgressErrorCode.BLOCKED_PORT: "the port is not in the egress policy's allowed_ports",
    EgressErrorCode.BLOCKED_ADDRESS: (
        "the host is or resolves to a non-public address (private, loopback, link-local, metadata …) "
        "that the egress policy does not allow-list"
    ),
    EgressErrorCode.DNS_FAILED: "the host name does not resolve",
    EgressErrorCode.UNREACHABLE: "the host cannot be reached",
    EgressErrorCode.TIMED_OUT: "the download took longer than its time budget",
    EgressErrorCode.TOO_LARGE: "the image is larger than the size budget",
    EgressErrorCode.TOO_MANY_REDIRECTS: "too many redirects",
    EgressErrorCode.BAD_RESPONSE: "the answer was not valid HTTP",
}

# Markers in provider error bodies (lower-cased), checked in this order of precedence.
_CONTENT_FILTER_MARKERS = (
    "content_filter",
    "data_inspection_failed",
    "datainspectionfailed",
    "content_policy",
    "sensitive",
    "内容安全",
    "敏感",
)
_QUOTA_MARKERS = (  # unambiguous: out of money or quota
    "insufficient_quota",
    "insufficient balance",
    "insufficient_balance",
    "balance is insufficient",
    "account balance",
    "credit balance",
    "exceeded_current_quota",
    "arrearage",
    "overdue",
    "余额不足",
    "欠费",
)
_THROTTLE_MARKERS = ("throttling", "rate_limit", "rate limit", "ratelimit", "too many requests")
_WEAK_QUOTA_MARKERS = ("quota", "billing")  # a rate limit when a throttle marker is there too
_IMAGE_MARKERS = (
    "invalid_image_url",
    "image url",
    "failed to download",
    "download the media resource",
    "error while downloading",
    "timeout while downloading",
    "unable to download",
)
_AUTH_MARKERS = (
    "invalid_api_key",
    "invalid api key",
    "incorrect api key",
    "authentication_error",
    "invalidapikey",
)
_UNAVAILABLE_MARKERS = (
    "model_not_found",
    "model not found",
    "model does not exist",
    "model not exist",
    "no such model",
    "not_found_error",
    "overloaded",
)


def _has(text: str, markers: tuple[str, ...]) -> bool:
    return any(m in text for m in markers)


def provider_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A provider's answer as it may go into an error detail (and so into logs and traces): the
    ``secrets`` (the call's API key), bearer tokens and URL credentials replaced by ``***``, then cut
    to :data:`PROVIDER_TEXT_IN_ERRORS` characters (``…`` marks a cut)."""
    given = [secret for secret in secrets if secret]
    # Scrubbed before it is cut: a key cut in two at the limit would no longer be recognised.
    window = PROVIDER_TEXT_IN_ERRORS + max([_SCRUB_LOOKAHEAD, *(len(secret) for secret in given)])
    scrubbed = redact_text(text[:window], given)
    if len(scrubbed) <= PROVIDER_TEXT_IN_ERRORS and len(text) <= window:
        return scrubbed
    return scrubbed[:PROVIDER_TEXT_IN_ERRORS] + "…"


def error_from_response(
    status: int, body: str, *, retry_after: float | None = None, secrets: Iterable[str] = ()
) -> ModelError:
    """The friendly error for a failed provider answer; ``body`` goes into the detail through
    :func:`provider_text` (``secrets``: the credentials the call sent).

    ``status`` is the HTTP status, or 0 for an error event inside a stream that started with 200.
    """
    text = body.lower()
    shown = provider_text(body, secrets)
    detail = f"HTTP {status}: {shown}" if status else f"error in stream: {shown}"

    def err(code: ModelErrorCode) -> ModelError:
        return ModelError(code, detail, retry_after=retry_after, status=status)

    if status == 401:
        return err(ModelErrorCode.AUTHENTICATION_FAILED)
    if _has(text, _CONTENT_FILTER_MARKERS):
        return err(ModelErrorCode.CONTENT_FILTERED)
    if status == 402 or _has(text, _QUOTA_MARKERS):
        return err(ModelErrorCode.QUOTA_EXHAUSTED)
    client_side = status == 0 or 400 <= status < 500
    if client_side and (
        _has(text, _IMAGE_MARKERS) or ("invalid_parameter" in text and ("image" in text or "url" in text))
    ):
        return err(ModelErrorCode.IMAGE_URL_UNREACHABLE)
    throttled = _has(text, _THROTTLE_MARKERS)
    if status in (0, 403, 429) and _has(text, _WEAK_QUOTA_MARKERS) and not throttled:
        return err(ModelErrorCode.QUOTA_EXHAUSTED)
    if status in (401, 403) or _has(text, _AUTH_MARKERS):
        return err(ModelErrorCode.AUTHENTICATION_FAILED)
    if status == 429 or (status == 0 and throttled):
        return err(ModelErrorCode.RATE_LIMITED)
    if status in (404, 502, 503, 529) or _has(text, _UNAVAILABLE_MARKERS):
        return err(ModelErrorCode.MODEL_UNAVAILABLE)
    if status in (408, 504):
        return err(ModelErrorCode.TIMEOUT)
    return err(ModelErrorCode.PROVIDER_ERROR)


def error_from_transport(exc: httpx.HTTPError) -> ModelError:
    """The friendly error for a request that got no (complete) answer."""
    detail = redact_text(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, httpx.TimeoutException):
        return ModelError(ModelErrorCode.TIMEOUT, detail)
    if isinstance(exc, httpx.TransportError):
        return ModelError(ModelErrorCode.MODEL_UNAVAILABLE, detail)
    return ModelError(ModelErrorCode.PROVIDER_ERROR, detail)


def _json_of(response: httpx.Response, endpoint: Endpoint) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise ModelError(
            ModelErrorCode.PROVIDER_ERROR,
            f"answer is not JSON: {provider_text(response.text, endpoint.secrets)}",
            provider_id=endpoint.provider_id,
        ) from exc


def _invalid_url(endpoint: Endpoint, url: str, exc: Exception) -> ModelError:
    return ModelError(
        ModelErrorCode.MODEL_UNAVAILABLE,
        redact_text(f"invalid URL {url!r} (base URL {endpoint.base_url!r}): {exc}", endpoint.secrets),
        provider_id=endpoint.provider_id,
    )


def _egress_failure(exc: EgressError) -> _Attempt:
    """A call the egress guard refused, or whose target it could not reach: one error for both, so the
    answer does not tell a tenant which addresses or ports exist inside. Only an unreachable target
    is tried again (it may be a provider's outage)."""
    error = ModelError(
        ModelErrorCode.MODEL_UNAVAILABLE,
        f"the provider's address is not allowed or cannot be reached (egress: {exc.code.value})",
    )
    return _Attempt(error, exc.code is EgressErrorCode.UNREACHABLE, None, f"egress.{exc.code.value}")


def _retryable_status(status: int) -> bool:
    return status == 429 or (status >= 500 and status != 501)


def _retryable_transport(exc: httpx.HTTPError) -> bool:
    return isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``, when the provider sent one."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def join_url(base_url: str, path: str, *, from_origin: bool = False) -> str:
    """``base + path`` without doubled or lost slashes; with ``from_origin`` the path replaces the
    base URL's path (scheme and host kept)."""
    if from_origin:
        parts = urlsplit(base_url)
        return f"{parts.scheme}://{parts.netloc}/{path.lstrip('/')}"
    return f"{base_url.rstrip('/')}/{path.lstrip('/')}"


@dataclass(frozen=True)
class Endpoint:
    """Where one call goes: the provider (for its concurrency limit) and the base URL (for the pool)."""

    provider_id: str
    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    guarded: bool = True
    """Through the egress guard (a tenant's base URL); False for the operator's own models."""

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credentials this endpoint's calls send (``Bearer <key>`` and the key alone, …)."""
        found: list[str] = []
        for name, value in self.headers.items():
            if name.lower() in CREDENTIAL_HEADERS and value:
                found.append(value)
                scheme, _, credential = value.partition(" ")
                if credential and scheme.isalpha():
                    found.append(credential.strip())
        return tuple(found)


class ResponseStream:
    """The body of a successful streaming response; its first chunk has already arrived.

    ``secrets`` are the credentials the request sent, for scrubbing error events of the stream.
    """

    def __init__(
        self,
        response: httpx.Response,
        first: bytes,
        rest: AsyncIterator[bytes],
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.response = response
        self._first = first
        self._rest = rest
        self.secrets = secrets

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._first:
            yield self._first
        try:
            async for chunk in self._rest:
                yield chunk
        except httpx.HTTPError as exc:
            raise error_from_transport(exc) from exc

    async def lines(self) -> AsyncIterator[str]:
        """Text lines without their line ending, decoded as UTF-8 across chunk boundaries."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        async for chunk in self.chunks():
            pending += decoder.decode(chunk)
            *complete, pending = pending.split("\n")
            for line in complete:
                yield line.removesuffix("\r")
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending.removesuffix("\r")


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """Server-sent events: ``event:`` and ``data:`` fields, dispatched at each blank line."""
    event = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive (OpenRouter sends ": OPENROUTER PROCESSING")
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield SseEvent(event or "message", "\n".join(data))


class DownloadError(Exception):
    """An image download failed; ``too_large`` when it went over the size cap."""

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_large = too_large


@dataclass
class _Attempt:
    """The outcome of one failed attempt, for the retry decision."""

    error: ModelError
    retryable: bool
    status: int | None
    error_type: str


class ProviderHttp:
    """Pooled, limited, retrying HTTP to providers. One instance per service; ``close()`` at shutdown."""

    def __init__(
        self,
        *,
        timeout_seconds: float,
        max_retries: int,
        backoff_seconds: float,
        concurrency: int,
        image_timeout_seconds: float | None = None,
        image_egress: EgressPolicy | None = None,
        image_resolver: Resolver | None = None,
        egress: EgressPolicy | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.concurrency = concurrency
        self.image_timeout_seconds = image_timeout_seconds or timeout_seconds
        # Image URLs come from users; fetching them from inside the network must not reach internal
        # services (cloud metadata, admin ports): every download goes through the egress guard.
        self._images = EgressClient(image_egress or EgressPolicy(), resolver=image_resolver)
        # A tenant's base URL is the tenant's to choose: its calls go through the same guard, so a
        # model cannot point at cloud metadata, the platform's own services or anything internal.
        self._egress = egress or EgressPolicy()
        self._resolver = resolver
        self._clients: dict[tuple[str, str, bool], httpx.AsyncClient] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> ProviderHttp:
        return cls(
            timeout_seconds=settings.provider_timeout_seconds,
            max_retries=settings.provider_max_retries,
            backoff_seconds=settings.provider_backoff_seconds,
            concurrency=settings.provider_concurrency,
            image_timeout_seconds=settings.image_download_timeout_seconds or None,
            image_egress=settings.egress,
            egress=settings.egress,
        )

    def client(self, provider_id: str, base_url: str, *, guarded: bool = True) -> httpx.AsyncClient:
        """The pooled client of a provider and base URL (created on first use); ``guarded``: every
        connection through the egress guard."""
        key = (provider_id, base_url, guarded)
        client = self._clients.get(key)
        if client is None:
            limits = httpx.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            )
            timeout = httpx.Timeout(self.timeout_seconds)
            if guarded:
                transport = EgressTransport(self._egress, resolver=self._resolver, limits=limits)
                client = httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=False)
            else:
                client = httpx.AsyncClient(timeout=timeout, limits=limits)
            self._clients[key] = client
        return client

    def _limit(self, provider_id: str) -> asyncio.Semaphore:
        sem = self._limits.get(provider_id)
        if sem is None:
            sem = self._limits[provider_id] = asyncio.Semaphore(self.concurrency)
        return sem

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        await self._images.aclose()

    # -- requests ---------------------------------------------------------------------------------

    async def request_json(
        self,
        endpoint: Endpoint,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
        data: Mapping[str, str] | None = None,
    ) -> Any:
        """The JSON body of a successful response, after retries; ModelError otherwise."""
        client = self.client(endpoint.provider_id, endpoint.base_url, guarded=endpoint.guarded)
        attempt = 0
        while True:
            failure: _Attempt
            async with self._limit(endpoint.provider_id):
                try:
                    response = await client.request(
                        method, url, json=json_body, files=files, data=data, headers=dict(endpoint.headers)
                    )
                except httpx.InvalidURL as exc:
                    raise _invalid_url(endpoint, url, exc) from exc
                except httpx.HTTPError as exc:
                    failure = self._transport_failure(exc)
                except EgressError as exc:
                    failure = _egress_failure(exc)
                else:
                    if response.is_success:
                        return _json_of(response, endpoint)
                    failure = self._status_failure(response, response.text, endpoint)
            await self._backoff_or_raise(endpoint, failure, attempt)
            attempt += 1

    @asynccontextmanager
    async def stream(
        self, endpoint: Endpoint, method: str, url: str, *, json_body: Any
    ) -> AsyncIterator[ResponseStream]:
        """A streaming response whose first body chunk has arrived; retried until then."""
        client = self.client(endpoint.provider_id, endpoint.base_url, guarded=endpoint.guarded)
        attempt = 0
        while True:
            failure: _Attempt
            async with self._limit(endpoint.provider_id):
                try:
                    request = client.build_request(
                        method, url, json=json_body, headers=dict(endpoint.headers)
                    )
                except httpx.InvalidURL as exc:
                    raise _invalid_url(endpoint, url, exc) from exc
                opened = await self._open(client, request, endpoint)
                if isinstance(opened, _Attempt):
                    failure = opened
                else:
                    response, first, rest = opened
                    try:
                        yield ResponseStream(response, first, rest, endpoint.secrets)
                    finally:
                        await response.aclose()
                    return
            await self._backoff_or_raise(endpoint, failure, attempt)
            attempt += 1

    async def _open(
        self, client: httpx.AsyncClient, request: httpx.Request, endpoint: Endpoint
    ) -> tuple[httpx.Response, bytes, AsyncIterator[bytes]] | _Attempt:
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return self._transport_failure(exc)
        except EgressError as exc:
            return _egress_failure(exc)
        try:
            if not response.is_success:
                body = await response.aread()
                await response.aclose()
                return self._status_failure(response, body.decode("utf-8", errors="replace"), endpoint)
            rest = response.aiter_bytes()
            first = await anext(rest, b"")
            return response, first, rest
        except BaseException as exc:
            await response.aclose()
            if isinstance(exc, httpx.HTTPError):
                return self._transport_failure(exc)
            raise

    def _transport_failure(self, exc: httpx.HTTPError) -> _Attempt:
        return _Attempt(error_from_transport(exc), _retryable_transport(exc), None, type(exc).__name__)

    def _status_failure(self, response: httpx.Response, body: str, endpoint: Endpoint) -> _Attempt:
        error = error_from_response(
            response.status_code,
            body,
            retry_after=retry_after_seconds(response.headers),
            secrets=endpoint.secrets,
        )
        # Out of quota, filtered or unauthorised stays so however often it is asked again.
        retryable = _retryable_status(response.status_code) and error.code in (
            ModelErrorCode.RATE_LIMITED,
            ModelErrorCode.MODEL_UNAVAILABLE,
            ModelErrorCode.TIMEOUT,
            ModelErrorCode.PROVIDER_ERROR,
        )
        return _Attempt(error, retryable, response.status_code, str(response.status_code))

    async def _backoff_or_raise(self, endpoint: Endpoint, failure: _Attempt, attempt: int) -> None:
        error = failure.error
        error.provider_id = error.provider_id or endpoint.provider_id
        if not failure.retryable or attempt >= self.max_retries:
            raise error
        # Jitter spreads the retries of calls that were throttled together.
        delay = self.backoff_seconds * (2**attempt) * random.uniform(0.8, 1.2)
        if error.retry_after is not None:
            if error.retry_after > self.timeout_seconds:
                raise error  # the provider asks for a longer wait than a call may take
            delay = max(delay, error.retry_after)
        attributes: dict[str, str | int | float] = {
            RETRY_ATTEMPT: attempt + 1,
            RETRY_DELAY: round(delay, 3),
            ERROR_TYPE: failure.error_type,
            "gen_ai.provider.name": endpoint.provider_id,
        }
        if failure.status is not None:
            attributes[STATUS_CODE] = failure.status
        trace.get_current_span().add_event(RETRY_EVENT, attributes)
        await asyncio.sleep(delay)

    # -- image downloads --------------------------------------------------------------------------

    async def download(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        """Body and Content-Type of an http(s) URL the egress policy allows, at most ``max_bytes``;
        DownloadError otherwise."""
        shown = url[:_URL_IN_DETAIL]
        try:
            response = await self._images.fetch(
                url, max_bytes=max_bytes, timeout_seconds=self.image_timeout_seconds
            )
        except EgressError as exc:
            if exc.code is EgressErrorCode.TOO_LARGE:
                raise DownloadError(f"over the limit of {max_bytes} bytes", too_large=True) from exc
            raise DownloadError(f"GET {shown}: {_EGRESS_REASONS[exc.code]} ({exc.code.value})") from exc
        if not 200 <= response.status_code < 300:
            raise DownloadError(f"GET {shown} answered HTTP {response.status_code}")
        return response.content, response.headers.get("content-type", "")


def json_text(value: Any) -> str:
    """Compact JSON of a provider's answer for an error detail, through :func:`provider_text` (the
    call's key is taken out of the detail by ``call_setup.stamped``)."""
    return provider_text(json.dumps(value, ensure_ascii=False))
