"""CSV parser: detects the encoding and dialect and keeps the whole file as one table block."""

from __future__ import annotations

import csv as _csv
import io

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing.encoding import decode_text
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.table import normalize_rows, render_markdown_table

# How much of the file the dialect sniffer reads.
SNIFF_SAMPLE_CHARS = 64 * 1024
SNIFF_DELIMITERS = ",;\t|"


def parse_csv(data: bytes, file_name: str) -> ParsedDocument:
    text, encoding = decode_text(data, file_name)
    dialect: type[_csv.Dialect] | _csv.Dialect
    try:
        dialect = _csv.Sniffer().sniff(text[:SNIFF_SAMPLE_CHARS], delimiters=SNIFF_DELIMITERS)
    except _csv.Error:
        dialect = _csv.excel
    try:
        raw_rows = list(_csv.reader(io.StringIO(text, newline=""), dialect))
    except _csv.Error as exc:
        raise ParseError(f"{file_name} is not valid CSV: {exc}", code=ParseErrorCode.CORRUPT_FILE) from exc
    rows = normalize_rows(raw_rows)
    if not rows:
        raise ParseError(f"{file_name} has no rows", code=ParseErrorCode.EMPTY_DOCUMENT)
    table = Block(kind="table", text=render_markdown_table(rows), rows=rows)
    return ParsedDocument(
        blocks=[table],
        language=guess_language(text),
        metadata={
            "format": "csv",
            "encoding": encoding,
            "delimiter": dialect.delimiter,
            "rows": str(len(rows)),
        },
    )
