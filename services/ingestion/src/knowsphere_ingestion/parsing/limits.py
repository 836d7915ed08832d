"""The budget of one parse: what the parsers may read, OCR and return, and the resources of the process
that parses the file.

The parsers check the content limits themselves (``max_xml_bytes`` in ``ooxml.py``, ``max_image_pixels``
in ``image.py``, ``max_ocr_pages`` in ``pdf.py`` and ``image.py``, ``max_output_chars`` in
:func:`knowsphere_ingestion.parsing.parse`); the process limits (CPU, memory, wall clock) are enforced by
:mod:`knowsphere_ingestion.parsing.budget`, which runs each parse in a child process. Every limit is a
worker setting, ``KS_INGESTION_PARSE_<FIELD>``, and a failure over a limit names that setting.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
GIB = 1024 * MIB

SETTING_PREFIX = "KS_INGESTION_PARSE_"


def setting(field: str) -> str:
    """The environment variable that sets the ``ParseLimits`` field ``field``."""
    return SETTING_PREFIX + field.upper()


@dataclass(frozen=True)
class ParseLimits:
    cpu_seconds: float = 1800.0
    """CPU time of the parse's process (all its threads; RLIMIT_CPU, whole seconds rounded up). OCR
    takes about 5 CPU seconds per scanned page on the 2-core build machine."""
    memory_bytes: int = 4 * GIB
    """Address space of the parse's process (RLIMIT_AS). Mapped, not resident, memory: OCR of a scanned
    page peaks at about 2.1 GB of address space (1 GB resident), plain formats at 0.2–0.3 GB."""
    wall_seconds: float = 1200.0
    """Elapsed time after which the parse's process is killed; below the parse activity's 30 minutes, so
    a slow file fails with this reason instead of timing out and being retried."""
    max_ocr_pages: int = 200
    """Pages (PDF) or frames (images) without a text layer one document may have read by OCR; a document
    with more is refused before OCR starts."""
    max_output_chars: int = 20_000_000
    """Characters of text one parsed document may hold."""
    max_xml_bytes: int = 64 * MIB
    """Decompressed size of one XML part of an Office file, measured while decompressing it."""
    max_image_pixels: int = 89_478_485
    """Pixels of one image frame (Pillow's own default); a larger frame is refused before decoding."""
