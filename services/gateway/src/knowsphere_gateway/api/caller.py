"""Who is calling, and the one way a route calls a service on their behalf.

Every route takes a :class:`Caller` (a FastAPI dependency built by :func:`caller_dependency`) and makes
its service calls inside ``with caller.bound():``, so the calls carry the caller's identity and
``Accept-Language`` (the channel's interceptors read both from context). A failed call raises
``knowsphere_clients.errors.ServiceError``, which ``errors.install_error_handlers`` maps to HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Header

from knowsphere_gateway.api.errors import HttpError
from knowsphere_runtime.identity import Identity, IdentityError, bound_identity, bound_language


@dataclass(frozen=True)
class Caller:
    identity: Identity
    language: str | None = None

    @contextmanager
    def bound(self) -> Iterator[None]:
        """Calls made inside act as this caller, in their language. Never hold it across a ``yield``
        of a stream: bind each step (see ``progress``)."""
        with bound_identity(self.identity), bound_language(self.language):
            yield


def caller_dependency(default_identity: Identity, trust_identity_headers: bool) -> Callable[..., Caller]:
    """The dependency giving a route its :class:`Caller`: the single-tenant default identity, or the
    identity headers of an authenticating proxy when they are trusted."""

    def caller(
        x_ks_tenant_id: Annotated[str | None, Header()] = None,
        x_ks_user_id: Annotated[str | None, Header()] = None,
        accept_language: Annotated[str | None, Header()] = None,
    ) -> Caller:
        if not trust_identity_headers or (x_ks_tenant_id is None and x_ks_user_id is None):
            return Caller(default_identity, accept_language)
        try:
            identity = Identity(tenant_id=x_ks_tenant_id or "", user_id=x_ks_user_id or "")
        except IdentityError as error:
            raise HttpError(400, "invalid_argument", f"identity headers: {error}") from error
        return Caller(identity, accept_language)

    return caller


__all__ = ["Caller", "caller_dependency"]
