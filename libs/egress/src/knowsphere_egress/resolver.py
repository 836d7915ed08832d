"""Name resolution for the egress guard, behind a small interface so tests (and operators with their
own DNS) can inject one. The guard resolves each host once per connection and connects to exactly the
addresses it checked, so a name that changes its answer between check and connect gains nothing."""

from __future__ import annotations

import asyncio
import socket
from ipaddress import ip_address
from typing import Protocol

from knowsphere_egress.errors import EgressError, EgressErrorCode
from knowsphere_egress.policy import IPAddress


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Every address of ``host`` (in the order to try them); raise ``EgressError(DNS_FAILED)``."""
        ...


class SystemResolver:
    """The C library's ``getaddrinfo`` (``/etc/hosts``, then DNS), run off the event loop."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            raise EgressError(EgressErrorCode.DNS_FAILED) from exc
        addresses: list[IPAddress] = []
        for _family, _type, _proto, _canonical, sockaddr in infos:
            address = ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in addresses:
                addresses.append(address)
        return addresses


class StaticResolver:
    """Answers from a fixed table (tests, and hosts pinned by the operator); unknown names fail."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self._table = {
            name.rstrip(".").lower(): [ip_address(address) for address in addresses]
            for name, addresses in table.items()
        }

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        addresses = self._table.get(host.rstrip(".").lower())
        if not addresses:
            raise EgressError(EgressErrorCode.DNS_FAILED)
        return list(addresses)
