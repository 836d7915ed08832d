"""Settings of the ingestion service and its workers (environment variables prefixed ``KS_INGESTION_``).

The gRPC API (``python -m knowsphere_ingestion``) and the workflow workers
(``python -m knowsphere_ingestion.worker``) read the same settings: they share the document database
and the object store, and each uses the parts it needs.
"""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from knowsphere_ingestion.parsing.limits import ParseLimits
from knowsphere_runtime.settings import ServiceSettings

MIB = 1024 * 1024
_PARSE_LIMITS = ParseLimits()


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="KS_INGESTION_", extra="ignore", frozen=True)

    grpc_port: int = Field(default=7413, ge=1, le=65535)
    temporal_address: str = Field(description="host:port of the Temporal frontend")
    temporal_namespace: str = "default"
    temporal_connect_timeout_seconds: float = Field(default=60.0, gt=0)
    task_queue: str = Field(default="knowsphere-ingestion", description="Temporal task queue of the workers")
    nats_url: str = Field(description="NATS server for progress events")
    retrieval_addr: str = Field(description="host:port of retrieval (indexing)")
    modelhub_addr: str = Field(description="host:port of modelhub (embeddings, VLM, ASR, LLM)")

    # Storage: empty = the embedded defaults under data_dir.
    database_url: str = Field(default="", description="knowledge bases and documents; empty = SQLite")
    blob_store_url: str = Field(
        default="",
        description="object store: file:///path, or s3://KEY:SECRET@host:port/bucket?secure=false; "
        "empty = the S3 settings below when s3_endpoint is set, else files under data_dir/blobs",
    )
    s3_endpoint: str = Field(default="", description="MinIO / S3 endpoint, e.g. http://minio:9000")
    s3_bucket: str = "knowsphere-documents"
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_region: str = ""

    # Upload limits.
    max_file_size_bytes: int = Field(default=100 * MIB, ge=1)
    upload_chunk_size_bytes: int = Field(default=1 * MIB, ge=4096, le=3 * MIB)
    max_name_length: int = Field(default=128, ge=1)
    max_description_length: int = Field(default=2000, ge=0)
    max_metadata_entries: int = Field(default=32, ge=0)
    max_files_per_upload: int = Field(
        default=1000, ge=1, description="files one UploadDocuments stream may carry"
    )
    batch_max_documents: int = Field(
        default=64,
        ge=1,
        le=1000,
        description="documents of one upload ingested together by one workflow (they share embedding "
        "and indexing calls)",
    )
    max_page_size: int = Field(default=200, ge=1)
    default_page_size: int = Field(default=50, ge=1)
    max_watch_documents: int = Field(default=500, ge=1)

    # Chunking defaults and limits (tokens).
    min_chunk_size_tokens: int = Field(default=32, ge=8)
    max_chunk_size_tokens: int = Field(default=2048, ge=64)
    chunk_sizes_fit_model: bool = Field(
        default=False,
        description="default chunk sizes fit the embedding model's input window (the vector sees the "
        "whole chunk; BM25 sees smaller chunks): off, as hybrid search measured better with the plain "
        "defaults (make bench-retrieval --chunking fit)",
    )

    # Workers.
    worker_max_concurrent_workflows: int = Field(default=64, ge=1)
    worker_max_concurrent_activities: int = Field(default=64, ge=1)
    # Parsing: each document in a child process of its own, within a budget (parsing/budget.py); a
    # document over a budget fails at once, its reason naming the setting.
    parse_processes: int = Field(
        default=2, ge=1, description="documents a worker parses at once, each in a child process"
    )
    parse_cpu_seconds: float = Field(
        default=_PARSE_LIMITS.cpu_seconds,
        gt=0,
        description="CPU time of one parse (whole seconds, rounded up)",
    )
    parse_memory_bytes: int = Field(
        default=_PARSE_LIMITS.memory_bytes,
        ge=512 * MIB,
        description="address space of the process parsing one document (RLIMIT_AS)",
    )
    parse_wall_seconds: float = Field(
        default=_PARSE_LIMITS.wall_seconds,
        gt=0,
        description="elapsed time after which a parse is killed; under the parse activity's 30 minutes",
    )
    parse_max_ocr_pages: int = Field(
        default=_PARSE_LIMITS.max_ocr_pages, ge=0, description="pages or frames one document may have OCR'd"
    )
    parse_max_output_chars: int = Field(
        default=_PARSE_LIMITS.max_output_chars,
        ge=1,
        description="characters of text one parsed document may hold",
    )
    parse_max_xml_bytes: int = Field(
        default=_PARSE_LIMITS.max_xml_bytes,
        ge=1,
        description="decompressed size of one XML part of an Office file",
    )
    parse_max_image_pixels: int = Field(
        default=_PARSE_LIMITS.max_image_pixels, ge=1, description="pixels of one image frame"
    )
    embed_batch_size: int = Field(default=32, ge=1, le=256, description="texts per Embed call")
    embed_batch_wait_ms: int = Field(
        default=50, ge=0, description="how long the embed batcher waits to fill a batch across documents"
    )
    embed_calls_in_flight: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Embed calls a worker keeps open at once: with two, the model finds the next batch "
        "waiting as it finishes one",
    )
    index_batch_size: int = Field(default=128, ge=1, description="chunks per IndexChunks call")
    activity_max_attempts: int = Field(default=5, ge=1)
    local_activities: bool = Field(
        default=True,
        description="run the stages as local activities (no server round trip per stage); false = "
        "regular activities, each scheduled through the Temporal server",
    )
    activity_heartbeat_seconds: float = Field(
        default=30.0, gt=0, description="a worker silent this long is presumed dead; its stage moves on"
    )
    embed_timeout_seconds: float = Field(default=300.0, gt=0)
    peer_outage_wait_seconds: float = Field(
        default=600.0,
        ge=0,
        description="how long a stage's call waits out retrieval or modelhub being unavailable before "
        "the stage fails (the workflow then retries the stage, up to activity_max_attempts)",
    )

    def parse_limits(self) -> ParseLimits:
        """The budget of one parse, from the ``parse_*`` settings."""
        return ParseLimits(
            cpu_seconds=self.parse_cpu_seconds,
            memory_bytes=self.parse_memory_bytes,
            wall_seconds=self.parse_wall_seconds,
            max_ocr_pages=self.parse_max_ocr_pages,
            max_output_chars=self.parse_max_output_chars,
            max_xml_bytes=self.parse_max_xml_bytes,
            max_image_pixels=self.parse_max_image_pixels,
        )
