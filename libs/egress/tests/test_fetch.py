"""Fetches against a real server on 127.0.0.1: allowed only when the operator allow-lists it, every
redirect re-checked, and the time and size budgets hold for the whole fetch."""

from __future__ import annotations

import time
from ipaddress import ip_address

import pytest

from knowsphere_egress import EgressClient, EgressError, EgressErrorCode, EgressPolicy, StaticResolver
from knowsphere_egress.policy import IPAddress

from .conftest import SLOW_BODY_BYTES, SLOW_BYTE_INTERVAL_SECONDS, LocalServer


def loopback_allowed(*ports: int, **overrides: object) -> EgressPolicy:
    return EgressPolicy(
        allow_networks=("127.0.0.1/32",),  # type: ignore[arg-type]
        allowed_ports=frozenset({80, 443, *ports}),
        **overrides,  # type: ignore[arg-type]
    )


async def test_an_allow_listed_local_server_is_fetched(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed(server.port)) as egress:
        response = await egress.fetch(server.url("/ok"))
    assert (response.status_code, response.text) == (200, "hello")


async def test_loopback_is_refused_without_the_allow_list_and_nothing_connects(server: LocalServer) -> None:
    policy = EgressPolicy(allowed_ports=frozenset({server.port}))
    async with EgressClient(policy) as egress:
        for host in ("127.0.0.1", "2130706433", "0x7f.1", "localhost"):
            with pytest.raises(EgressError) as caught:
                await egress.fetch(server.url("/ok", host=host))
            assert caught.value.code == EgressErrorCode.BLOCKED_ADDRESS, host
    assert server.connections == 0


async def test_a_port_outside_the_allow_list_is_refused(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed()) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/ok"))
    assert caught.value.code == EgressErrorCode.BLOCKED_PORT
    assert server.connections == 0


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://10.0.0.1/",
        "file:///etc/passwd",
    ],
)
async def test_a_redirect_to_a_blocked_target_is_refused(server: LocalServer, target: str) -> None:
    async with EgressClient(loopback_allowed(server.port)) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url(f"/redirect?to={target}"))
    assert caught.value.code in {EgressErrorCode.BLOCKED_ADDRESS, EgressErrorCode.BLOCKED_SCHEME}
    assert len(server.requests) == 1


async def test_a_redirect_to_an_allowed_target_is_followed(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed(server.port)) as egress:
        response = await egress.fetch(server.url(f"/redirect?to={server.url('/ok')}"))
    assert response.text == "hello"
    assert response.redirects == [server.url(f"/redirect?to={server.url('/ok')}")]


async def test_redirects_are_bounded(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed(server.port, max_redirects=3)) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/loop"))
    assert caught.value.code == EgressErrorCode.TOO_MANY_REDIRECTS
    assert len(server.requests) == 4


async def test_the_guarded_http_client_rechecks_redirects_it_follows(server: LocalServer) -> None:
    egress = EgressClient(loopback_allowed(server.port))
    async with egress.http_client(follow_redirects=True) as client:
        with pytest.raises(EgressError) as caught:
            await client.get(server.url("/redirect?to=http://169.254.169.254/"))
    await egress.aclose()
    assert caught.value.code == EgressErrorCode.BLOCKED_ADDRESS


async def test_a_name_resolving_to_a_private_address_is_refused(server: LocalServer) -> None:
    resolver = StaticResolver(
        {"internal.example.com": ["10.0.0.7"], "mixed.example.com": ["8.8.8.8", "127.0.0.1"]}
    )
    policy = EgressPolicy(allowed_ports=frozenset({server.port}))
    async with EgressClient(policy, resolver=resolver) as egress:
        for host in ("internal.example.com", "mixed.example.com"):
            with pytest.raises(EgressError) as caught:
                await egress.fetch(server.url("/ok", host=host))
            assert caught.value.code == EgressErrorCode.BLOCKED_ADDRESS
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/ok", host="nowhere.example.com"))
        assert caught.value.code == EgressErrorCode.DNS_FAILED
    assert server.connections == 0


