"""KnowSphere egress guard: the one way the platform makes an outbound request on a tenant's behalf.

- ``EgressPolicy`` — the operator's settings (allowed ports, allow-listed networks and hosts, redirect,
  time and size budgets).
- ``EgressClient.fetch`` — one guarded fetch within the budgets; ``EgressClient.http_client()`` — an
  ``httpx.AsyncClient`` on the same guard for SDKs that take one.
- ``EgressTransport`` — the guarded httpx transport itself.
- ``validate_base_url`` — the check for a model provider's base URL; ``check_base_url_form`` its part
  without policy or lookup (the form: http(s), a host, no credentials, query or fragment).
- ``EgressError`` / ``EgressErrorCode`` — every refusal and failure, one type.
"""

from knowsphere_egress.base_url import check_base_url_form, validate_base_url
from knowsphere_egress.errors import EgressError, EgressErrorCode
from knowsphere_egress.fetch import EgressClient, EgressResponse
from knowsphere_egress.policy import EgressPolicy, check_url, is_blocked_address, parse_ip_literal
from knowsphere_egress.resolver import Resolver, StaticResolver, SystemResolver
from knowsphere_egress.transport import EgressTransport, GuardedNetworkBackend

__all__ = [
    "EgressClient",
    "EgressError",
    "EgressErrorCode",
    "EgressPolicy",
    "EgressResponse",
    "EgressTransport",
    "GuardedNetworkBackend",
    "Resolver",
    "StaticResolver",
    "SystemResolver",
    "check_base_url_form",
    "check_url",
    "is_blocked_address",
    "parse_ip_literal",
    "validate_base_url",
]
