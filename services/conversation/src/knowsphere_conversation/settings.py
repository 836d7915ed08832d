"""Settings of the conversation service (environment variables prefixed ``KS_CONVERSATION_``).

``MASTER_KEY`` (no prefix; the same as modelhub's) encrypts the API keys of external orchestrators, and
``MASTER_KEY_PREVIOUS`` (comma-separated) lists keys older ones may still be encrypted with, for
rotation (:mod:`knowsphere_runtime.secrets`). Without it the service runs, but an external orchestrator
with a key cannot be saved. The egress guard's policy for calls to external applications is a nested
group: ``KS_CONVERSATION_EGRESS__ALLOW_NETWORKS='["10.0.0.0/8"]'``,
``KS_CONVERSATION_EGRESS__ALLOWED_PORTS='[80,443,8080]'`` …
"""

from typing import Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from knowsphere_egress import EgressPolicy
from knowsphere_runtime.secrets import master_key_field, previous_master_keys_field
from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="KS_CONVERSATION_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    grpc_port: int = Field(default=7411, ge=1, le=65535)
    nats_url: str = Field(description="NATS server carrying chat requests and turn events")
    retrieval_addr: str = Field(description="host:port of the retrieval service")
    memory_addr: str = Field(description="host:port of the memory service")
    toolrunner_addr: str = Field(description="host:port of the toolrunner service")
    modelhub_addr: str = Field(description="host:port of the modelhub service")
    retrieval_top_k: int = Field(default=8, ge=1, le=100, description="passages per search without a model")
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL of the sessions (postgresql+asyncpg://…); empty: SQLite in the data dir",
    )
    cancel_wait_seconds: float = Field(
        default=2.0, gt=0, le=30, description="how long CancelTurn waits for the turn to stop"
    )
    checkpoint_url: str = Field(
        default="",
        description="PostgreSQL URL of the checkpoints (postgresql://…); empty: SQLite in the data dir",
    )
    turn_ack_wait_seconds: float = Field(
        default=30.0,
        ge=3.0,
        le=600.0,
        description="a turn whose replica stops reporting progress this long is delivered again",
    )
    max_session_wait_seconds: float = Field(
        default=300.0,
        ge=1.0,
        le=3600.0,
        description="a message waiting this long for its session's previous turn is refused (session_busy)",
    )
    max_concurrent_turns: int = Field(default=16, ge=1, le=1024, description="turns one replica runs at once")
    stm_keep_turns: int = Field(
        default=8, ge=0, le=100, description="finished turns sent verbatim to the model, at most"
    )
    stm_slide_turns: int = Field(
        default=1,
        ge=1,
        le=50,
        description="turns the history window moves by once it holds stm_keep_turns (at most half of "
        "them; 1: every turn), so the provider's prompt cache keeps the history that many turns",
    )
    max_tool_rounds: int = Field(
        default=8, ge=1, le=50, description="tool-calling rounds before a forced answer"
    )
    extract_sentences: int = Field(
        default=5, ge=1, le=50, description="sentences quoted without a chat model"
    )
    extract_chars: int = Field(
        default=1200, ge=100, le=20_000, description="characters quoted without a model"
    )
    master_key: SecretStr | None = master_key_field(
        "KS_CONVERSATION_", "the external orchestrators' API keys", required=False
    )
    master_key_previous: str = previous_master_keys_field("KS_CONVERSATION_")
    egress: EgressPolicy = Field(
        default=EgressPolicy(),
        description="the egress guard of calls to external orchestrators' applications (allowed ports, "
        "allow-listed networks and hosts, connect timeout, bytes per answer)",
    )
    external_answer_seconds: float = Field(
        default=600.0,
        gt=0,
        le=3600,
        description="the longest an external orchestrator's application may take for a whole answer",
    )

    @field_validator("master_key", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: Any) -> Any:
        # MASTER_KEY= (empty) reads as not set, not as a too-short key.
        return None if isinstance(value, str) and not value.strip() else value

    def sqlalchemy_url(self) -> str:
        """The sessions' database: ``database_url``, or SQLite in the data dir."""
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir / 'conversation.db'}"
