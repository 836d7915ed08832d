"""The artifacts of one ingest run: what each stage leaves in the object store for the next one.

The keys and encodings are :mod:`knowsphere_ingestion.artifacts`'; this adds what the stages need on
top: the run's prefix, an absent artifact as a retryable failure, and a document's chunks in parts of
``vectors_per_artifact`` whose vectors are stored per part and model (so an embed stage resumes at the
part it was on).

The stages of one workflow usually run one after another in the same worker, so what a stage wrote
is also kept in memory for a while (bounded, least recently used dropped first): the next stage finds
it there instead of reading it back and decoding it — a round trip to S3 per artifact. The object
store stays the truth: every artifact is written there first, and a stage resumed by another worker
reads it from there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from knowsphere_ingestion import artifacts
from knowsphere_ingestion.domain.chunking import ChunkDraft
from knowsphere_ingestion.domain.document import ParsedDocument
from knowsphere_ingestion.stages.errors import FailureCode, retryable
from knowsphere_ingestion.storage.blobs import BlobNotFound, BlobStore
from knowsphere_ingestion.workflows import IngestInput

V = TypeVar("V")

RECENT_BYTES = 64 * 1024 * 1024
"""About how much memory the artifacts kept for the next stage may take."""


class _Recent(Generic[V]):
    """Values by blob key, at most about ``max_bytes`` of them; the least recently used go first."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[str, tuple[V, int]] = OrderedDict()

    def get(self, key: str) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: str, value: V, size: int) -> None:
        self.drop(key)
        if size > self._max_bytes:
            return
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self._max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]

    def drop_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            self.drop(key)


def _text_bytes(texts: Sequence[str]) -> int:
    return sum(len(text) for text in texts) + 100 * len(texts)  # plus the objects around each text


class RunArtifacts:
    def __init__(
        self, blobs: BlobStore, *, vectors_per_artifact: int = 64, recent_bytes: int = RECENT_BYTES
    ) -> None:
        self.blobs = blobs
        self.vectors_per_artifact = vectors_per_artifact
        self._parsed: _Recent[ParsedDocument] = _Recent(recent_bytes // 4)
        self._chunks: _Recent[tuple[ChunkDraft, ...]] = _Recent(recent_bytes // 4)
        # Vectors are kept encoded (base64 float32, as stored): a fifth of the size of float lists.
        self._vectors: _Recent[dict[str, Any]] = _Recent(recent_bytes // 2)

    @staticmethod
    def prefix(job: IngestInput) -> str:
        return artifacts.run_prefix(job.tenant_id, job.knowledge_base_id, job.document_id, job.run_id)

    async def delete(self, job: IngestInput) -> None:
        """Drops everything the run stored (it failed, or another run superseded it)."""
        prefix = self.prefix(job)
        for recent in (self._parsed, self._chunks, self._vectors):
            recent.drop_prefix(prefix)
        await self.blobs.delete_prefix(prefix)

    # --- parsed document ---------------------------------------------------------------------------

    async def find_parsed(self, job: IngestInput) -> ParsedDocument | None:
        """The run's parsed document; None when it has not been stored yet."""
        key = self.prefix(job) + "parsed.json"
        parsed = self._parsed.get(key)
        if parsed is not None:
            return parsed
        try:
            data = await artifacts.get_json(self.blobs, key)
        except BlobNotFound:
            return None
        return artifacts.parsed_from_json(data)

    async def parsed(self, job: IngestInput) -> ParsedDocument:
        parsed = await self.find_parsed(job)
        if parsed is None:
            raise retryable(FailureCode.ARTIFACT_MISSING, "the parsed document of this run is missing")
        return parsed

    async def put_parsed(self, job: IngestInput, parsed: ParsedDocument) -> None:
        key = self.prefix(job) + "parsed.json"
        await artifacts.put_json(self.blobs, key, artifacts.parsed_to_json(parsed))
        self._parsed.put(key, parsed, _text_bytes([b.text for b in parsed.blocks]))

    # --- chunks ------------------------------------------------------------------------------------

    async def chunks(self, job: IngestInput) -> list[ChunkDraft]:
        key = self.prefix(job) + "chunks.json"
        chunks = self._chunks.get(key)
        if chunks is not None:
            return list(chunks)
        try:
            data = await artifacts.get_json(self.blobs, key)
        except BlobNotFound as error:
            raise retryable(
                FailureCode.ARTIFACT_MISSING, "the chunks of this run are missing; chunking again"
            ) from error
        return artifacts.chunks_from_json(data)

    async def put_chunks(self, job: IngestInput, chunks: Sequence[ChunkDraft]) -> None:
        key = self.prefix(job) + "chunks.json"
        await artifacts.put_json(self.blobs, key, artifacts.chunks_to_json(chunks))
        self._chunks.put(key, tuple(chunks), _text_bytes([c.text + c.parent_text for c in chunks]))

    def parts(self, chunks: Sequence[ChunkDraft]) -> list[Sequence[ChunkDraft]]:
        """The chunks in the parts whose vectors are stored together, in order."""
        per = self.vectors_per_artifact
        return [chunks[start : start + per] for start in range(0, len(chunks), per)]

    # --- vectors -----------------------------------------------------------------------------------

    def _vectors_key(self, job: IngestInput, model_id: str, part: int) -> str:
        return artifacts.vectors_key(self.prefix(job), model_id, part)

    async def has_vectors(self, job: IngestInput, model_id: str, part: int) -> bool:
        key = self._vectors_key(job, model_id, part)
        return self._vectors.get(key) is not None or await self.blobs.exists(key)

    async def put_vectors(
        self, job: IngestInput, model_id: str, part: int, vectors: Sequence[Sequence[float]]
    ) -> None:
        key = self._vectors_key(job, model_id, part)
        encoded = artifacts.vectors_to_json(vectors)
        await artifacts.put_json(self.blobs, key, encoded)
        self._vectors.put(key, encoded, len(encoded["f32"]) + 100)

    async def find_vectors(self, job: IngestInput, model_id: str, part: int) -> list[list[float]] | None:
        """The stored vectors of one part with one model; None when they have not been stored yet."""
        key = self._vectors_key(job, model_id, part)
        encoded = self._vectors.get(key)
        if encoded is None:
            try:
                encoded = await artifacts.get_json(self.blobs, key)
            except BlobNotFound:
                return None
        return artifacts.vectors_from_json(encoded)
