"""PPTX parser (python-pptx): one section per slide, headed "Slide N: title"; page is the slide number.

Text frames become paragraphs, tables stay tables (grouped shapes are walked), speaker notes follow the
slide's content as paragraphs.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

from pptx import Presentation
from pptx.enum.shapes import MSO_SHAPE_TYPE
from pptx.shapes.base import BaseShape
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.limits import ParseLimits
from knowsphere_ingestion.parsing.ooxml import check_ooxml_archive
from knowsphere_ingestion.parsing.table import normalize_rows, render_markdown_table


def parse_pptx(data: bytes, file_name: str, limits: ParseLimits | None = None) -> ParsedDocument:
    check_ooxml_archive(data, file_name, limits)
    try:
        presentation = Presentation(io.BytesIO(data))
        blocks, slide_count = _read_slides(presentation)
        core_title = presentation.core_properties.title or ""
    except ParseError:
        raise
    except Exception as exc:  # python-pptx raises many types (KeyError, lxml errors, ...) on corrupt parts
        raise ParseError(
            f"{file_name} is not a valid PPTX file: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc

    first_title = next((b.heading_path[0].split(": ", 1)[-1] for b in blocks if b.kind == "heading"), "")
    full_text = "\n".join(block.text for block in blocks)
    return ParsedDocument(
        blocks=blocks,
        title=core_title.strip() or first_title,
        page_count=slide_count,
        language=guess_language(full_text),
        metadata={"format": "pptx", "slides": str(slide_count)},
    )


def _read_slides(presentation: object) -> tuple[list[Block], int]:
    blocks: list[Block] = []
    slides = list(presentation.slides)  # type: ignore[attr-defined]
    for number, slide in enumerate(slides, start=1):
        title_shape = slide.shapes.title
        title = title_shape.text_frame.text.strip() if title_shape is not None else ""
        title = " ".join(title.split())
        heading = f"Slide {number}: {title}" if title else f"Slide {number}"
        path = (heading,)
        blocks.append(Block(kind="heading", text=title or heading, heading_path=path, page=number, level=1))
        for shape in _walk(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            if isinstance(shape, GraphicFrame) and shape.has_table:
                rows = normalize_rows([[cell.text for cell in row.cells] for row in shape.table.rows])
                if rows:
                    blocks.append(
                        Block(
                            kind="table",
                            text=render_markdown_table(rows),
                            heading_path=path,
                            page=number,
                            rows=rows,
                        )
                    )
            elif shape.has_text_frame:
                for paragraph in shape.text_frame.paragraphs:  # type: ignore[attr-defined]
                    text = paragraph.text.strip()
                    if text:
                        blocks.append(Block(kind="paragraph", text=text, heading_path=path, page=number))
        if slide.has_notes_slide:
            notes_frame = slide.notes_slide.notes_text_frame
            notes = notes_frame.text.strip() if notes_frame is not None else ""
            if notes:
                blocks.append(Block(kind="paragraph", text=notes, heading_path=path, page=number))
    return blocks, len(slides)


def _walk(shapes: Iterable[BaseShape]) -> Iterator[BaseShape]:
    for shape in shapes:
        if isinstance(shape, GroupShape) or shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _walk(shape.shapes)  # type: ignore[attr-defined]
        else:
            yield shape
