"""The external applications an orchestrator hands turns to, over HTTP: Dify (``dify.py``), n8n
(``n8n.py``) and any A2A agent (``a2a.py``).

Every connection goes through the egress guard (:class:`knowsphere_egress.EgressTransport`): the host is
resolved once and every address checked against the operator's policy (private, loopback, link-local
and metadata addresses, and ports outside ``allowed_ports``, are refused unless allow-listed), for the
orchestrator's ``base_url`` and for any origin an A2A card names; redirects are not followed. Bodies are
asked for uncompressed and read within the policy's ``max_response_bytes``. Each call has two time
budgets: the orchestrator's ``timeout_seconds`` of silence (connecting, before the first byte, between
pieces) and the service's ``external_answer_seconds`` for the whole answer.
"""

from __future__ import annotations

import asyncio

import httpx

from knowsphere_conversation.adapters.a2a import relay_a2a
from knowsphere_conversation.adapters.dify import relay_dify
from knowsphere_conversation.adapters.n8n import relay_n8n
from knowsphere_conversation.adapters.peer_http import PeerLimits, timed_out
from knowsphere_conversation.domain.external import PeerCall, Receive
from knowsphere_egress import EgressPolicy, EgressTransport, Resolver

USER_AGENT = "KnowSphere/0.1 (+external-orchestrator)"


class HttpPeers:
    """:class:`~knowsphere_conversation.domain.external.ExternalPeers` over HTTP; a component of the
    service (its connection pools are closed when it stops)."""

    name = "external-peers"

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        answer_seconds: float = 600.0,
        stop_seconds: float = 2.0,
    ) -> None:
        self._answer_seconds = answer_seconds
        self._limits = PeerLimits(
            max_bytes=policy.max_response_bytes,
            connect_seconds=policy.connect_timeout_seconds,
            stop_seconds=stop_seconds,
        )
        # Two pools: the A2A client marks the client it is given with its protocol version header.
        self._http = self._client(policy, resolver)
        self._a2a_http = self._client(policy, resolver)

    @staticmethod
    def _client(policy: EgressPolicy, resolver: Resolver | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=EgressTransport(policy, resolver=resolver),
            trust_env=False,
            follow_redirects=False,
            headers={"user-agent": USER_AGENT, "accept-encoding": "identity"},
        )

    async def relay(self, call: PeerCall, receive: Receive) -> None:
        try:
            async with asyncio.timeout(self._answer_seconds):
                if call.config.provider == "dify":
                    await relay_dify(self._http, call, receive, self._limits)
                elif call.config.provider == "n8n":
                    await relay_n8n(self._http, call, receive, self._limits)
                else:
                    await relay_a2a(self._a2a_http, call, receive, self._limits)
        except TimeoutError:
            raise timed_out(call, f"over {self._answer_seconds:g} s in all") from None

    async def start(self) -> object:
        return None

    async def stop(self, grace: float | None = None) -> None:
        await self._http.aclose()
        await self._a2a_http.aclose()


__all__ = ["HttpPeers"]
