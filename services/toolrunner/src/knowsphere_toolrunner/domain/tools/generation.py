"""generate_pptx: a real PowerPoint file from an outline (python-pptx), stored as an artifact.

The deck is a title slide, then one title-and-bullets slide per outline slide (bullets may be nested
one level), with speaker notes when given. The file is stored for the caller (tenant, user, turn) and
downloaded through ``DownloadArtifact``; the model gets its id, name and slide count.
"""

from __future__ import annotations

import asyncio
import io
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pptx import Presentation

from knowsphere.toolrunner.v1.toolrunner_enums import ToolCategory
from knowsphere_contracts.vocabulary import ARTIFACT_DOWNLOAD_PREFIX
from knowsphere_toolrunner.domain.ports import StoredArtifact, ToolResultStore
from knowsphere_toolrunner.domain.tools.base import Artifact, BadArguments, ToolContext, ToolOutput, ToolSpec

PPTX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ARTIFACT_PREFIX = "art_"
MAX_TITLE_CHARS = 200
MAX_BULLET_CHARS = 500
MAX_NOTES_CHARS = 4000
# Layouts of python-pptx's default template.
TITLE_LAYOUT = 0
TITLE_AND_CONTENT_LAYOUT = 1
_UNSAFE_FILE_CHARS = re.compile(r"[^\w\- .()\u4e00-\u9fff]+")
# Characters XML 1.0 cannot hold (python-pptx would refuse the whole deck for one of them).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_REPEATS = re.compile(r"(?:_*\.{2,}_*|_{2,})")
MAX_FILE_STEM_CHARS = 80


def _bullet_schema(max_chars: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_chars}


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("", text)


def render_pptx(title: str, subtitle: str, slides: list[dict[str, Any]]) -> bytes:
    """The bytes of a .pptx: a title slide, then one slide per outline entry."""
    deck = Presentation()
    cover = deck.slides.add_slide(deck.slide_layouts[TITLE_LAYOUT])
    cover.shapes.title.text = _xml_text(title)
    if subtitle:
        cover.placeholders[1].text = _xml_text(subtitle)
    for outline in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT_LAYOUT])
        slide.shapes.title.text = _xml_text(outline["title"])
        body = slide.placeholders[1].text_frame
        first = True
        for bullet in outline.get("bullets", ()):
            for level, text in ((0, bullet["text"]), *((1, sub) for sub in bullet.get("sub_bullets", ()))):
                paragraph = body.paragraphs[0] if first else body.add_paragraph()
                paragraph.text = _xml_text(text)
                paragraph.level = level
                first = False
        if outline.get("notes"):
            slide.notes_slide.notes_text_frame.text = _xml_text(outline["notes"])
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def file_name_for(requested: str, title: str) -> str:
    """A plain file name: no path, no dot runs, at most ``MAX_FILE_STEM_CHARS`` before ``.pptx``."""
    stem = _UNSAFE_FILE_CHARS.sub("_", (requested or title).strip())
    stem = _REPEATS.sub("_", stem).strip("._ ")[:MAX_FILE_STEM_CHARS] or "presentation"
    return stem if stem.lower().endswith(".pptx") else f"{stem}.pptx"


class GeneratePptx:
    def __init__(
        self,
        store: ToolResultStore,
        *,
        max_slides: int,
        max_bullets: int,
        max_bytes: int,
        timeout: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._clock = clock
        self.spec = ToolSpec(
            name="generate_pptx",
            display_name="Generate PowerPoint",
            description=(
                "Create a PowerPoint (.pptx) file from an outline: a title slide, then one slide per entry "
                "with a title, bullet points (optionally one level of sub-bullets) and speaker notes. Write "
                "the content first (from the sources you found); the tool only lays it out. Returns the "
                "file's name and download link; tell the user the file is ready and give the link."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "title": _bullet_schema(MAX_TITLE_CHARS) | {"description": "Title of the deck."},
                    "subtitle": {"type": "string", "maxLength": MAX_TITLE_CHARS},
                    "file_name": {
                        "type": "string",
                        "maxLength": 100,
                        "description": "File name (default: the title).",
                    },
                    "slides": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": max_slides,
                        "items": {
                            "type": "object",
                            "properties": {
                                "title": _bullet_schema(MAX_TITLE_CHARS),
                                "bullets": {
                                    "type": "array",
                                    "maxItems": max_bullets,
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "text": _bullet_schema(MAX_BULLET_CHARS),
                                            "sub_bullets": {
                                                "type": "array",
                                                "maxItems": max_bullets,
                                                "items": _bullet_schema(MAX_BULLET_CHARS),
                                            },
                                        },
                                        "required": ["text"],
                                        "additionalProperties": False,
                                    },
                                },
                                "notes": {"type": "string", "maxLength": MAX_NOTES_CHARS},
                            },
                            "required": ["title"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["title", "slides"],
                "additionalProperties": False,
            },
            category=ToolCategory.GENERATION,
            timeout_seconds=timeout,
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        title = arguments["title"].strip()
        slides = arguments["slides"]
        # python-pptx is synchronous and CPU-bound: off the event loop.
        data = await asyncio.to_thread(render_pptx, title, arguments.get("subtitle", "").strip(), slides)
        if len(data) > self._max_bytes:
            raise BadArguments(f"the deck is {len(data)} bytes; the limit is {self._max_bytes}. Shorten it.")
        artifact = Artifact(
            artifact_id=f"{ARTIFACT_PREFIX}{uuid.uuid4().hex}",
            file_name=file_name_for(arguments.get("file_name", ""), title),
            content_type=PPTX_CONTENT_TYPE,
            size_bytes=len(data),
        )
        await self._store.put_artifact(
            StoredArtifact(
                artifact_id=artifact.artifact_id,
                tenant_id=context.tenant_id,
                user_id=context.user_id,
                session_id=context.session_id,
                turn_id=context.turn_id,
                tool_name=self.spec.name,
                file_name=artifact.file_name,
                content_type=artifact.content_type,
                size_bytes=artifact.size_bytes,
                create_time=self._clock(),
            ),
            data,
        )
        return ToolOutput(
            {
                "artifact_id": artifact.artifact_id,
                "file_name": artifact.file_name,
                "download_path": f"{ARTIFACT_DOWNLOAD_PREFIX}/{artifact.artifact_id}",
                "slide_count": len(slides) + 1,
                "size_bytes": artifact.size_bytes,
                "note": "Ready: give the user its name and download_path; do not paste its content.",
            },
            artifacts=[artifact],
        )
