"""What the platform may connect to on a tenant's behalf: the policy settings and the address rules.

An address is allowed only when it is a global unicast address (checked with an explicit block list
*and* ``ipaddress``'s ``is_global``, because ``is_global`` alone lets NAT64, 6to4, IPv4-compatible
and global multicast addresses through), or when the operator allow-lists it by network or host name.
Host names are checked after resolution, on the very addresses the connection then uses; IP literals,
including the spellings ``inet_aton`` accepts (``2130706433``, ``0x7f.1``, ``127.1``), are checked as
the addresses they denote.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Annotated
from urllib.parse import unquote

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from knowsphere_egress.errors import EgressError, EgressErrorCode

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}

# Names of cloud metadata services; their addresses (169.254.169.254, fd00:ec2::254, 100.100.100.200,
# 192.0.0.192) are also covered by the network list below.
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata", "instance-data"})

BLOCKED_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ip_network(cidr)
    for cidr in (
        # IPv4
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # CGNAT (also Alibaba's metadata at 100.100.100.200)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, metadata at 169.254.169.254
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments (Oracle metadata at 192.0.0.192)
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        # IPv6
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::/96",  # IPv4-compatible (deprecated): ::7f00:1 is 127.0.0.1
        "::ffff:0:0/96",  # IPv4-mapped: ::ffff:127.0.0.1
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "64:ff9b::/96",  # NAT64: 64:ff9b::7f00:1 reaches 127.0.0.1 through a translator
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard
        "2001::/32",  # Teredo
        "2001:10::/28",  # ORCHID
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4: 2002:7f00:1:: embeds 127.0.0.1
        "fc00::/7",  # unique local, metadata at fd00:ec2::254
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)

_NUMERIC_HOST_CHARACTERS = frozenset("0123456789abcdefx.")
# What a host name may be once httpx has IDNA-encoded it; anything else (percent-escapes, spaces) is
# refused rather than handed to a resolver that may read it differently.
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


class EgressPolicy(BaseModel):
    """The operator's egress settings. Services nest it in their own settings, e.g.
    ``egress: EgressPolicy = EgressPolicy()`` read from ``KS_<SERVICE>_EGRESS__ALLOWED_PORTS`` …"""

    model_config = ConfigDict(frozen=True)

    allowed_ports: frozenset[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default=frozenset({80, 443}), description="ports a fetch may connect to"
    )
    allow_networks: tuple[IPNetwork, ...] = Field(
        default=(), description="CIDRs allowed even though they are private, loopback, link-local …"
    )
    allow_hosts: frozenset[str] = Field(
        default=frozenset(), description="host names whose resolved addresses are allowed whatever they are"
    )
    max_redirects: int = Field(default=5, ge=0, description="redirects followed per fetch, each re-checked")
    total_timeout_seconds: float = Field(
        default=30.0, gt=0, description="one budget per fetch: resolution, connects, redirects and body"
    )
    connect_timeout_seconds: float = Field(default=10.0, gt=0, description="one TCP connect attempt")
    max_response_bytes: int = Field(
        default=10 * 1024 * 1024, gt=0, description="decoded body bytes per fetch (the last response)"
    )
    max_addresses_per_host: int = Field(
        default=4, ge=1, description="resolved addresses tried in turn before a fetch is unreachable"
    )

    @field_validator("allow_hosts", mode="after")
    @classmethod
    def _normalise_hosts(cls, hosts: frozenset[str]) -> frozenset[str]:
        return frozenset(normalise_host(host) for host in hosts)

    def address_allowed(self, address: IPAddress) -> bool:
        if any(address in network for network in self.allow_networks):
            return True
        return not is_blocked_address(address)

    def host_allow_listed(self, host: str) -> bool:
        return normalise_host(host) in self.allow_hosts


@dataclass(frozen=True)
class Target:
    """Where a URL points, once its scheme, userinfo and port passed the policy."""

    scheme: str
    host: str
    """Normalised: lower case, no trailing dot, no brackets."""
    port: int
    literal: IPAddress | None
    """The address the host denotes when it is an IP literal in any spelling, else None."""


def normalise_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def is_blocked_address(address: IPAddress) -> bool:
    """True for every address that is not global unicast (whatever the allow-list says)."""
    if any(address.version == network.version and address in network for network in BLOCKED_NETWORKS):
        return True
    return address.is_multicast or not address.is_global


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` denotes when it is an IP literal — in the dotted form or any form that
    the C library's ``inet_aton`` (and so ``getaddrinfo``) accepts — else None."""
    host = unquote(normalise_host(host))
    try:
        return ip_address(host)
    except ValueError:
        pass
    if host and set(host) <= _NUMERIC_HOST_CHARACTERS and host[0].isdigit():
        try:
            return IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def check_url(url: httpx.URL | str, policy: EgressPolicy) -> Target:
    """Refuse a URL that may not be fetched whatever it resolves to; return where it points."""
    try:
        url = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise EgressError(EgressErrorCode.BLOCKED_URL) from exc
    if url.scheme not in ALLOWED_SCHEMES:
        raise EgressError(EgressErrorCode.BLOCKED_SCHEME)
    if url.userinfo or "@" in url.netloc.decode("ascii", "replace"):
        raise EgressError(EgressErrorCode.BLOCKED_URL)
    # The IDNA (ASCII) form: what the resolver is asked and what TLS verifies.
    host = normalise_host(url.raw_host.decode("ascii", "replace"))
    if not host:
        raise EgressError(EgressErrorCode.BLOCKED_URL)
    port = url.port or DEFAULT_PORTS[url.scheme]
    if port not in policy.allowed_ports:
        raise EgressError(EgressErrorCode.BLOCKED_PORT)
    literal = parse_ip_literal(host)
    if literal is not None:
        if not policy.address_allowed(literal):
            raise EgressError(EgressErrorCode.BLOCKED_ADDRESS)
    elif not _HOST_NAME.fullmatch(host):
        raise EgressError(EgressErrorCode.BLOCKED_URL)
    elif host in METADATA_HOSTS and not policy.host_allow_listed(host):
        raise EgressError(EgressErrorCode.BLOCKED_ADDRESS)
    return Target(scheme=url.scheme, host=host, port=port, literal=literal)


def check_resolved(host: str, addresses: list[IPAddress], policy: EgressPolicy) -> list[IPAddress]:
    """Refuse a name when any of its addresses is blocked (a name that answers both a public and a
    private address is not trusted to pick one); return the addresses to connect to."""
    if not addresses:
        raise EgressError(EgressErrorCode.DNS_FAILED)
    if policy.host_allow_listed(host):
        return addresses
    if not all(policy.address_allowed(address) for address in addresses):
        raise EgressError(EgressErrorCode.BLOCKED_ADDRESS)
    return addresses
