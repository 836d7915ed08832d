"""Settings of the toolrunner service (environment variables prefixed ``KS_TOOLRUNNER_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_TOOLRUNNER_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7415, ge=1, le=65535)
