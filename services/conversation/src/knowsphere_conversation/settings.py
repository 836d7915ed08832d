"""Settings of the conversation service (environment variables prefixed ``KS_CONVERSATION_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_CONVERSATION_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7411, ge=1, le=65535)
    nats_url: str = Field(description="NATS server carrying chat requests and turn events")
    retrieval_addr: str = Field(description="host:port of the retrieval service")
    memory_addr: str = Field(description="host:port of the memory service")
    toolrunner_addr: str = Field(description="host:port of the toolrunner service")
    modelhub_addr: str = Field(description="host:port of the modelhub service")
    retrieval_top_k: int = Field(default=8, ge=1, le=100)
