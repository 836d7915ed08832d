"""Plain-text parser: detects the encoding and splits paragraphs on blank lines."""

from __future__ import annotations

import re

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing.encoding import decode_text
from knowsphere_ingestion.parsing.language import guess_language

_BLANK_LINES = re.compile(r"\n[ \t\u3000]*\n")


def parse_text(data: bytes, file_name: str) -> ParsedDocument:
    text, encoding = decode_text(data, file_name)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    paragraphs = [part.strip() for part in _BLANK_LINES.split(text)]
    blocks = [Block(kind="paragraph", text=part) for part in paragraphs if part]
    return ParsedDocument(
        blocks=blocks,
        language=guess_language(text),
        metadata={"format": "txt", "encoding": encoding},
    )
