"""Settings of the modelhub service (environment variables prefixed ``KS_MODELHUB_``).

``MASTER_KEY`` (no prefix) encrypts provider API keys: 32 random bytes in base64 or base64url
(``openssl rand -base64 32``), or a passphrase of at least 16 characters, which is stretched with scrypt
(see :mod:`~knowsphere_modelhub.domain.secrets`). ``MASTER_KEY_PREVIOUS`` (comma-separated) lists keys
that older records may still be encrypted with, for rotation. The egress guard's policy
is a nested group: ``KS_MODELHUB_EGRESS__ALLOW_NETWORKS='["10.0.0.0/8"]'``,
``KS_MODELHUB_EGRESS__ALLOWED_PORTS='[80,443,8080]'`` …
"""

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from knowsphere_egress import EgressPolicy
from knowsphere_runtime.secrets import master_key_field, previous_master_keys_field
from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="KS_MODELHUB_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    grpc_port: int = Field(default=7416, ge=1, le=65535)
    master_key: SecretStr = master_key_field("KS_MODELHUB_", "the providers' API keys", required=True)
    master_key_previous: str = previous_master_keys_field("KS_MODELHUB_")
    database_url: str = Field(
        default="",
        description="SQLAlchemy async URL; empty = SQLite at <data_dir>/modelhub.db",
    )
    max_embed_batch: int = Field(default=256, ge=1, description="texts per Embed call")
    max_rerank_documents: int = Field(default=500, ge=1, description="documents per Rerank call")
    max_decide_labels: int = Field(default=26, ge=2, description="labels per Decide call")
    max_image_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    max_audio_bytes: int = Field(default=25 * 1024 * 1024, ge=1)
    image_download_timeout_seconds: float = Field(
        default=0.0, ge=0, description="one budget per image download; 0 = provider_timeout_seconds"
    )
    egress: EgressPolicy = Field(
        default=EgressPolicy(),
        description="the egress guard of calls to tenants' models (their base URLs) and of image downloads "
        "(allowed ports, allow-listed networks and hosts)",
    )
    provider_timeout_seconds: float = Field(default=60.0, gt=0)
    provider_max_retries: int = Field(default=3, ge=0, description="retries on 429, 5xx and timeouts")
    provider_backoff_seconds: float = Field(
        default=0.5, gt=0, description="first retry delay, doubled each time"
    )
    provider_concurrency: int = Field(default=16, ge=1, description="concurrent calls per provider")
    local_embedding_enabled: bool = Field(
        default=True, description="register the built-in CPU embedding model"
    )
    local_embedding_batch: int = Field(default=32, ge=1)
    local_embedding_threads: int = Field(default=0, ge=0, description="0 = one per available CPU")
    model_cache_dir: Path | None = Field(
        default=None,
        description="where built-in models keep what they prepare on first load (multilingual-e5-small's "
        "dequantised weights, ~85 MB); unset = <data_dir>/models",
    )
    default_language: str = Field(default="en", description="language of error messages without a hint")
    nats_url: str = Field(default="", description="NATS server for model-change events; empty = no events")

    def model_cache(self) -> Path:
        return self.model_cache_dir or self.data_dir / "models"

    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir}/modelhub.db"
