"""Tenant and user identity of the current call, and the keys it travels under.

Identity is set at the edge (the gateway authenticates the caller) and then travels with every
internal call as a signed token (:mod:`knowsphere_runtime.identity_token`) in gRPC metadata, NATS
headers and workflow inputs. Inside a process it lives in a context variable, so a handler reads it
with :func:`require_identity` and every outgoing call carries it without being passed along by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from knowsphere_contracts.events import tenant_of_subject

TENANT_KEY = "ks-tenant-id"
USER_KEY = "ks-user-id"
LANGUAGE_KEY = "accept-language"
MAX_ID_LENGTH = 128
_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]*")

_current: ContextVar[Identity | None] = ContextVar("knowsphere_identity", default=None)
_language: ContextVar[str | None] = ContextVar("knowsphere_language", default=None)


class IdentityError(ValueError):
    """Identity is missing or malformed; the message names the key."""


@dataclass(frozen=True)
class Identity:
    tenant_id: str
    user_id: str

    def __post_init__(self) -> None:
        for key, value in ((TENANT_KEY, self.tenant_id), (USER_KEY, self.user_id)):
            if not value:
                raise IdentityError(f"{key} is empty")
            if len(value) > MAX_ID_LENGTH:
                raise IdentityError(f"{key} is {len(value)} characters; the limit is {MAX_ID_LENGTH}")
            if not _ID_PATTERN.fullmatch(value):
                raise IdentityError(f"{key}={value!r} has characters outside letters, digits and _ . : @ -")

    def as_log_fields(self) -> dict[str, str]:
        return {"tenant_id": self.tenant_id, "user_id": self.user_id}


def current_identity() -> Identity | None:
    return _current.get()


def require_identity() -> Identity:
    identity = _current.get()
    if identity is None:
        raise IdentityError("no caller identity: a signed ks-identity token is required")
    return identity


@contextmanager
def bound_identity(identity: Identity | None) -> Iterator[None]:
    token = _current.set(identity)
    try:
        yield
    finally:
        _current.reset(token)


def set_identity(identity: Identity | None) -> None:
    """Set identity for the rest of the current task (used by interceptors that own the task)."""
    _current.set(identity)


def on_own_tenant_subject(subject: str, base: str) -> bool:
    """Whether a message received on ``subject``, one of ``base``'s per-tenant subjects, names the
    tenant of its verified identity (bound while it is handled). A message published on another
    tenant's subject than its signed identity's, or on none, is refused by its subscriber."""
    identity = _current.get()
    return identity is not None and tenant_of_subject(subject, base) == identity.tenant_id


def identity_log_fields() -> dict[str, str]:
    identity = _current.get()
    return identity.as_log_fields() if identity else {}


def current_language() -> str | None:
    """The caller's preferred language (an ``Accept-Language`` value) for user-facing messages."""
    return _language.get()


@contextmanager
def bound_language(language: str | None) -> Iterator[None]:
    """Outgoing calls made inside carry ``language`` as ``accept-language`` metadata."""
    token = _language.set(language)
    try:
        yield
    finally:
        _language.reset(token)
