"""Every spelling of a blocked address is refused before any lookup or connection."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from knowsphere_egress import (
    EgressClient,
    EgressError,
    EgressErrorCode,
    EgressPolicy,
    check_url,
    is_blocked_address,
    parse_ip_literal,
)
from knowsphere_egress.policy import IPAddress


class NoLookups:
    """A resolver that fails the test if the guard asks it anything."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        raise AssertionError(f"an IP literal or a metadata name went to DNS: {host!r}")


BLOCKED_URLS = [
    "http://127.0.0.1/",
    "http://2130706433/",  # decimal
    "http://0x7f.1/",  # hex, short form
    "http://0x7f000001/",
    "http://017700000001/",  # octal
    "http://127.1/",
    "http://0/",
    "http://0.0.0.0/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # CGNAT
    "http://100.100.100.200/",  # Alibaba metadata
    "http://169.254.169.254/latest/meta-data/",  # AWS/GCP/Azure metadata
    "http://192.0.0.192/",  # Oracle metadata
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://[::]/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:8.8.8.8]/",  # mapped forms are refused whatever they map to
    "http://[0:0:0:0:0:ffff:169.254.169.254]/",
    "http://[::7f00:1]/",  # IPv4-compatible
    "http://[64:ff9b::7f00:1]/",  # NAT64
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2001::1]/",  # Teredo
    "http://[fd00:ec2::254]/",  # AWS metadata over IPv6
    "http://[fe80::1%25eth0]/",  # link-local with a zone
    "http://[ff0e::1]/",  # global-scope multicast (ipaddress calls it global)
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.google.internal./",
]


@pytest.mark.parametrize("url", BLOCKED_URLS)
async def test_blocked_spellings_are_refused_without_lookup(url: str) -> None:
    async with EgressClient(EgressPolicy(), resolver=NoLookups()) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(url)
    assert caught.value.code == EgressErrorCode.BLOCKED_ADDRESS
    assert caught.value.public_code == "unreachable"


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("8.8.8.8", "8.8.8.8"),
    ],
)
def test_literals_denote_the_address_the_c_library_would_connect_to(spelling: str, address: str) -> None:
    assert parse_ip_literal(spelling) == ip_address(address)


@pytest.mark.parametrize("name", ["example.com", "0x7f.example", "1.2.3.4.nip.io", "cafe"])
def test_names_are_not_taken_for_literals(name: str) -> None:
    assert parse_ip_literal(name) is None


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001:80e::200e"]
)
def test_global_unicast_addresses_pass(address: str) -> None:
    assert not is_blocked_address(ip_address(address))


def test_the_allow_list_opens_exactly_its_networks() -> None:
    policy = EgressPolicy(allow_networks=("10.20.0.0/16",))  # type: ignore[arg-type]
    assert policy.address_allowed(ip_address("10.20.3.4"))
    assert not policy.address_allowed(ip_address("10.21.3.4"))
    assert not policy.address_allowed(ip_address("169.254.169.254"))


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("file:///etc/passwd", EgressErrorCode.BLOCKED_SCHEME),
        ("ftp://example.com/", EgressErrorCode.BLOCKED_SCHEME),
        ("gopher://example.com:70/", EgressErrorCode.BLOCKED_SCHEME),
        ("http://user:secret@example.com/", EgressErrorCode.BLOCKED_URL),
        ("http://user@example.com/", EgressErrorCode.BLOCKED_URL),
        ("http://example.com:22/", EgressErrorCode.BLOCKED_PORT),
        ("https://example.com:8443/", EgressErrorCode.BLOCKED_PORT),
        ("http://exa mple.com/", EgressErrorCode.BLOCKED_URL),
    ],
)
async def test_urls_refused_before_any_lookup(url: str, code: EgressErrorCode) -> None:
    async with EgressClient(EgressPolicy(), resolver=NoLookups()) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(url)
    assert caught.value.code == code


def test_international_names_are_checked_in_their_idna_form() -> None:
    target = check_url("https://münchen.example/wiki", EgressPolicy())
    assert (target.host, target.port, target.literal) == ("xn--mnchen-3ya.example", 443, None)
