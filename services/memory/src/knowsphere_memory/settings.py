"""Settings of the memory service (environment variables prefixed ``KS_MEMORY_``).

Every number of the spec that the service applies is here with the spec's value as its default
(2 cited hits for "frequently consulted"); the others are limits that keep one call bounded.
"""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_MEMORY_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7414, ge=1, le=65535)
    database_url: str = Field(
        default="", description="SQLAlchemy async URL; empty = SQLite at <data_dir>/memory.db"
    )
    nats_url: str = Field(
        default="", description="NATS (JetStream) for turn-completed events; empty = no consumer"
    )
    modelhub_addr: str = Field(
        default="",
        description="host:port of modelhub (the model writing handoff documents); empty = compaction always"
        " uses the deterministic extract",
    )
    # --- long-term memory items -------------------------------------------------------------------
    memory_item_max_chars: int = Field(default=500, ge=1, description="characters per memory item")
    remember_max_items: int = Field(default=10, ge=1, description="items per Remember call")
    # --- lists --------------------------------------------------------------------------------------
    default_page_size: int = Field(default=50, ge=1)
    max_page_size: int = Field(default=200, ge=1)
    max_id_chars: int = Field(default=128, ge=1, description="session, message, turn and document ids")
    # --- working memory ----------------------------------------------------------------------------
    working_memory_max_qa: int = Field(
        default=8, ge=1, description="Q&A points kept per session (the oldest are dropped)"
    )
    working_memory_max_plan_steps: int = Field(default=50, ge=1)
    working_memory_max_text_chars: int = Field(
        default=4000, ge=1, description="characters per plan step, question or answer gist"
    )
    # --- session summary ---------------------------------------------------------------------------
    summary_max_bytes: int = Field(default=256 * 1024, ge=1, description="size of one handoff document")
    # --- handoff compaction (CompactSession) ------------------------------------------------------
    compaction_target_share: float = Field(
        default=0.30, gt=0, lt=1, description="share of the context window kept: newest messages + handoff"
    )
    compaction_handoff_share: float = Field(
        default=0.05, ge=0, lt=1, description="part of the target share left for the handoff document"
    )
    compaction_model_timeout_seconds: float = Field(
        default=60.0, gt=0, description="the model's whole answer; later, the deterministic extract is used"
    )
    compaction_deadline_reserve_seconds: float = Field(
        default=2.0, ge=0, description="left of the caller's deadline for the extract and the write"
    )
    compaction_transcript_max_tokens: int = Field(
        default=24_000, ge=1, description="tokens of archived transcript given to the model"
    )
    compaction_output_max_tokens: int = Field(default=2_000, ge=1, description="max_tokens of the model call")
    compaction_max_messages: int = Field(default=5_000, ge=1, description="messages per CompactSession")
    # --- document affinity ---------------------------------------------------------------------------
    frequent_min_hits: int = Field(
        default=2, ge=1, description="cited hits from which a document is frequently consulted"
    )
    max_cited_documents: int = Field(default=1000, ge=1, description="documents per recorded turn")
    # --- asker background ------------------------------------------------------------------------------
    background_token_budget: int = Field(
        default=400, ge=1, description="tokens of the rendered asker background at most"
    )
    background_max_profile_items: int = Field(default=10, ge=0)
    background_max_interest_items: int = Field(default=10, ge=0)
    background_max_frequent_documents: int = Field(default=10, ge=0)
    default_language: str = Field(default="en", description="language of the background without a hint")
    # --- turn-completed consumer ---------------------------------------------------------------------------
    consumer_durable_name: str = Field(default="memory-turn-completed", min_length=1)
    consumer_max_deliver: int = Field(
        default=5, ge=1, description="deliveries of one event before JetStream gives up on it"
    )
    consumer_ack_wait_seconds: float = Field(default=30.0, gt=0)

    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir}/memory.db"
