"""What each workflow stage leaves in the object store for the next one, and where.

Keys (all under the tenant, so deleting a tenant's prefix deletes everything):

- ``t/<tenant>/kb/<kb>/doc/<doc>/file``                          the uploaded file
- ``t/<tenant>/kb/<kb>/doc/<doc>/run-<run>/parsed.json``          the structured document
- ``t/<tenant>/kb/<kb>/doc/<doc>/run-<run>/chunks.json``          the chunks
- ``t/<tenant>/kb/<kb>/doc/<doc>/run-<run>/vectors-<model>-<n>``  vectors of chunk batch n

Artifacts are plain JSON (vectors as base64 float32), written atomically, so a resumed stage either
finds a whole artifact or none. They are not flushed to disk one by one: after a power cut a stage may
find its artifact missing and compute it again, which costs time, never correctness.
"""

from __future__ import annotations

import base64
import json
import re
from array import array
from collections.abc import Sequence
from typing import Any

from knowsphere_ingestion.domain.chunking import ChunkDraft
from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.storage.blobs import BlobStore

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _part(value: str) -> str:
    return _UNSAFE.sub("_", value)


def document_prefix(tenant: str, kb_id: str, document_id: str) -> str:
    return f"t/{_part(tenant)}/kb/{_part(kb_id)}/doc/{_part(document_id)}/"


def kb_prefix(tenant: str, kb_id: str) -> str:
    return f"t/{_part(tenant)}/kb/{_part(kb_id)}/"


def file_key(tenant: str, kb_id: str, document_id: str) -> str:
    return document_prefix(tenant, kb_id, document_id) + "file"


def run_prefix(tenant: str, kb_id: str, document_id: str, run_id: str) -> str:
    # One flat folder per run (no nested folders below it): making a folder is a slow system call on
    # some filesystems, and a small document's run writes only a few artifacts.
    return document_prefix(tenant, kb_id, document_id) + f"run-{_part(run_id)}/"


def vectors_key(run: str, model_id: str, batch: int) -> str:
    return f"{run}vectors-{_part(model_id)}-{batch:06d}"


async def put_json(blobs: BlobStore, key: str, value: Any) -> None:
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    await blobs.put_bytes(key, data, durable=False)  # recomputable


async def get_json(blobs: BlobStore, key: str) -> Any:
    return json.loads(await blobs.read(key))


def parsed_to_json(parsed: ParsedDocument) -> dict[str, Any]:
    return {
        "title": parsed.title,
        "page_count": parsed.page_count,
        "language": parsed.language,
        "metadata": parsed.metadata,
        "blocks": [
            {
                "kind": b.kind,
                "text": b.text,
                "heading_path": list(b.heading_path),
                "page": b.page,
                "level": b.level,
                "rows": [list(r) for r in b.rows],
            }
            for b in parsed.blocks
        ],
    }


def parsed_from_json(data: dict[str, Any]) -> ParsedDocument:
    return ParsedDocument(
        blocks=[
            Block(
                kind=b["kind"],
                text=b["text"],
                heading_path=tuple(b["heading_path"]),
                page=b["page"],
                level=b["level"],
                rows=tuple(tuple(r) for r in b["rows"]),
            )
            for b in data["blocks"]
        ],
        title=data["title"],
        page_count=data["page_count"],
        language=data["language"],
        metadata=dict(data["metadata"]),
    )


def chunks_to_json(chunks: Sequence[ChunkDraft]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "text": c.text,
            "parent_id": c.parent_id,
            "parent_text": c.parent_text,
            "position": c.position,
            "heading_path": list(c.heading_path),
            "page": c.page,
            "token_count": c.token_count,
            "metadata": c.metadata,
        }
        for c in chunks
    ]


def chunks_from_json(data: list[dict[str, Any]]) -> list[ChunkDraft]:
    return [
        ChunkDraft(
            id=c["id"],
            text=c["text"],
            parent_id=c["parent_id"],
            parent_text=c["parent_text"],
            position=c["position"],
            heading_path=tuple(c["heading_path"]),
            page=c["page"],
            token_count=c["token_count"],
            metadata=dict(c["metadata"]),
        )
        for c in data
    ]


def vectors_to_json(vectors: Sequence[Sequence[float]]) -> dict[str, Any]:
    dimension = len(vectors[0]) if vectors else 0
    flat = array("f", (value for vector in vectors for value in vector))
    return {"count": len(vectors), "dimension": dimension, "f32": base64.b64encode(flat.tobytes()).decode()}


def vectors_from_json(data: dict[str, Any]) -> list[list[float]]:
    flat = array("f")
    flat.frombytes(base64.b64decode(data["f32"]))
    dimension = int(data["dimension"])
    return [flat[i * dimension : (i + 1) * dimension].tolist() for i in range(int(data["count"]))]
