"""XLSX parser (openpyxl, read-only, cached values): one table block per sheet under a sheet-name heading.

Empty rows and trailing empty columns are dropped; cells are rendered as text (whole floats without ".0",
dates in ISO form).
"""

from __future__ import annotations

import datetime as dt
import io

import openpyxl

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.limits import ParseLimits
from knowsphere_ingestion.parsing.ooxml import check_ooxml_archive
from knowsphere_ingestion.parsing.table import normalize_rows, render_markdown_table


def parse_xlsx(data: bytes, file_name: str, limits: ParseLimits | None = None) -> ParsedDocument:
    check_ooxml_archive(data, file_name, limits)
    blocks: list[Block] = []
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many types (KeyError, lxml errors, ...) on corrupt parts
        raise ParseError(
            f"{file_name} is not a valid XLSX file: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc
    try:
        sheet_names: list[str] = list(workbook.sheetnames)
        for sheet in workbook.worksheets:
            raw = [[_cell_text(value) for value in row] for row in sheet.iter_rows(values_only=True)]
            rows = normalize_rows(raw)
            if not rows:
                continue
            name = str(sheet.title)
            blocks.append(Block(kind="heading", text=name, heading_path=(name,), level=1))
            blocks.append(
                Block(kind="table", text=render_markdown_table(rows), heading_path=(name,), rows=rows)
            )
    except Exception as exc:
        raise ParseError(
            f"{file_name} is not a valid XLSX file: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc
    finally:
        workbook.close()

    full_text = "\n".join(block.text for block in blocks)
    return ParsedDocument(
        blocks=blocks,
        language=guess_language(full_text),
        metadata={"format": "xlsx", "sheets": str(len(sheet_names))},
    )


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return str(value)
