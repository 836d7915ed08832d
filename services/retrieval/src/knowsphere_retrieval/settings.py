"""Settings of the retrieval service (environment variables prefixed ``KS_RETRIEVAL_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_RETRIEVAL_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7412, ge=1, le=65535)
