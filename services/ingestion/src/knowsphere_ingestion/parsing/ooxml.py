"""Office Open XML files (DOCX, PPTX, XLSX) are zip archives: refuse zip bombs before opening one.

Only the archive's index is read; a file over a limit fails with a ParseError naming the limit.
"""

from __future__ import annotations

import io
import zipfile

from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode

MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_MEMBERS = 10_000
MAX_COMPRESSION_RATIO = 100
# Below this total the ratio is not checked: a small archive cannot exhaust memory.
RATIO_CHECK_MIN_BYTES = 1024 * 1024


def check_ooxml_archive(data: bytes, file_name: str) -> None:
    """Reject a file that is not a zip or whose declared contents exceed the size, count or ratio limits.

    Only the central directory is read. The declared sizes are binding: zipfile stops decompressing a
    member at its declared size, so a member that lies about its size cannot inflate past it.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise ParseError(
            f"{file_name} is not a valid Office (zip) file: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc
    if len(members) > MAX_MEMBERS:
        raise ParseError(
            f"{file_name} has {len(members)} zip members, over the limit of {MAX_MEMBERS}",
            code=ParseErrorCode.ARCHIVE_TOO_LARGE,
        )
    total = sum(member.file_size for member in members)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ParseError(
            f"{file_name} uncompresses to {total} bytes, over the limit of {MAX_UNCOMPRESSED_BYTES} bytes",
            code=ParseErrorCode.ARCHIVE_TOO_LARGE,
        )
    if total > RATIO_CHECK_MIN_BYTES and total > MAX_COMPRESSION_RATIO * max(len(data), 1):
        raise ParseError(
            f"{file_name} has a compression ratio of {total // max(len(data), 1)}:1, "
            f"over the limit of {MAX_COMPRESSION_RATIO}:1",
            code=ParseErrorCode.ARCHIVE_TOO_LARGE,
        )
