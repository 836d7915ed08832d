"""API tokens of the caller's tenant (``/api/v1/tokens``): create (the token is in that answer only),
list, read and revoke. Another tenant's token is a 404 like one that never was.

The bodies are hand-written: tokens are the gateway's own records and cross no service boundary.
"""

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import HttpError, error_response
from knowsphere_gateway.api.protojson import JSON_INTEGER, RequestBody
from knowsphere_gateway.domain.applications import ApplicationStore
from knowsphere_gateway.domain.tokens import Role, TokenRecord, TokenService
from knowsphere_runtime.identity import _ID_PATTERN, MAX_ID_LENGTH, Identity, IdentityError

MAX_TOKEN_NAME_CHARS = 200
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("no such token of the caller's tenant")}


class TokenCreate(RequestBody):
    name: str = Field(min_length=1, max_length=MAX_TOKEN_NAME_CHARS, description="what the token is for")
    role: Role = Field(description="admin, member or read-only")
    expires_in_days: Annotated[int, Field(ge=1), JSON_INTEGER] | None = Field(
        default=None,
        description="unset: KS_GATEWAY_TOKEN_DEFAULT_TTL_DAYS; at most KS_GATEWAY_TOKEN_MAX_TTL_DAYS",
    )
    application_id: str = Field(
        default="",
        max_length=128,
        description="an application of the tenant's: the token's requests run its orchestrator and count "
        "against its rate limit; deleting the application revokes the token",
    )
    user_id: str | None = Field(
        default=None,
        max_length=MAX_ID_LENGTH,
        pattern=_ID_PATTERN.pattern,
        description="the user the token acts as; unset: the creator",
    )


class Token(BaseModel):
    """A token as listed: everything but the token itself."""

    id: str
    name: str
    role: Role
    tenant_id: str
    user_id: str
    application_id: str
    created_by: str
    create_time: datetime
    expire_time: datetime
    revoke_time: datetime | None
    last_used_time: datetime | None

    @classmethod
    def of(cls, record: TokenRecord) -> "Token":
        return cls.model_validate(record, from_attributes=True)


class CreatedToken(BaseModel):
    token: str = Field(description="the token; shown here once, never again")
    info: Token


class TokenList(BaseModel):
    tokens: list[Token] = Field(description="newest first, revoked and expired ones included")


def build_tokens_router(
    tokens: TokenService,
    applications: ApplicationStore,
    caller: Callable[..., Awaitable[Caller]],
    default_ttl_days: int,
    max_ttl_days: int,
) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["tokens"])
    Who = Annotated[Caller, Depends(caller)]

    def not_found(token_id: str) -> HttpError:
        return HttpError(404, "not_found", f"token {token_id} not found")

    class Create(TokenCreate):
        # The document states this gateway's maximum; a longer expiry is refused below naming it.
        expires_in_days: Annotated[int, Field(ge=1), JSON_INTEGER] | None = Field(
            default=None,
            description="unset: KS_GATEWAY_TOKEN_DEFAULT_TTL_DAYS; at most KS_GATEWAY_TOKEN_MAX_TTL_DAYS",
            json_schema_extra={"maximum": max_ttl_days},
        )

    Create.__name__ = Create.__qualname__ = TokenCreate.__name__

    @router.post(
        "/tokens",
        status_code=201,
        response_model=CreatedToken,
        responses={
            400: error_response(
                "expires_in_days over the maximum, a bad user_id, or an unknown application_id"
            )
        },
    )
    async def create_token(body: Create, who: Who) -> CreatedToken:
        """A new token of the caller's tenant. Its text is in this answer only; keep it safe."""
        days = body.expires_in_days or default_ttl_days
        if days > max_ttl_days:
            raise HttpError(
                400,
                "invalid_argument",
                f"expires_in_days: {days} is over the limit of {max_ttl_days}",
                field="expires_in_days",
            )
        try:
            identity = Identity(who.identity.tenant_id, body.user_id or who.identity.user_id)
        except IdentityError as error:
            raise HttpError(400, "invalid_argument", f"user_id: {error}", field="user_id") from None
        if body.application_id and await applications.get(identity.tenant_id, body.application_id) is None:
            raise HttpError(
                400,
                "invalid_argument",
                f"application_id: no application {body.application_id} in the tenant",
                field="application_id",
            )
        issued = await tokens.issue(
            identity,
            body.role,
            name=body.name,
            ttl=timedelta(days=days),
            application_id=body.application_id,
            created_by=who.identity.user_id,
        )
        return CreatedToken(token=issued.token, info=Token.of(issued.record))

    @router.get("/tokens", response_model=TokenList)
    async def list_tokens(who: Who) -> TokenList:
        return TokenList(tokens=[Token.of(r) for r in await tokens.store.list(who.identity.tenant_id)])

    @router.get("/tokens/{token_id}", response_model=Token, responses=NOT_FOUND)
    async def get_token(token_id: str, who: Who) -> Token:
        record = await tokens.store.get(who.identity.tenant_id, token_id)
        if record is None:
            raise not_found(token_id)
        return Token.of(record)

    @router.delete("/tokens/{token_id}", status_code=204, responses=NOT_FOUND)
    async def revoke_token(token_id: str, who: Who) -> Response:
        """Revokes the token at once; it stays listed with its revoke time."""
        if await tokens.revoke(who.identity.tenant_id, token_id) is None:
            raise not_found(token_id)
        return Response(status_code=204)

    return router


__all__ = ["CreatedToken", "Token", "TokenCreate", "TokenList", "build_tokens_router"]
