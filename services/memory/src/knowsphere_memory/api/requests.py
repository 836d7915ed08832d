"""What every memory handler shares: the caller as owner, the clock, and field checks that name the
field and the limit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from knowsphere_memory.domain.records import Owner
from knowsphere_runtime.identity import require_identity
from knowsphere_runtime.rpc.errors import invalid

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def caller() -> Owner:
    """The calling user: every read and write is theirs alone."""
    identity = require_identity()
    return Owner(identity.tenant_id, identity.user_id)


def required_id(field: str, value: str, limit: int) -> str:
    if not value.strip():
        raise invalid(field, "required")
    if len(value) > limit:
        raise invalid(field, f"{len(value)} characters; the limit is {limit}")
    return value


def optional_id(field: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise invalid(field, f"{len(value)} characters; the limit is {limit}")
    return value


def page_size(field: str, value: int, default: int, limit: int) -> int:
    if value < 0:
        raise invalid(field, f"{value}; must be 0 (server default) or positive")
    return min(value or default, limit)
