"""The structured document every parser produces and the chunker consumes.

A document is a list of blocks in reading order. Each block knows its kind, its text, the heading
path above it and the page it starts on; tables keep their rows so they stay tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

BlockKind = Literal["heading", "paragraph", "table", "list_item", "code", "image"]


@dataclass(frozen=True)
class Block:
    kind: BlockKind
    text: str  # for tables: the rows rendered as Markdown; for images: OCR text / description
    heading_path: tuple[str, ...] = ()  # headings from the root to this block's section, outermost first
    page: int = 0  # 1-based page the block starts on; 0 when the format has no pages
    level: int = 0  # heading level (1 = top) for headings
    rows: tuple[tuple[str, ...], ...] = ()  # table cells, first row the header when there is one


@dataclass(frozen=True)
class ParsedDocument:
    blocks: list[Block]
    title: str = ""
    page_count: int = 0
    language: str = ""  # BCP-47 guess ("zh", "en"); empty when unknown
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(block.text for block in self.blocks if block.text)