class RebindingResolver:
    """Answers an allowed address the first time and a blocked one afterwards (DNS rebinding)."""

    def __init__(self) -> None:
        self.calls = 0

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        self.calls += 1
        return [ip_address("127.0.0.1" if self.calls == 1 else "127.0.0.2")]


async def test_the_connection_goes_to_the_checked_address_under_the_name(server: LocalServer) -> None:
    resolver = RebindingResolver()
    async with EgressClient(loopback_allowed(server.port), resolver=resolver) as egress:
        response = await egress.fetch(server.url("/ok", host="rebind.example.com"))
        assert response.text == "hello"
        assert resolver.calls == 1  # one lookup per connection: nothing for a rebinding name to answer twice
        assert server.requests[0][1]["host"] == f"rebind.example.com:{server.port}"
        # A new connection resolves again, and the new (blocked) answer is refused.
        await egress.aclose()
    async with EgressClient(loopback_allowed(server.port), resolver=resolver) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/ok", host="rebind.example.com"))
    assert caught.value.code == EgressErrorCode.BLOCKED_ADDRESS
    assert server.connections == 1


async def test_a_body_that_never_ends_stops_at_the_size_budget(server: LocalServer) -> None:
    budget = 1024 * 1024
    async with EgressClient(loopback_allowed(server.port, max_response_bytes=budget)) as egress:
        started = time.monotonic()
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/forever"))
    assert caught.value.code == EgressErrorCode.TOO_LARGE
    assert time.monotonic() - started < 5


async def test_a_gzip_bomb_stops_at_the_size_budget(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed(server.port, max_response_bytes=1024 * 1024)) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/gzip-bomb"))
    assert caught.value.code == EgressErrorCode.TOO_LARGE


async def test_a_declared_length_over_the_budget_is_refused_before_reading(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed(server.port)) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/declared-huge"))
    assert caught.value.code == EgressErrorCode.TOO_LARGE


async def test_a_per_call_size_budget_can_only_narrow(server: LocalServer) -> None:
    async with EgressClient(loopback_allowed(server.port)) as egress:
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/ok"), max_bytes=4)
        assert caught.value.code == EgressErrorCode.TOO_LARGE
        assert (await egress.fetch(server.url("/ok"), max_bytes=5)).text == "hello"


async def test_a_slow_loris_is_cut_at_the_total_time_budget(server: LocalServer) -> None:
    # Each byte arrives well within any per-read timeout; only a budget for the whole fetch stops it.
    budget = 1.0
    assert 5 * budget < SLOW_BODY_BYTES * SLOW_BYTE_INTERVAL_SECONDS
    async with EgressClient(loopback_allowed(server.port, total_timeout_seconds=budget)) as egress:
        started = time.monotonic()
        with pytest.raises(EgressError) as caught:
            await egress.fetch(server.url("/slow"))
        elapsed = time.monotonic() - started
    assert caught.value.code == EgressErrorCode.TIMED_OUT
    assert budget <= elapsed < budget + 1.0


async def test_refused_closed_and_not_http_read_the_same(server: LocalServer, closed_port: int) -> None:
    errors = []
    async with EgressClient(loopback_allowed(server.port, closed_port)) as egress:
        for url in (server.url("/hang-up"), server.url("/not-http"), f"http://127.0.0.1:{closed_port}/"):
            with pytest.raises(EgressError) as caught:
                await egress.fetch(url)
            errors.append(caught.value)
    assert {(error.code, error.public_code, str(error)) for error in errors} == {
        (EgressErrorCode.UNREACHABLE, "unreachable", "the destination is not allowed or cannot be reached")
    }
    blocked = EgressError(EgressErrorCode.BLOCKED_ADDRESS)
    assert (blocked.public_code, str(blocked)) == (errors[0].public_code, str(errors[0]))
