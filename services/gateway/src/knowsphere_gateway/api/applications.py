"""Applications of the caller's tenant (``/api/v1/applications``): an orchestrator on a channel, with
its own rate limit. Create, list, read, change and delete; another tenant's application is a 404 like
one that never was.

The orchestrator must be one of the tenant's: it is looked up in the conversation service as the
caller, and one it does not find is a 400 naming ``orchestrator_id``. Deleting an application revokes
its tokens.

A WeCom application (``wework_traditional``, ``wework_aibot``) carries its channel settings in
``platform_config`` (``domain.channel_config``): a field that does not fit is a 400 naming
``platform_config.<field>``. Its token, EncodingAESKey and secret are write-only: kept encrypted with
MASTER_KEY (without one, a 503 saying so), answered only as masked hints in ``platform_secrets``; a
change names only the settings that change. ``callback_path`` is the URL path to give WeCom's console
(``api/wecom.py``).

The bodies are hand-written: applications are the gateway's own records.
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from knowsphere_clients import ConversationClient
from knowsphere_clients.errors import ServiceError
from knowsphere_contracts.agents import MAX_DISPLAY_NAME_CHARS, MAX_ID_CHARS, NAME_PATTERN, NAME_RULE
from knowsphere_gateway.api.caller import Caller
from knowsphere_gateway.api.errors import SERVICE_RESPONSES, HttpError, error_response
from knowsphere_gateway.api.protojson import JSON_INTEGER, JsonBool, JsonFloat, RequestBody
from knowsphere_gateway.domain.applications import (
    MAX_APPLICATION_BURST,
    MAX_APPLICATION_RATE_PER_SECOND,
    MIN_APPLICATION_RATE_PER_SECOND,
    ApplicationNameTaken,
    ApplicationRecord,
    ApplicationStore,
    Platform,
    SealedSecret,
    new_application_id,
)
from knowsphere_gateway.domain.channel_config import (
    ChannelConfigError,
    ChannelSecrets,
    ChannelSettings,
    MasterKeyMissing,
    check_config,
)
from knowsphere_gateway.domain.limits import Limits
from knowsphere_gateway.domain.tokens import TokenService

Name = Annotated[str, Field(pattern=NAME_PATTERN, description=f"unique in the tenant; {NAME_RULE}")]
DisplayName = Annotated[str, Field(max_length=MAX_DISPLAY_NAME_CHARS, description='"" shows the name')]
OrchestratorId = Annotated[
    str, Field(min_length=1, max_length=MAX_ID_CHARS, description="an orchestrator of the tenant's")
]
RatePerSecond = Annotated[
    JsonFloat,
    Field(
        ge=MIN_APPLICATION_RATE_PER_SECOND,
        le=MAX_APPLICATION_RATE_PER_SECOND,
        description="requests per second on average through the application, all its tokens together",
    ),
]
Burst = Annotated[
    int,
    Field(ge=1, le=MAX_APPLICATION_BURST, description="requests at once through the application"),
    JSON_INTEGER,
]

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: error_response("no such application of the caller's tenant")
}
REFUSED: dict[int | str, dict[str, Any]] = {
    400: error_response(
        "orchestrator_id names no orchestrator of the tenant's, or platform_config does not fit the "
        "platform (error.field names the setting)"
    ),
    409: error_response("name: the tenant has an application of that name"),
    503: error_response("a WeCom application's secrets need MASTER_KEY, which this gateway lacks"),
}
MAX_SETTING_CHARS = 256
"""A bound on every channel setting's length; the settings' own forms are checked per platform (400)."""
Setting = Annotated[str, Field(max_length=MAX_SETTING_CHARS)]
PLATFORMS = (
    "the channel: webclient (the web client), api_service (the HTTP and OpenAI-compatible API with the "
    "application's tokens), wework_traditional (a WeCom self-built application: callbacks, answers sent "
    "through WeCom's API), wework_aibot (a WeCom AI bot: callbacks answered with a streamed message); the "
    "wework ones need platform_config"
)


class PlatformConfig(RequestBody):
    """A WeCom application's channel settings, from WeCom's console. ``token``, ``encoding_aes_key`` and
    ``secret`` are write-only: stored encrypted, read back as masked hints. In a change, only the keys
    given change."""

    corp_id: Setting | None = Field(default=None, description="wework_traditional (required): the CorpID")
    agent_id: Annotated[int, JSON_INTEGER] | None = Field(
        default=None, description="wework_traditional (required): the application's AgentId"
    )
    secret: Setting | None = Field(
        default=None, description="wework_traditional (required, write-only): the application's Secret"
    )
    message_format: Setting | None = Field(
        default=None, description="wework_traditional: text (default) or markdown, how answers are sent"
    )
    token: Setting | None = Field(
        default=None, description="both (required, write-only): the callback Token, 3-32 letters and digits"
    )
    encoding_aes_key: Setting | None = Field(
        default=None,
        description="both (required, write-only): the callback EncodingAESKey, 43 characters of base64",
    )
    bot_id: Setting | None = Field(
        default=None,
        description="wework_aibot: the bot's id; when set, callbacks for another bot are ignored",
    )


class ApplicationCreate(RequestBody):
    name: Name
    display_name: DisplayName = ""
    platform: Platform = Field(description=PLATFORMS)
    platform_config: PlatformConfig | None = Field(
        default=None, description="the channel's settings (wework platforms only)"
    )
    orchestrator_id: OrchestratorId
    active: JsonBool = Field(default=True, description="false: kept, but its tokens are refused")
    rate_limit_per_second: RatePerSecond | None = Field(
        default=None, description="unset: the per-caller rate (KS_GATEWAY_CALLER_RATE_LIMIT_PER_SECOND)"
    )
    rate_limit_burst: Burst | None = Field(
        default=None, description="unset: the per-caller burst (KS_GATEWAY_CALLER_RATE_LIMIT_BURST)"
    )


class ApplicationUpdate(RequestBody):
    """Only the fields given change."""

    name: Name | None = None
    display_name: DisplayName | None = None
    platform: Platform | None = None
    platform_config: PlatformConfig | None = Field(
        default=None,
        description="changes only the settings given; a new platform takes a whole new platform_config",
    )
    orchestrator_id: OrchestratorId | None = None
    active: JsonBool | None = None
    rate_limit_per_second: RatePerSecond | None = None
    rate_limit_burst: Burst | None = None


class Application(BaseModel):
    id: str
    name: str
    display_name: str
    platform: Platform
    orchestrator_id: str
    active: bool
    rate_limit_per_second: float
    rate_limit_burst: int
    tenant_id: str
    created_by: str
    create_time: datetime
    update_time: datetime
    platform_config: dict[str, str | int] = Field(
        description="the channel's plain settings (WeCom: corp_id, agent_id, message_format, bot_id); "
        "{} for the other platforms"
    )
    platform_secrets: dict[str, str] = Field(
        description="the channel's write-only settings by name, each as a masked hint (…ab12), never "
        "the value"
    )
    callback_path: str | None = Field(
        description="WeCom platforms: the path of the callback URL to give WeCom's console (behind the "
        "gateway's public address); null for the other platforms"
    )

    @classmethod
    def of(cls, record: ApplicationRecord) -> "Application":
        plain = {
            name: getattr(record, name)
            for name in cls.model_fields
            if name not in ("platform_config", "platform_secrets", "callback_path")
        }
        return cls(
            **plain,
            platform_config=dict(record.platform_config),
            platform_secrets={name: sealed.hint for name, sealed in record.platform_secrets.items()},
            callback_path=callback_path(record) if record.platform.is_wecom else None,
        )


def callback_path(record: ApplicationRecord) -> str:
    """Where WeCom calls a WeCom application (``api/wecom.py``)."""
    return f"/api/v1/wecom/{record.tenant_id}/{record.id}/callback"


class ApplicationList(BaseModel):
    applications: list[Application] = Field(description="by name")


def not_found(application_id: str) -> HttpError:
    return HttpError(404, "not_found", f"application {application_id} not found")


def build_applications_router(
    applications: ApplicationStore,
    tokens: TokenService,
    conversation: ConversationClient,
    caller: Callable[..., Awaitable[Caller]],
    limits: Limits,
    secrets: ChannelSecrets | None = None,
) -> APIRouter:
    """``limits`` gives an application's rate limit when its creator sets none; ``secrets`` seals the
    WeCom channels' secrets (None, or one without a key ring: WeCom applications are refused)."""
    router = APIRouter(prefix="/api/v1", tags=["applications"], responses=SERVICE_RESPONSES)
    Who = Annotated[Caller, Depends(caller)]
    channel_secrets = secrets or ChannelSecrets(None)

    def channel_settings(
        platform: Platform, given: dict[str, Any] | None, current: ApplicationRecord | None = None
    ) -> ChannelSettings:
        """The checked settings; with ``current`` (same platform), what is not given is kept."""
        if platform.is_wecom and not channel_secrets.available:
            raise HttpError(
                503, "master_key_not_configured", str(MasterKeyMissing()), field="platform_config"
            )
        try:
            return check_config(
                platform,
                given or {},
                current.platform_config if current else None,
                frozenset(current.platform_secrets) if current else frozenset(),
            )
        except ChannelConfigError as error:
            raise HttpError(400, "invalid_argument", str(error), field=error.field) from None

    def sealed(tenant_id: str, application_id: str, settings: ChannelSettings) -> dict[str, SealedSecret]:
        try:
            return channel_secrets.seal(tenant_id, application_id, settings.secrets)
        except MasterKeyMissing as error:
            raise HttpError(503, "master_key_not_configured", str(error), field="platform_config") from None

    async def existing_orchestrator(who: Caller, orchestrator_id: str) -> None:
        try:
            with who.bound():
                await conversation.get_orchestrator(orchestrator_id)
        except ServiceError as error:
            if error.status not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise
            raise HttpError(
                400,
                "invalid_argument",
                f"orchestrator_id: no orchestrator {orchestrator_id} in the tenant",
                field="orchestrator_id",
            ) from None

    def name_taken(error: ApplicationNameTaken) -> HttpError:
        return HttpError(409, "already_exists", str(error), field="name")

    @router.post("/applications", status_code=201, response_model=Application, responses=REFUSED)
    async def create_application(body: ApplicationCreate, who: Who) -> Application:
        """A new application: the tenant's orchestrator on a channel."""
        given = body.platform_config.model_dump(exclude_unset=True) if body.platform_config else None
        settings = channel_settings(body.platform, given)
        await existing_orchestrator(who, body.orchestrator_id)
        now = datetime.now(UTC)
        application_id = new_application_id()
        record = ApplicationRecord(
            id=application_id,
            tenant_id=who.identity.tenant_id,
            name=body.name,
            display_name=body.display_name or body.name,
            platform=body.platform,
            orchestrator_id=body.orchestrator_id,
            active=body.active,
            rate_limit_per_second=body.rate_limit_per_second or limits.caller_rate_limit_per_second,
            rate_limit_burst=body.rate_limit_burst or limits.caller_rate_limit_burst,
            created_by=who.identity.user_id,
            create_time=now,
            update_time=now,
            platform_config=settings.public,
            platform_secrets=sealed(who.identity.tenant_id, application_id, settings),
        )
        try:
            await applications.add(record)
        except ApplicationNameTaken as error:
            raise name_taken(error) from None
        return Application.of(record)

    @router.get("/applications", response_model=ApplicationList)
    async def list_applications(who: Who) -> ApplicationList:
        """The tenant's applications by name."""
        found = await applications.list(who.identity.tenant_id)
        return ApplicationList(applications=[Application.of(r) for r in found])

    @router.get("/applications/{application_id}", response_model=Application, responses=NOT_FOUND)
    async def get_application(application_id: str, who: Who) -> Application:
        record = await applications.get(who.identity.tenant_id, application_id)
        if record is None:
            raise not_found(application_id)
        return Application.of(record)

    @router.patch(
        "/applications/{application_id}", response_model=Application, responses={**NOT_FOUND, **REFUSED}
    )
    async def update_application(application_id: str, body: ApplicationUpdate, who: Who) -> Application:
        tenant_id = who.identity.tenant_id
        current = await applications.get(tenant_id, application_id)
        if current is None:
            raise not_found(application_id)
        changes: dict[str, Any] = {
            k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None
        }
        if changes.get("display_name") == "":
            changes["display_name"] = changes.get("name", current.name)
        given = changes.pop("platform_config", None)
        platform = changes.get("platform", current.platform)
        if given is not None or platform != current.platform:
            same = platform == current.platform
            settings = channel_settings(platform, given, current if same else None)
            kept = dict(current.platform_secrets) if same else {}
            changes["platform_config"] = settings.public
            changes["platform_secrets"] = {**kept, **sealed(tenant_id, application_id, settings)}
        if "orchestrator_id" in changes:
            await existing_orchestrator(who, changes["orchestrator_id"])
        changes["update_time"] = datetime.now(UTC)
        try:
            record = await applications.update(tenant_id, application_id, changes)
        except ApplicationNameTaken as error:
            raise name_taken(error) from None
        if record is None:  # deleted meanwhile
            raise not_found(application_id)
        return Application.of(record)

    @router.delete("/applications/{application_id}", status_code=204, responses=NOT_FOUND)
    async def delete_application(application_id: str, who: Who) -> Response:
        """Deletes the application and revokes its tokens at once (they stay listed, revoked)."""
        tenant_id = who.identity.tenant_id
        if not await applications.delete(tenant_id, application_id):
            raise not_found(application_id)
        await tokens.revoke_for_application(tenant_id, application_id)
        return Response(status_code=204)

    return router


__all__ = [
    "Application",
    "ApplicationCreate",
    "ApplicationList",
    "ApplicationUpdate",
    "build_applications_router",
    "not_found",
]
