"""Settings of the toolrunner service (environment variables prefixed ``KS_TOOLRUNNER_``).

Every number the spec gives (8,000 characters, 10 items, 10,000 and 2,000 characters, 3 attempts) is a
setting here with that default, never a literal in the code.
"""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_TOOLRUNNER_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7415, ge=1, le=65535)

    # Peers.
    retrieval_addr: str = Field(description="host:port of retrieval (the knowledge-base tools)")
    modelhub_addr: str = Field(description="host:port of modelhub (distilling very large tool results)")

    # Store of externalised results and artifacts.
    database_url: str = Field(
        default="", description="tool_result_refs and artifacts; empty = SQLite in the data dir"
    )

    # Execution.
    max_attempts: int = Field(
        default=3, ge=1, description="attempts of a failing tool call, the first included"
    )
    retry_backoff_seconds: float = Field(default=0.2, ge=0, description="pause before the second attempt")
    tool_timeout_seconds: float = Field(default=30.0, gt=0, description="time limit of one attempt")
    knowledge_tool_timeout_seconds: float = Field(
        default=20.0, gt=0, description="time limit of one attempt of a knowledge-base tool"
    )
    generation_tool_timeout_seconds: float = Field(
        default=60.0, gt=0, description="time limit of one attempt of generate_pptx"
    )

    # Externalisation and distillation (spec: 8,000 characters, 10 items, 10,000 → 2,000 characters).
    externalise_over_chars: int = Field(default=8000, ge=1)
    externalise_over_items: int = Field(default=10, ge=0, description="top-level array items")
    distil_over_chars: int = Field(default=10000, ge=1)
    distil_target_chars: int = Field(default=2000, ge=100)
    distil_model_id: str = Field(default="", description="chat model for distilling; empty = tenant default")
    distil_timeout_seconds: float = Field(default=60.0, gt=0)
    distil_max_input_chars: int = Field(
        default=200_000, ge=1000, description="characters of a result sent to the distilling model"
    )
    summary_preview_chars: int = Field(
        default=600,
        ge=50,
        description="characters of a stored result shown as its summary when not distilled",
    )
    stored_page_chars: int = Field(
        default=16000, ge=1000, description="characters get_stored_data returns per page"
    )

    # Knowledge tools.
    doc_retrieval_default_top_k: int = Field(default=8, ge=1)
    doc_retrieval_max_top_k: int = Field(default=20, ge=1)
    list_chunks_max_selectors: int = Field(default=20, ge=1)
    list_chunks_max_neighbours: int = Field(default=5, ge=0)
    source_snippet_chars: int = Field(default=200, ge=0, description="excerpt kept with a citable source")

    # Generation and artifacts.
    pptx_max_slides: int = Field(default=50, ge=1)
    pptx_max_bullets: int = Field(default=12, ge=1, description="bullets per slide")
    artifact_max_bytes: int = Field(default=50 * 1024 * 1024, ge=1024)
    artifact_chunk_bytes: int = Field(
        default=64 * 1024, ge=1024, description="bytes per DownloadArtifact message"
    )

    def result_store_url(self) -> str:
        """The SQLAlchemy URL of the result store: ``database_url``, else SQLite in the data dir."""
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir}/toolrunner.db"
