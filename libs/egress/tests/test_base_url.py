"""A model provider's base URL is checked before it is stored."""

from __future__ import annotations

import pytest

from knowsphere_egress import EgressError, EgressErrorCode, EgressPolicy, StaticResolver, validate_base_url

RESOLVER = StaticResolver(
    {
        "api.example.com": ["93.184.216.34"],
        "internal.example.com": ["10.0.0.7"],
        "v6only.example.com": ["::ffff:127.0.0.1"],
    }
)


async def test_a_public_base_url_is_accepted_and_normalised() -> None:
    assert (
        await validate_base_url("https://api.example.com/v1/", EgressPolicy(), resolver=RESOLVER)
        == "https://api.example.com/v1"
    )


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("https://api.example.com/v1?api-version=1", EgressErrorCode.BLOCKED_URL),
        ("https://api.example.com/v1#x", EgressErrorCode.BLOCKED_URL),
        ("https://key:secret@api.example.com/v1", EgressErrorCode.BLOCKED_URL),
        ("ftp://api.example.com/v1", EgressErrorCode.BLOCKED_SCHEME),
        ("http://169.254.169.254/v1", EgressErrorCode.BLOCKED_ADDRESS),
        ("http://127.0.0.1:7233/", EgressErrorCode.BLOCKED_PORT),
        ("http://[::ffff:127.0.0.1]/v1", EgressErrorCode.BLOCKED_ADDRESS),
        ("https://internal.example.com/v1", EgressErrorCode.BLOCKED_ADDRESS),
        ("https://v6only.example.com/v1", EgressErrorCode.BLOCKED_ADDRESS),
        ("https://unknown.example.com/v1", EgressErrorCode.DNS_FAILED),
        ("not a url", EgressErrorCode.BLOCKED_URL),
    ],
)
async def test_a_dangerous_base_url_is_refused_naming_the_field(url: str, code: EgressErrorCode) -> None:
    with pytest.raises(EgressError) as caught:
        await validate_base_url(url, EgressPolicy(), resolver=RESOLVER)
    assert (caught.value.code, caught.value.field) == (code, "base_url")


async def test_an_operator_allow_listed_internal_host_is_accepted() -> None:
    policy = EgressPolicy(allow_hosts=frozenset({"Internal.Example.com."}))
    assert await validate_base_url("https://internal.example.com/v1", policy, resolver=RESOLVER)
