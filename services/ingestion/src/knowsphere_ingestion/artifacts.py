"""What each workflow stage leaves in the object store for the next one, and where.

Keys (all under the tenant, so deleting a tenant's prefix deletes everything):

- ``t/<tenant>/kb/<kb>/doc/<doc>/file``                          the uploaded file
- ``t/<tenant>/kb/<kb>/doc/<doc>/run-<run>/parsed.json``          the structured document
- ``t/<tenant>/kb/<kb>/doc/<doc>/run-<run>/chunks.json``          the chunks
- ``t/<tenant>/kb/<kb>/doc/<doc>/run-<run>/vectors-<model>-<n>``  vectors of chunk batch n

Each part is an injective encoding of the id (letters, digits, ``_`` and ``-`` as they are; any other
character as ``.`` and the hex of its UTF-8 bytes, ``.`` itself included), so tenants ``acme:eu``,
``acme@eu``, ``acme.eu`` and ``acme_eu`` never share a prefix. Keys written before this encoding used
``_`` for every other character; deletions clear those legacy prefixes too (:func:`kb_prefixes`,
:func:`document_prefixes`).

Artifacts are plain JSON (vectors as base64 float32), written atomically, so a resumed stage either
finds a whole artifact or none. They are not flushed to disk one by one: after a power cut a stage may
find its artifact missing and compute it again, which costs time, never correctness.
"""

from __future__ import annotations

import base64
import json
import re
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from knowsphere_ingestion.domain.chunking import ChunkDraft
from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.storage.blobs import BlobStore

_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_LEGACY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _part(value: str) -> str:
    """``value`` as one key segment, injectively (never ``..``, never a ``/``)."""
    return "".join(ch if ch in _KEPT else "".join(f".{b:02x}" for b in ch.encode()) for ch in value)


def _legacy_part(value: str) -> str:
    return _LEGACY_UNSAFE.sub("_", value)


def document_prefix(tenant: str, kb_id: str, document_id: str, *, part: Callable[[str], str] = _part) -> str:
    return f"t/{part(tenant)}/kb/{part(kb_id)}/doc/{part(document_id)}/"


def kb_prefix(tenant: str, kb_id: str, *, part: Callable[[str], str] = _part) -> str:
    return f"t/{part(tenant)}/kb/{part(kb_id)}/"


def kb_prefixes(tenant: str, kb_id: str) -> list[str]:
    """Every prefix a knowledge base's blobs may be under: today's and the legacy encoding's."""
    return list(dict.fromkeys([kb_prefix(tenant, kb_id), kb_prefix(tenant, kb_id, part=_legacy_part)]))


def document_prefixes(tenant: str, kb_id: str, document_id: str) -> list[str]:
    """Every prefix a document's blobs may be under: today's and the legacy encoding's."""
    return list(
        dict.fromkeys(
            [
                document_prefix(tenant, kb_id, document_id),
                document_prefix(tenant, kb_id, document_id, part=_legacy_part),
            ]
        )
    )


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
