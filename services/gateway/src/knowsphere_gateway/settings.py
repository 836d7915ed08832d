"""Settings of the gateway (environment variables prefixed ``KS_GATEWAY_``).

``MASTER_KEY`` (no prefix; ``MASTER_KEY_PREVIOUS`` while rotating) encrypts the WeCom channels' secrets
with the shared key ring (``knowsphere_runtime.secrets``); without it every other channel works and a
WeCom application cannot be stored. The egress guard of the calls to WeCom's API is a nested group:
``KS_GATEWAY_EGRESS__ALLOW_HOSTS='["wecom-proxy.internal"]'``, ``KS_GATEWAY_EGRESS__ALLOWED_PORTS`` …
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from knowsphere_egress import EgressPolicy
from knowsphere_gateway.adapters.wecom_api import DEFAULT_API_BASE
from knowsphere_gateway.domain.evaluations import DEFAULT_EVALUATION_OPTIONS, EvaluationOptions
from knowsphere_gateway.domain.limits import DEFAULT_LIMITS, Limits
from knowsphere_gateway.domain.tokens import DEFAULT_TOKEN_TTL_DAYS, MAX_TOKEN_TTL_DAYS
from knowsphere_gateway.domain.wecom_options import DEFAULT_WECOM_OPTIONS, WeComOptions
from knowsphere_runtime.secrets import KeyRing, key_ring_of, master_key_field, previous_master_keys_field
from knowsphere_runtime.settings import ServiceSettings

CHECKOUT_WEB_DIST = Path(__file__).resolve().parents[4] / "frontend" / "dist"
"""Where ``make setup`` builds the web UI in a checkout (an installed package has none: set
``KS_GATEWAY_WEB_DIST``)."""

_WECOM = DEFAULT_WECOM_OPTIONS
_EVALUATION = DEFAULT_EVALUATION_OPTIONS

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
"""The Host names a local-mode gateway answers by default (DNS rebinding: any other name is refused)."""

TOKEN_HASH_KEY_FILE = "secrets/token-hash.key"
MIN_SECRET_CHARS = 32


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); a wildcard is not one."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _comma_separated(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class TokenStoreSettings(BaseSettings):
    """What the token store needs: shared by the service and ``python -m knowsphere_gateway.tokens``,
    which must hash tokens with the same key into the same database."""

    model_config = SettingsConfigDict(env_prefix="KS_GATEWAY_", extra="ignore", frozen=True)

    data_dir: Path
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL of the API tokens (postgresql+asyncpg://…); empty: SQLite in data_dir",
    )
    token_hash_key: SecretStr | None = Field(
        default=None,
        validate_default=True,
        min_length=MIN_SECRET_CHARS,
        description="HMAC key of stored token hashes; unset: generated once into <data_dir>/"
        f"{TOKEN_HASH_KEY_FILE} (required with database_url, where replicas share the tokens)",
    )

    # Field validators (not a model validator) so that a refusal names the variable and never echoes
    # the other settings, secrets among them.
    @field_validator("token_hash_key")
    @classmethod
    def _shared_tokens_need_a_shared_key(
        cls, key: SecretStr | None, info: ValidationInfo
    ) -> SecretStr | None:
        if key is None and info.data.get("database_url"):
            raise ValueError(
                "required with KS_GATEWAY_DATABASE_URL: every replica must hash tokens with the same key"
            )
        return key

    def sqlalchemy_url(self) -> str:
        """The tokens' database: ``database_url`` (a plain ``postgresql://`` URL, as in the Secret's
        template, gets the async driver), or SQLite in the data dir."""
        if not self.database_url:
            return f"sqlite+aiosqlite:///{self.data_dir / 'gateway.db'}"
        scheme, _, rest = self.database_url.partition("://")
        return f"postgresql+asyncpg://{rest}" if scheme in ("postgresql", "postgres") else self.database_url

    def hash_key(self) -> bytes:
        """``token_hash_key``, or the key in the data dir (created, readable by the owner only, once)."""
        if self.token_hash_key is not None:
            return self.token_hash_key.get_secret_value().encode()
        path = self.data_dir / TOKEN_HASH_KEY_FILE
        if not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                with open(path, "x", opener=lambda name, flags: os.open(name, flags, 0o600)) as f:
                    f.write(secrets.token_hex(32))
            except FileExistsError:
                pass  # another process wrote it first: use theirs
        return path.read_text().strip().encode()


class Settings(ServiceSettings, TokenStoreSettings):
    model_config = SettingsConfigDict(
        env_prefix="KS_GATEWAY_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    grpc_port: int = Field(default=7410, ge=1, le=65535)
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8780, ge=1, le=65535)
    nats_url: str = Field(description="NATS server carrying chat requests and turn events")
    conversation_addr: str
    retrieval_addr: str
    ingestion_addr: str
    memory_addr: str
    toolrunner_addr: str
    modelhub_addr: str
    web_dist: Path = Field(
        default=CHECKOUT_WEB_DIST,
        description="the built web UI (frontend/dist, made by make setup), served under /ui/",
    )
    chat_turn_timeout_seconds: float = Field(
        default=120.0, gt=0, description="longest wait for the next event of a turn"
    )
    health_check_timeout_seconds: float = Field(default=2.0, gt=0)

    # --- who may call ---
    local_mode: bool = Field(
        default=False,
        description="single-user mode: a request without credentials acts as the admin local_tenant_id/"
        "local_user_id; only on a loopback http_host (make up turns it on)",
    )
    local_tenant_id: str = "local"
    local_user_id: str = "local"
    proxy_secret: SecretStr | None = Field(
        default=None,
        min_length=MIN_SECRET_CHARS,
        description="accept X-KS-Tenant-Id / X-KS-User-Id / X-KS-Role from an authenticating proxy that "
        "sends this value in X-KS-Proxy-Secret",
    )
    token_default_ttl_days: int = Field(
        default=DEFAULT_TOKEN_TTL_DAYS, ge=1, description="expiry of a token created without one"
    )
    token_max_ttl_days: int = Field(
        default=MAX_TOKEN_TTL_DAYS, ge=1, description="the longest expiry a token may ask for"
    )
    token_last_used_flush_seconds: float = Field(
        default=60.0, gt=0, description="how often the last-used times of tokens are written, in one batch"
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names the API answers (comma-separated); empty: localhost names in local mode, "
        "any otherwise",
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="browser origins (https://host[:port]) besides the gateway's own that may send "
        "state-changing requests (comma-separated)",
    )

    # --- limits (api/limits.py) ---
    max_body_bytes: int = Field(
        default=DEFAULT_LIMITS.max_body_bytes, ge=1024, description="largest request body but an upload"
    )
    max_upload_bytes: int = Field(
        default=DEFAULT_LIMITS.max_upload_bytes,
        ge=1024,
        description="largest upload request, all its files and parts together (checked on Content-Length "
        "and while the body arrives, before anything past it is spooled)",
    )
    max_upload_files: int = Field(
        default=DEFAULT_LIMITS.max_upload_files,
        ge=1,
        description="most files in one batch upload (the upload policy's max_files_per_upload may be lower)",
    )
    body_idle_timeout_seconds: float = Field(
        default=DEFAULT_LIMITS.body_idle_timeout_seconds,
        gt=0,
        description="longest pause in a request body before it is refused with 408",
    )
    body_min_bytes_per_second: int = Field(
        default=DEFAULT_LIMITS.body_min_bytes_per_second,
        ge=0,
        description="slowest average rate of a body that takes longer than the idle timeout (408 below it)",
    )
    caller_rate_limit_per_second: float = Field(
        default=DEFAULT_LIMITS.caller_rate_limit_per_second,
        gt=0,
        description="requests per second one caller (token, or tenant and user) may make on average",
    )
    caller_rate_limit_burst: int = Field(
        default=DEFAULT_LIMITS.caller_rate_limit_burst,
        ge=1,
        description="requests one caller may make at once",
    )
    caller_max_concurrent_requests: int = Field(
        default=DEFAULT_LIMITS.caller_max_concurrent_requests,
        ge=1,
        description="requests of one caller in flight at once (an open event stream counts)",
    )

    # --- retrieval evaluation runs (api/evaluation_runs.py) ---
    evaluation_max_running_per_tenant: int = Field(
        default=_EVALUATION.max_running_per_tenant, ge=1, description="evaluation runs of a tenant at once"
    )
    evaluation_batch_size: int = Field(
        default=_EVALUATION.batch_size,
        ge=1,
        description="questions per call to retrieval (at most its KS_RETRIEVAL_EVALUATION_MAX_QUERIES)",
    )
    evaluation_heartbeat_seconds: float = Field(
        default=_EVALUATION.heartbeat_seconds,
        gt=0,
        description="how often a gateway marks the evaluation runs it is running as alive",
    )
    evaluation_stale_seconds: float = Field(
        default=_EVALUATION.stale_seconds,
        gt=0,
        description="a running evaluation whose heartbeat is older is failed as interrupted (its gateway "
        "died); longer than the heartbeat interval",
    )

    # --- tenants' secrets and the WeCom channels (api/wecom.py) ---
    master_key: SecretStr | None = master_key_field(
        "KS_GATEWAY_", "the WeCom channels' secrets", required=False
    )
    master_key_previous: str = previous_master_keys_field("KS_GATEWAY_")
    egress: EgressPolicy = Field(
        default=EgressPolicy(),
        description="the egress guard of the calls to WeCom's API (allowed ports, allow-listed networks "
        "and hosts, time and size budgets)",
    )
    wecom_api_base: str = Field(
        default=DEFAULT_API_BASE, description="WeCom's server API (gettoken, message/send)"
    )
    wecom_timestamp_tolerance_seconds: float = Field(
        default=_WECOM.timestamp_tolerance_seconds,
        gt=0,
        description="how far a WeCom callback's timestamp may be from the gateway's clock (stale: refused)",
    )
    wecom_max_callback_bytes: int = Field(
        default=_WECOM.max_callback_bytes, ge=1024, description="largest WeCom callback body"
    )
    wecom_message_max_bytes: int = Field(
        default=_WECOM.message_max_bytes, ge=64, description="WeCom's limit on an application's message"
    )
    wecom_max_message_parts: int = Field(
        default=_WECOM.max_message_parts, ge=1, description="most messages one answer is sent in"
    )
    wecom_stream_max_bytes: int = Field(
        default=_WECOM.stream_max_bytes, ge=64, description="WeCom's limit on an AI bot's streamed message"
    )
    wecom_stream_ttl_seconds: float = Field(
        default=_WECOM.stream_ttl_seconds, gt=0, description="how long an AI bot's stream is kept"
    )
    wecom_max_streams: int = Field(
        default=_WECOM.max_streams, ge=1, description="most AI bot streams kept at once per process"
    )
    wecom_message_claim_seconds: float = Field(
        default=_WECOM.message_claim_seconds,
        gt=0,
        description="how long a WeCom message id is remembered (a message sent again makes no second turn)",
    )
    wecom_max_pending_turns: int = Field(
        default=_WECOM.max_pending_turns, ge=1, description="most WeCom turns running at once per process"
    )
    wecom_sources_heading: str = Field(
        default=_WECOM.sources_heading, max_length=40, description="heading over an answer's footnotes"
    )

    _split_lists = field_validator("allowed_hosts", "allowed_origins", mode="before")(_comma_separated)

    def key_ring(self) -> KeyRing | None:
        """The key ring of the channels' secrets (a passphrase one still needs its salt), or None."""
        return key_ring_of(self.master_key, self.master_key_previous)

    def wecom(self) -> WeComOptions:
        """The numbers of the WeCom channels."""
        return WeComOptions(
            timestamp_tolerance_seconds=self.wecom_timestamp_tolerance_seconds,
            max_callback_bytes=self.wecom_max_callback_bytes,
            message_max_bytes=self.wecom_message_max_bytes,
            max_message_parts=self.wecom_max_message_parts,
            stream_max_bytes=self.wecom_stream_max_bytes,
            stream_ttl_seconds=self.wecom_stream_ttl_seconds,
            max_streams=self.wecom_max_streams,
            message_claim_seconds=self.wecom_message_claim_seconds,
            max_pending_turns=self.wecom_max_pending_turns,
            sources_heading=self.wecom_sources_heading,
        )

    def evaluations(self) -> EvaluationOptions:
        """The numbers of the evaluation runs."""
        return EvaluationOptions(
            max_running_per_tenant=self.evaluation_max_running_per_tenant,
            batch_size=self.evaluation_batch_size,
            heartbeat_seconds=self.evaluation_heartbeat_seconds,
            stale_seconds=self.evaluation_stale_seconds,
        )

    def limits(self) -> Limits:
        """The body and per-caller limits of the HTTP API."""
        return Limits(
            max_body_bytes=self.max_body_bytes,
            max_upload_bytes=self.max_upload_bytes,
            max_upload_files=self.max_upload_files,
            body_idle_timeout_seconds=self.body_idle_timeout_seconds,
            body_min_bytes_per_second=self.body_min_bytes_per_second,
            caller_rate_limit_per_second=self.caller_rate_limit_per_second,
            caller_rate_limit_burst=self.caller_rate_limit_burst,
            caller_max_concurrent_requests=self.caller_max_concurrent_requests,
        )

    @field_validator("local_mode")
    @classmethod
    def _local_mode_only_on_loopback(cls, local_mode: bool, info: ValidationInfo) -> bool:
        host = info.data.get("http_host", "")
        if local_mode and not is_loopback(host):
            raise ValueError(
                f"local mode serves every caller without a token, so it binds to loopback only; "
                f"KS_GATEWAY_HTTP_HOST={host!r} is not a loopback address"
            )
        return local_mode

    @field_validator("evaluation_stale_seconds")
    @classmethod
    def _stale_after_a_missed_heartbeat(cls, stale: float, info: ValidationInfo) -> float:
        heartbeat = info.data.get("evaluation_heartbeat_seconds", _EVALUATION.heartbeat_seconds)
        if stale <= heartbeat:
            raise ValueError(
                f"must be longer than KS_GATEWAY_EVALUATION_HEARTBEAT_SECONDS ({heartbeat:g}), or a live "
                "run would be taken for an interrupted one"
            )
        return stale

    def host_allow_list(self) -> frozenset[str] | None:
        """The Host names to answer, lower-case; None: any."""
        if self.allowed_hosts:
            return frozenset(host.lower() for host in self.allowed_hosts)
        return frozenset(LOCAL_HOSTS) if self.local_mode else None

    def peer_addresses(self) -> dict[str, str]:
        return {
            "conversation": self.conversation_addr,
            "retrieval": self.retrieval_addr,
            "ingestion": self.ingestion_addr,
            "memory": self.memory_addr,
            "toolrunner": self.toolrunner_addr,
            "modelhub": self.modelhub_addr,
        }
