"""The one error type of the egress guard, with a code a caller can act on.

Messages are fixed per code and never carry the address, port or the low-level reason (refused,
reset, closed, filtered): a tenant who points a fetch or a model base URL at internal hosts must not
learn from the answer which ports are open. Operators find the detail in ``__cause__`` and logs.
"""

from __future__ import annotations

from enum import StrEnum


class EgressErrorCode(StrEnum):
    BLOCKED_SCHEME = "blocked_scheme"
    """Only ``http`` and ``https`` are fetched."""
    BLOCKED_URL = "blocked_url"
    """Malformed URL, userinfo (``user:pass@``), or a query/fragment where a base URL is expected."""
    BLOCKED_PORT = "blocked_port"
    """The port is not in the policy's ``allowed_ports``."""
    BLOCKED_ADDRESS = "blocked_address"
    """The host is, or resolves to, a private, loopback, link-local, metadata … address."""
    DNS_FAILED = "dns_failed"
    """The name did not resolve."""
    UNREACHABLE = "unreachable"
    """Connection refused, reset, closed or not answered — deliberately one code for all of them."""
    TIMED_OUT = "timed_out"
    """The fetch's total time budget ran out (resolution, connects, redirects and body together)."""
    TOO_LARGE = "too_large"
    """The response body (after decoding) is over the fetch's size budget."""
    TOO_MANY_REDIRECTS = "too_many_redirects"
    """More redirects than the policy's ``max_redirects``."""
    BAD_RESPONSE = "bad_response"
    """The body broke off or could not be decoded (before any response, failures are UNREACHABLE)."""


# What a tenant may be told. Every code about *where* a request may go collapses into one public code,
# so that "blocked", "no such name" and "nothing listening" cannot be told apart from outside.
_TARGET_CODES = frozenset(
    {
        EgressErrorCode.BLOCKED_PORT,
        EgressErrorCode.BLOCKED_ADDRESS,
        EgressErrorCode.DNS_FAILED,
        EgressErrorCode.UNREACHABLE,
    }
)

_MESSAGES: dict[EgressErrorCode, str] = {
    EgressErrorCode.BLOCKED_SCHEME: "only http and https URLs can be fetched",
    EgressErrorCode.BLOCKED_URL: "the URL is not allowed (credentials, query or fragment, or malformed)",
    EgressErrorCode.BLOCKED_PORT: "the destination is not allowed or cannot be reached",
    EgressErrorCode.BLOCKED_ADDRESS: "the destination is not allowed or cannot be reached",
    EgressErrorCode.DNS_FAILED: "the destination is not allowed or cannot be reached",
    EgressErrorCode.UNREACHABLE: "the destination is not allowed or cannot be reached",
    EgressErrorCode.TIMED_OUT: "the fetch took longer than its time budget",
    EgressErrorCode.TOO_LARGE: "the response is larger than the size budget",
    EgressErrorCode.TOO_MANY_REDIRECTS: "the fetch was redirected too many times",
    EgressErrorCode.BAD_RESPONSE: "the server's answer was not valid HTTP",
}


class EgressError(Exception):
    """A refused or failed outbound fetch. ``code`` is exact (for logs, metrics and tests);
    ``public_code`` and ``str(error)`` are what a tenant may see."""

    def __init__(self, code: EgressErrorCode, *, field: str | None = None) -> None:
        super().__init__(_MESSAGES[code])
        self.code = code
        self.field = field
        """The request field the refused value came from (e.g. ``base_url``), when the caller named one."""

    @property
    def message(self) -> str:
        return _MESSAGES[self.code]

    @property
    def public_code(self) -> str:
        return EgressErrorCode.UNREACHABLE.value if self.code in _TARGET_CODES else self.code.value

    def __repr__(self) -> str:
        return f"EgressError({self.code.value!r})"
