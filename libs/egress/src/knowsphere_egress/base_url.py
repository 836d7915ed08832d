"""Checking a model provider's base URL before it is stored (the Hardening issue's SSRF rule).

A base URL is a prefix that paths such as ``/chat/completions`` are appended to, so a ``?`` or ``#``
would turn the appended path into a query or fragment; userinfo would send credentials to whoever
the rest of the URL names. The host is resolved now and refused when any address is blocked. The
check is repeated on every connection by the transport (names can change their answer), so calls
to the provider must go through ``EgressClient.http_client()`` too.
"""

from __future__ import annotations

import httpx

from knowsphere_egress.errors import EgressError, EgressErrorCode
from knowsphere_egress.policy import ALLOWED_SCHEMES, EgressPolicy, check_url
from knowsphere_egress.resolver import Resolver, SystemResolver
from knowsphere_egress.transport import GuardedNetworkBackend

BASE_URL_FIELD = "base_url"


def check_base_url_form(url: str) -> httpx.URL:
    """The parsed URL when it has the form of a base URL — http(s), a host, no credentials, query,
    fragment or whitespace — else ``EgressError`` (``blocked_scheme`` or ``blocked_url``). No
    policy and no lookup: the part of the check that needs no I/O."""
    if "?" in url or "#" in url or any(ch.isspace() for ch in url):
        raise EgressError(EgressErrorCode.BLOCKED_URL)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise EgressError(EgressErrorCode.BLOCKED_URL) from exc
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise EgressError(EgressErrorCode.BLOCKED_SCHEME)
    if not parsed.host or parsed.userinfo or "@" in parsed.netloc.decode("ascii", "replace"):
        raise EgressError(EgressErrorCode.BLOCKED_URL)
    return parsed


async def validate_base_url(
    url: str, policy: EgressPolicy, *, resolver: Resolver | None = None, field: str = BASE_URL_FIELD
) -> str:
    """Return ``url`` normalised (no trailing slash) or raise ``EgressError`` naming ``field``."""
    try:
        parsed = check_base_url_form(url)
        target = check_url(parsed, policy)
        backend = GuardedNetworkBackend(policy, resolver or SystemResolver())
        await backend.addresses_for(target.host, target.port)
    except EgressError as error:
        error.field = field
        raise
    return str(parsed).rstrip("/")
