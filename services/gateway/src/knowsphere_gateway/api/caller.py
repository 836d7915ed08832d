"""Who is calling, and the one way a route calls a service on their behalf.

Every route takes a :class:`Caller` (a FastAPI dependency built by :func:`caller_dependency`) and makes
its service calls inside ``with caller.bound():``, so the calls carry the caller's identity and
``Accept-Language`` (the channel's interceptors read both from context). A failed call raises
``knowsphere_clients.errors.ServiceError``, which ``errors.install_error_handlers`` maps to HTTP.

Only the first tag of ``Accept-Language`` travels, and only when it is a well-formed language tag
(:func:`language_tag`): the value becomes gRPC metadata, where a non-ASCII or oversized value would
fail or stall the call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Header

from knowsphere_gateway.api.errors import HttpError
from knowsphere_runtime.identity import Identity, IdentityError, bound_identity, bound_language

LANGUAGE_TAG = re.compile(r"[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*")


def language_tag(accept_language: str | None) -> str | None:
    """The first language of an ``Accept-Language`` value without its ``;q=`` weight (``"de-DE;q=0.9,
    en"`` → ``"de-DE"``), or None (the services' default language) when it is not a language tag."""
    if accept_language is None:
        return None
    first = accept_language.split(",", 1)[0].split(";", 1)[0].strip()
    return first if LANGUAGE_TAG.fullmatch(first) else None


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
        language = language_tag(accept_language)
        if not trust_identity_headers or (x_ks_tenant_id is None and x_ks_user_id is None):
            return Caller(default_identity, language)
        try:
            identity = Identity(tenant_id=x_ks_tenant_id or "", user_id=x_ks_user_id or "")
        except IdentityError as error:
            raise HttpError(400, "invalid_argument", f"identity headers: {error}") from error
        return Caller(identity, language)

    return caller


__all__ = ["LANGUAGE_TAG", "Caller", "caller_dependency", "language_tag"]
