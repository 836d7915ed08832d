"""Office Open XML files (DOCX, PPTX, XLSX) are zip archives: refuse zip and XML bombs before opening one.

First the archive's index: member count, declared uncompressed size and compression ratio. Then every
XML part is decompressed once as a stream, a megabyte at a time and nothing kept, before the format's
library reads it whole into memory:

- a part that decompresses to more than ``ParseLimits.max_xml_bytes`` is refused (counted while
  decompressing, not taken from the zip header), so a small archive whose XML inflates to hundreds of
  megabytes under the ratio check is stopped at the limit;
- a part that declares XML entities (``<!ENTITY``, in UTF-8 or UTF-16) is refused. Office never writes
  entity declarations, and the libraries differ in what they do with them (openpyxl reads worksheets with
  the standard library's parser, which expands internal entities into cell text), so no entity's text or
  referenced file can reach the document.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.limits import ParseLimits, setting

MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_MEMBERS = 10_000
MAX_COMPRESSION_RATIO = 100
# Below this total the ratio is not checked: a small archive cannot exhaust memory.
RATIO_CHECK_MIN_BYTES = 1024 * 1024
# Decompressed bytes read from a part at a time while it is checked.
READ_CHUNK_BYTES = 1024 * 1024
_XML_NAME_SUFFIXES = (".xml", ".rels", ".vml")
_BYTE_ORDER_MARKS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_ENTITY_DECLARATIONS = tuple("<!ENTITY".encode(encoding) for encoding in ("utf-8", "utf-16-le", "utf-16-be"))
_OVERLAP = max(len(pattern) for pattern in _ENTITY_DECLARATIONS) - 1


def check_ooxml_archive(data: bytes, file_name: str, limits: ParseLimits | None = None) -> None:
    """Reject a file that is not a zip, whose declared contents exceed the size, count or ratio limits,
    or one of whose XML parts is over the size limit or declares entities.

    The declared sizes are binding: zipfile stops decompressing a member at its declared size (and fails
    its CRC check), so a member that lies about its size cannot inflate past it.
    """
    limits = ParseLimits() if limits is None else limits
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            _check_index(members, len(data), file_name)
            for member in members:
                if not member.is_dir():
                    _check_part(archive, member, file_name, limits)
    except ParseError:
        raise
    # Besides zip errors: RuntimeError for an encrypted member, NotImplementedError for an unknown
    # compression method, zlib.error or EOFError for a damaged stream.
    except (
        zipfile.BadZipFile,
        zlib.error,
        OSError,
        EOFError,
        ValueError,
        RuntimeError,
        NotImplementedError,
    ) as exc:
        raise ParseError(
            f"{file_name} is not a valid Office (zip) file: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc


def _check_index(members: list[zipfile.ZipInfo], size: int, file_name: str) -> None:
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
    if total > RATIO_CHECK_MIN_BYTES and total > MAX_COMPRESSION_RATIO * max(size, 1):
        raise ParseError(
            f"{file_name} has a compression ratio of {total // max(size, 1)}:1, "
            f"over the limit of {MAX_COMPRESSION_RATIO}:1",
            code=ParseErrorCode.ARCHIVE_TOO_LARGE,
        )


def _check_part(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, file_name: str, limits: ParseLimits
) -> None:
    """Decompress one part as a stream: an XML part must stay under the size limit and declare no entity."""
    named_xml = member.filename.lower().endswith(_XML_NAME_SUFFIXES)
    size = 0
    tail = b""
    with archive.open(member) as stream:
        while chunk := stream.read(READ_CHUNK_BYTES):
            if size == 0 and not (named_xml or _looks_like_xml(chunk)):
                return  # media (images, embedded fonts, binaries): bounded by the archive's total
            size += len(chunk)
            if size > limits.max_xml_bytes:
                raise ParseError(
                    f"{file_name}: its XML part {member.filename} decompresses to more than "
                    f"{limits.max_xml_bytes} bytes, the limit per XML part ({setting('max_xml_bytes')})",
                    code=ParseErrorCode.ARCHIVE_TOO_LARGE,
                )
            window = tail + chunk
            if any(pattern in window for pattern in _ENTITY_DECLARATIONS):
                raise ParseError(
                    f"{file_name}: its XML part {member.filename} declares XML entities (<!ENTITY>), "
                    "which Office files do not use; refused so that no entity's text or referenced "
                    "file is read into the document",
                    code=ParseErrorCode.CORRUPT_FILE,
                )
            tail = window[-_OVERLAP:]


def _looks_like_xml(start: bytes) -> bool:
    """Whether a part's first bytes are XML: ``<`` after an optional byte-order mark and white space,
    in UTF-8 or UTF-16."""
    return start.startswith(_BYTE_ORDER_MARKS) or start.lstrip(b" \t\r\n\x00").startswith(b"<")
