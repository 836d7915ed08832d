"""Settings of the toolrunner service (environment variables prefixed ``KS_TOOLRUNNER_``; nested groups
with ``__``, e.g. ``KS_TOOLRUNNER_SANDBOX__WALL_TIME_SECONDS``).

Every number the spec gives (8,000 characters, 10 items, 10,000 and 2,000 characters, 3 attempts) is a
setting here with that default, never a literal in the code.

Checks across settings are field validators on the later field, never model validators: an error of a
model validator carries the whole input (secrets included) into the start-up message, one of a field
only that field's value (hidden for keys and tokens).
"""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict

from knowsphere_egress import EgressPolicy
from knowsphere_runtime.settings import ServiceSettings
from knowsphere_toolrunner.domain.workspace import WorkspaceLimits
from knowsphere_toolrunner.sandbox.limits import SandboxLimits
from knowsphere_toolrunner.sandbox.pod_settings import PodSandboxSettings
from knowsphere_toolrunner.skills.store import SkillLimits


class McpServer(BaseModel):
    """One MCP server whose tools are offered as ``<name>__<tool>``: over streamable HTTP (``url``),
    or over stdio (``command``), the server then running inside the sandbox for each call."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,31}$",
        description="prefix of its tools' names: letters, digits and '-', at most 32",
    )
    transport: Literal["streamable_http", "stdio"] = Field(
        default="streamable_http", description="streamable_http (url) or stdio (command, in the sandbox)"
    )
    url: str = Field(
        default="",
        validate_default=True,
        description="the streamable HTTP endpoint, e.g. https://crm.example/mcp",
    )
    bearer_token: SecretStr = Field(default=SecretStr(""), description="sent as Authorization: Bearer …")
    command: tuple[str, ...] = Field(
        default=(),
        validate_default=True,
        description="stdio: the program inside the sandbox (an absolute path) and its arguments",
    )
    env: dict[str, str] = Field(default_factory=dict, description="stdio: the server's environment")
    files_dir: Path | None = Field(
        default=None, description="stdio: a host folder whose files the server sees read-only in /skill"
    )
    read_only_paths: tuple[str, ...] = Field(
        default=(),
        description="stdio: host paths the server sees read-only at the same place (e.g. its packages)",
    )

    @field_validator("url", mode="after")
    @classmethod
    def _url_is_given(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.data.get("transport") == "streamable_http":
            raise ValueError("required for streamable_http")
        return value

    @field_validator("command", mode="after")
    @classmethod
    def _command_is_given(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if info.data.get("transport") == "stdio" and (not value or not value[0].startswith("/")):
            raise ValueError(
                "required for stdio: the program's absolute path inside the sandbox, then its arguments"
            )
        return value


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="KS_TOOLRUNNER_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

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

    # Skills and the sandbox (nested: KS_TOOLRUNNER_SANDBOX__WALL_TIME_SECONDS, KS_TOOLRUNNER_SKILLS__…).
    sandbox: SandboxLimits = SandboxLimits()
    sandbox_backend: Literal["bwrap", "pod"] = Field(
        default="bwrap", description="bwrap: in this process's machine; pod: one pod per run on Kubernetes"
    )
    pod_sandbox: PodSandboxSettings = PodSandboxSettings()
    skills: SkillLimits = SkillLimits()
    # Deep agents' session workspaces (KS_TOOLRUNNER_WORKSPACE__MAX_FILE_BYTES, …).
    workspace: WorkspaceLimits = WorkspaceLimits()
    skill_script_timeout_seconds: float = Field(
        default=45.0,
        gt=0,
        validate_default=True,
        description="time limit of one execute_skill_script call; above the sandbox's wall time, so the "
        "sandbox's own limit ends a run and its output comes back",
    )
    skill_output_inline_bytes: int = Field(
        default=64 * 1024, ge=0, description="ExecuteSkillScript returns output files up to this size inline"
    )
    skill_read_text_chars: int = Field(
        default=100_000, ge=1000, description="characters of a skill file read_file returns"
    )
    skills_page_size: int = Field(default=50, ge=1, description="ListSkills page size when none is asked")
    skills_max_page_size: int = Field(default=200, ge=1, description="largest ListSkills page")

    # Web tools; every request through the egress guard (nested: KS_TOOLRUNNER_EGRESS__ALLOW_HOSTS …).
    egress: EgressPolicy = EgressPolicy()
    web_tool_timeout_seconds: float = Field(
        default=40.0, gt=0, description="time limit of one attempt of web_search or web_fetch"
    )
    web_fetch_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1024, description="largest page fetched")
    web_fetch_timeout_seconds: float = Field(
        default=20.0, gt=0, description="one budget per fetch: resolution, connects, redirects, body"
    )
    web_fetch_max_chars: int = Field(default=40_000, ge=1000, description="characters of a page returned")
    web_fetch_max_pdf_pages: int = Field(default=50, ge=1, description="PDF pages read")
    web_search_provider: Literal["", "searxng", "tavily"] = Field(
        default="", description="empty = none: web_search answers how to configure one"
    )
    searxng_url: str = Field(
        default="", validate_default=True, description="base URL of a SearXNG instance with JSON enabled"
    )
    tavily_api_key: SecretStr = Field(
        default=SecretStr(""), validate_default=True, description="Tavily API key (tvly-…)"
    )
    tavily_url: str = Field(default="https://api.tavily.com", description="Tavily API base URL")
    web_search_default_results: int = Field(default=5, ge=1)
    web_search_max_results: int = Field(default=10, ge=1, validate_default=True)
    web_search_timeout_seconds: float = Field(
        default=15.0, gt=0, validate_default=True, description="budget of one search request"
    )
    web_search_max_response_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)

    # MCP servers' tools (KS_TOOLRUNNER_MCP_SERVERS='[{"name": "crm", "url": "https://…/mcp"}]').
    mcp_servers: tuple[McpServer, ...] = ()
    mcp_tool_timeout_seconds: float = Field(default=60.0, gt=0, description="time limit of one MCP tool call")
    mcp_discovery_timeout_seconds: float = Field(
        default=15.0, gt=0, description="time to list one server's tools at start-up"
    )
    mcp_max_tools_per_server: int = Field(default=100, ge=1, description="tools taken from one server")
    mcp_stdio_max_message_bytes: int = Field(
        default=4 * 1024 * 1024, gt=0, description="longest message line a stdio MCP server may write"
    )

    @field_validator("skill_script_timeout_seconds", mode="after")
    @classmethod
    def _script_timeout_covers_the_sandbox(cls, value: float, info: ValidationInfo) -> float:
        sandbox = info.data.get("sandbox")
        if sandbox is not None and value <= sandbox.wall_time_seconds:
            raise ValueError(
                f"must be above sandbox.wall_time_seconds ({sandbox.wall_time_seconds:g}), or a run's "
                "output is lost when the call times out"
            )
        return value

    @field_validator("searxng_url", mode="after")
    @classmethod
    def _searxng_needs_its_url(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.data.get("web_search_provider") == "searxng":
            raise ValueError("required when web_search_provider is searxng")
        return value

    @field_validator("tavily_api_key", mode="after")
    @classmethod
    def _tavily_needs_its_key(cls, value: SecretStr, info: ValidationInfo) -> SecretStr:
        if not value.get_secret_value() and info.data.get("web_search_provider") == "tavily":
            raise ValueError("required when web_search_provider is tavily")
        return value

    @field_validator("web_search_max_results", mode="after")
    @classmethod
    def _default_results_within_the_maximum(cls, value: int, info: ValidationInfo) -> int:
        default = info.data.get("web_search_default_results")
        if default is not None and default > value:
            raise ValueError(f"must be at least web_search_default_results ({default})")
        return value

    @field_validator("web_search_timeout_seconds", mode="after")
    @classmethod
    def _web_tool_timeout_covers_the_budgets(cls, value: float, info: ValidationInfo) -> float:
        tool = info.data.get("web_tool_timeout_seconds")
        fetch = info.data.get("web_fetch_timeout_seconds", 0.0)
        if tool is not None and tool <= max(value, fetch):
            raise ValueError(
                f"web_tool_timeout_seconds ({tool:g}) must be above this and web_fetch_timeout_seconds "
                f"({fetch:g}), or a slow fetch is cut by the tool's time limit instead of its own budget"
            )
        return value

    def result_store_url(self) -> str:
        """The SQLAlchemy URL of the result store: ``database_url``, else SQLite in the data dir."""
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir}/toolrunner.db"
