"""Who is calling, and the one way a route calls a service on their behalf.

Every route takes a :class:`Caller` (a FastAPI dependency built by :func:`caller_dependency`) and makes
its service calls inside ``with caller.bound():``, so the calls carry the caller's identity and
``Accept-Language`` (the channel's interceptors read both from context). A failed call raises
``knowsphere_clients.errors.ServiceError``, which ``errors.install_error_handlers`` maps to HTTP.

A caller is established, in this order, by (:class:`Authenticator`):

1. the proxy secret (``X-KS-Proxy-Secret``, compared in constant time with ``KS_GATEWAY_PROXY_SECRET``):
   an authenticating proxy vouches for the caller in ``X-KS-Tenant-Id``, ``X-KS-User-Id`` and
   ``X-KS-Role``; each must be there exactly once (a missing or doubled one is a 400, never defaulted);
   a wrong secret, or identity headers without one, is a 401;
2. an API token (``Authorization: Bearer ks_…``): its tenant, user and role, and its application
   if it has one (``domain.applications``): a token of a switched-off application is a 403, one of an
   application that no longer exists a 401;
3. nothing, in local single-user mode (``KS_GATEWAY_LOCAL_MODE``): the local identity as admin;
4. nothing otherwise: 401 with ``WWW-Authenticate: Bearer``.

:func:`authorization_dependency` then checks the role the route needs (``domain.access``) before the
route looks anything up: 403 for a role that is not allowed.

Only the first tag of ``Accept-Language`` travels, and only when it is a well-formed language tag
(:func:`language_tag`): the value becomes gRPC metadata, where a non-ASCII or oversized value would
fail or stall the call.
"""

import hmac
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import BaseRoute

from knowsphere_gateway.api.errors import GUARDED_RESPONSES, HttpError
from knowsphere_gateway.domain.access import role_needed
from knowsphere_gateway.domain.applications import ApplicationRecord, ApplicationStore
from knowsphere_gateway.domain.tokens import Role, TokenRefused, TokenService
from knowsphere_runtime.identity import Identity, IdentityError, bound_identity, bound_language

LANGUAGE_TAG = re.compile(r"[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*")

PROXY_SECRET_HEADER = "x-ks-proxy-secret"
TENANT_HEADER = "x-ks-tenant-id"
USER_HEADER = "x-ks-user-id"
ROLE_HEADER = "x-ks-role"
PROXY_IDENTITY_HEADERS = (TENANT_HEADER, USER_HEADER, ROLE_HEADER)

# Declares bearer authentication in the OpenAPI document; the header itself is read by the Authenticator,
# which (unlike HTTPBearer) refuses a doubled or non-bearer Authorization instead of ignoring it.
BEARER = HTTPBearer(auto_error=False, description="an API token: `Authorization: Bearer ks_…`")


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = GUARDED_RESPONSES
"""What every guarded route may answer, for the OpenAPI document: authentication and authorization
(401, 403), the caller's limits (429), a refused body (408, 413, 422) and a failure (500)."""


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
    role: Role = Role.READ_ONLY
    application_id: str = ""
    token_id: str | None = None  # the API token used, if any
    # The application of the token used, if it has one: its orchestrator answers, its limit applies.
    application: ApplicationRecord | None = None

    @contextmanager
    def bound(self) -> Iterator[None]:
        """Calls made inside act as this caller, in their language. Never hold it across a ``yield``
        of a stream: bind each step (see ``progress``)."""
        with bound_identity(self.identity), bound_language(self.language):
            yield


class Unauthenticated(HttpError):
    """401: no usable credentials; answered with ``WWW-Authenticate: Bearer``."""

    def __init__(self, message: str) -> None:
        super().__init__(401, "unauthenticated", message)


async def _unauthenticated(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, Unauthenticated)
    return JSONResponse({"error": error.body}, status_code=401, headers={"www-authenticate": "Bearer"})


def install_auth_error_handler(app: FastAPI) -> None:
    app.add_exception_handler(Unauthenticated, _unauthenticated)


