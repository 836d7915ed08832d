"""Settings of the gateway (environment variables prefixed ``KS_GATEWAY_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_GATEWAY_", extra="ignore", frozen=True)

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
    chat_turn_timeout_seconds: float = Field(
        default=120.0, gt=0, description="longest wait for the next event of a turn"
    )
    health_check_timeout_seconds: float = Field(default=2.0, gt=0)
    # Until API tokens exist, a single-tenant local mode: every caller acts as this identity,
    # unless the gateway sits behind a proxy that authenticates and sets the identity headers.
    default_tenant_id: str = "local"
    default_user_id: str = "local"
    trust_identity_headers: bool = Field(
        default=False,
        description="accept X-KS-Tenant-Id / X-KS-User-Id from an authenticating proxy",
    )

    def peer_addresses(self) -> dict[str, str]:
        return {
            "conversation": self.conversation_addr,
            "retrieval": self.retrieval_addr,
            "ingestion": self.ingestion_addr,
            "memory": self.memory_addr,
            "toolrunner": self.toolrunner_addr,
            "modelhub": self.modelhub_addr,
        }
