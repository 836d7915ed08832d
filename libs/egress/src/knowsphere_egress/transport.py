"""The guarded httpx transport: every connection goes to an address the policy checked.

``GuardedNetworkBackend`` is an ``httpcore`` network backend that resolves the host once, checks
every address, and opens the TCP connection to the checked address itself, so there is no second
lookup a rebinding name could answer differently. httpcore still starts TLS with the URL's host name,
so SNI and certificate verification are for the name, not the address. ``EgressTransport`` puts that
backend under an ordinary httpx transport and checks each request's URL first, so any httpx client
(the OpenAI SDK's included) built on it is guarded on every request and every redirect it follows.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable

import httpcore
import httpx

from knowsphere_egress.errors import EgressError, EgressErrorCode
from knowsphere_egress.policy import (
    METADATA_HOSTS,
    EgressPolicy,
    IPAddress,
    check_resolved,
    check_url,
    normalise_host,
    parse_ip_literal,
)
from knowsphere_egress.resolver import Resolver, SystemResolver

DEFAULT_LIMITS = httpx.Limits(max_connections=20, max_keepalive_connections=5)


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Connects only to checked addresses; TCP only (no UNIX sockets)."""

    def __init__(
        self, policy: EgressPolicy, resolver: Resolver, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def addresses_for(self, host: str, port: int) -> list[IPAddress]:
        """The checked addresses to connect to for ``host``; raises ``EgressError``."""
        policy = self._policy
        if port not in policy.allowed_ports:
            raise EgressError(EgressErrorCode.BLOCKED_PORT)
        literal = parse_ip_literal(host)
        if literal is not None:
            if not policy.address_allowed(literal):
                raise EgressError(EgressErrorCode.BLOCKED_ADDRESS)
            return [literal]
        name = normalise_host(host)
        if name in METADATA_HOSTS and not policy.host_allow_listed(name):
            raise EgressError(EgressErrorCode.BLOCKED_ADDRESS)
        return check_resolved(name, await self._resolver.resolve(name, port), policy)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.addresses_for(host, port)
        limit = self._policy.connect_timeout_seconds
        attempt_timeout = min(timeout or limit, limit)
        failure: Exception | None = None
        for address in addresses[: self._policy.max_addresses_per_host]:
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=attempt_timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                failure = exc
        # Refused, reset, filtered and timed out all read the same from outside.
        raise EgressError(EgressErrorCode.UNREACHABLE) from failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressError(EgressErrorCode.BLOCKED_ADDRESS)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class EgressTransport(httpx.AsyncBaseTransport):
    """An httpx transport that refuses what the policy refuses and connects through the guarded
    backend. Proxies from the environment are never used (they would connect on our behalf)."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits = DEFAULT_LIMITS,
    ) -> None:
        self.policy = policy
        self.backend = GuardedNetworkBackend(policy, resolver or SystemResolver())
        self._inner = httpx.AsyncHTTPTransport(verify=verify, trust_env=False, limits=limits)
        # httpx's transport takes no network backend; its pool is rebuilt with ours, keeping httpx's
        # request/response mapping. httpx is pinned; the tests fail at once if this attribute moves.
        if not isinstance(getattr(self._inner, "_pool", None), httpcore.AsyncConnectionPool):
            raise RuntimeError("this httpx keeps no connection pool in AsyncHTTPTransport._pool")
        self._inner._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=self.backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        check_url(request.url, self.policy)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
