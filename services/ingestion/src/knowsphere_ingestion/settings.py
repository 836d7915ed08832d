"""Settings of the ingestion service (environment variables prefixed ``KS_INGESTION_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_INGESTION_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7413, ge=1, le=65535)
    temporal_address: str = Field(description="host:port of the Temporal frontend")
    temporal_namespace: str = "default"
    temporal_connect_timeout_seconds: float = Field(default=60.0, gt=0)