@dataclass(frozen=True)
class Authenticator:
    """How this gateway establishes callers: ``tokens`` (with their ``applications``) always;
    ``local_identity`` in local mode; ``proxy_secret`` behind an authenticating proxy."""

    tokens: TokenService
    applications: ApplicationStore
    local_identity: Identity | None = None
    proxy_secret: str | None = None

    async def caller(self, request: Request) -> Caller:
        headers = request.headers
        language = language_tag(headers.get("accept-language"))
        secrets = headers.getlist(PROXY_SECRET_HEADER)
        identity_headers = [name for name in PROXY_IDENTITY_HEADERS if name in headers]
        if secrets or identity_headers:
            return self._from_proxy(request, secrets, language)
        authorization = headers.getlist("authorization")
        if authorization:
            return await self._from_token(authorization, language)
        if self.local_identity is not None:
            return Caller(self.local_identity, language, Role.ADMIN)
        raise Unauthenticated("an API token is required: send Authorization: Bearer <token>")

    def _from_proxy(self, request: Request, secrets: list[str], language: str | None) -> Caller:
        if self.proxy_secret is None:
            raise Unauthenticated(
                "identity headers are accepted only from the authenticating proxy, and none is configured"
            )
        if len(secrets) != 1 or not hmac.compare_digest(secrets[0].encode(), self.proxy_secret.encode()):
            raise Unauthenticated(
                f"identity headers need the proxy's {PROXY_SECRET_HEADER}; it is wrong or missing"
            )
        values: dict[str, str] = {}
        for name in PROXY_IDENTITY_HEADERS:
            found = request.headers.getlist(name)
            if len(found) != 1:
                state = "missing" if not found else f"sent {len(found)} times"
                raise HttpError(400, "invalid_argument", f"identity headers: {name} is {state}; send it once")
            values[name] = found[0]
        try:
            role = Role(values[ROLE_HEADER])
        except ValueError:
            roles = ", ".join(r.value for r in Role)
            raise HttpError(
                400,
                "invalid_argument",
                f"identity headers: {ROLE_HEADER}={values[ROLE_HEADER]!r} is not one of {roles}",
            ) from None
        try:
            identity = Identity(tenant_id=values[TENANT_HEADER], user_id=values[USER_HEADER])
        except IdentityError as error:
            raise HttpError(400, "invalid_argument", f"identity headers: {error}") from error
        return Caller(identity, language, role)

    async def _from_token(self, authorization: list[str], language: str | None) -> Caller:
        if len(authorization) != 1:
            raise Unauthenticated("send one Authorization header")
        scheme, _, token = authorization[0].strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Authorization must be Bearer <token>")
        try:
            record = await self.tokens.authenticate(token.strip())
        except TokenRefused as error:
            raise Unauthenticated(str(error)) from None
        application = None
        if record.application_id:
            application = await self.applications.get(record.tenant_id, record.application_id)
            if application is None:
                raise Unauthenticated(
                    f"the token {record.id} is for application {record.application_id}, "
                    "which no longer exists"
                )
            if not application.active:
                raise HttpError(
                    403,
                    "permission_denied",
                    f"application {application.name} is switched off (active: false); its tokens are "
                    "refused until an admin switches it on",
                )
        return Caller(record.identity, language, record.role, record.application_id, record.id, application)


def caller_dependency(authenticator: Authenticator) -> Callable[..., Awaitable[Caller]]:
    """The dependency giving a route its :class:`Caller` (FastAPI runs it once per request)."""

    async def caller(
        request: Request, _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]
    ) -> Caller:
        return await authenticator.caller(request)

    return caller


def authorization_dependency(caller: Callable[..., Awaitable[Caller]]) -> Callable[..., Awaitable[None]]:
    """A router-level dependency: 403 unless the caller's role may use the matched route
    (``domain.access.ROUTE_ROLES``)."""

    async def authorize(request: Request, who: Annotated[Caller, Depends(caller)]) -> None:
        route: BaseRoute | None = request.scope.get("route")
        path = getattr(route, "path", request.url.path)
        needed = role_needed(request.method, path)
        if not who.role.allows(needed):
            raise HttpError(
                403,
                "permission_denied",
                f"{request.method} {path} needs the {needed} role; the caller has {who.role}",
            )

    return authorize


__all__ = [
    "AUTH_RESPONSES",
    "LANGUAGE_TAG",
    "PROXY_SECRET_HEADER",
    "ROLE_HEADER",
    "TENANT_HEADER",
    "USER_HEADER",
    "Authenticator",
    "Caller",
    "Unauthenticated",
    "authorization_dependency",
    "caller_dependency",
    "install_auth_error_handler",
    "language_tag",
]
