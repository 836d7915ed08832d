"""Optical character recognition for scanned PDF pages and images, Chinese and English.

The engine is RapidOCR on ONNX Runtime (``rapidocr-onnxruntime``), whose PP-OCR models ship inside the
wheel, so nothing is downloaded at run time. OCR is optional: ``ocr_available()`` says whether the engine
can be imported, and callers record the pages they could not read instead of failing.

Loading the models takes a while, so the engine is created once, on first use, and shared by every
caller in the process; a lock makes the first load and each recognition safe from several threads.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

# Recognised lines below this confidence are noise (speckles, rules, stamps) more often than text.
MIN_LINE_CONFIDENCE = 0.5
# Images are scaled down so that their longer side is at most this many pixels before recognition:
# the detector works on a smaller image anyway, and this bounds memory for huge scans.
MAX_OCR_IMAGE_SIDE = 4000
# A line wraps on from the one above when the gap between them is under this share of the line height,
# it is not indented by more than one line height, and the line above reached the text's right edge
# (within this many line heights).
MAX_PARAGRAPH_LINE_GAP = 1.5
MAX_WRAPPED_LINE_SHORTFALL = 1.5
# Two boxes are on the same line when their vertical overlap is at least this share of the smaller box.
MIN_SAME_LINE_OVERLAP = 0.5


class OcrUnavailable(RuntimeError):
    """The OCR engine is not installed (or its native runtime cannot load) in this environment."""


@dataclass(frozen=True)
class OcrLine:
    """One recognised text box; coordinates are image pixels, origin top-left."""

    text: str
    left: float
    top: float
    right: float
    bottom: float
    confidence: float


_engine: Any = None
_engine_error: str | None = None
_lock = threading.Lock()


def _load_engine() -> Any:
    """Return the shared engine, creating it on first use; raise OcrUnavailable when it cannot load."""
    global _engine, _engine_error
    with _lock:
        if _engine is None and _engine_error is None:
            try:
                from rapidocr_onnxruntime import RapidOCR

                _engine = RapidOCR()
            except Exception as exc:  # ImportError, or a native library (onnxruntime, OpenCV) missing
                _engine_error = f"{type(exc).__name__}: {exc}"
        if _engine is None:
            raise OcrUnavailable(f"OCR engine rapidocr-onnxruntime is not usable ({_engine_error})")
        return _engine


def ocr_available() -> bool:
    """True when the OCR engine loads here (the first call loads it)."""
    try:
        _load_engine()
    except OcrUnavailable:
        return False
    return True


def recognize(image: Image.Image) -> list[OcrLine]:
    """Recognise the text lines of an image, in reading order (top to bottom, then left to right).

    An image over Pillow's pixel limit (``Image.MAX_IMAGE_PIXELS``, which the parse's process sets to
    ``ParseLimits.max_image_pixels``) raises ``Image.DecompressionBombError`` before it is converted or
    scaled, which would allocate copies of it.
    """
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and image.width * image.height > limit:
        raise Image.DecompressionBombError(
            f"{image.width}x{image.height} = {image.width * image.height} pixels, over the limit of "
            f"{limit} pixels"
        )
    engine = _load_engine()
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # Transparent pixels become white, not black, so dark text on a transparent canvas stays visible.
        rgba = image.convert("RGBA")
        rgb = Image.new("RGB", rgba.size, (255, 255, 255))
        rgb.paste(rgba, mask=rgba.getchannel("A"))
    else:
        rgb = image.convert("RGB")
    scale = 1.0
    longest = max(rgb.size)
    if longest > MAX_OCR_IMAGE_SIDE:
        scale = MAX_OCR_IMAGE_SIDE / longest
        rgb = rgb.resize((max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))))
    # RapidOCR expects OpenCV's BGR channel order.
    pixels = np.ascontiguousarray(np.asarray(rgb)[:, :, ::-1])
    with _lock:
        result, _ = engine(pixels)
    lines: list[OcrLine] = []
    for box, text, confidence in result or []:
        cleaned = str(text).strip()
        if not cleaned or float(confidence) < MIN_LINE_CONFIDENCE:
            continue
        xs = [float(point[0]) / scale for point in box]
        ys = [float(point[1]) / scale for point in box]
        lines.append(OcrLine(cleaned, min(xs), min(ys), max(xs), max(ys), float(confidence)))
    return _reading_order(lines)


def _reading_order(lines: list[OcrLine]) -> list[OcrLine]:
    """Sort boxes top to bottom, then left to right among boxes that share a line."""
    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda item: (item.top + item.bottom) / 2):
        if rows and _same_line(rows[-1][-1], line):
            rows[-1].append(line)
        else:
            rows.append([line])
    return [line for row in rows for line in sorted(row, key=lambda item: item.left)]


def _same_line(a: OcrLine, b: OcrLine) -> bool:
    overlap = min(a.bottom, b.bottom) - max(a.top, b.top)
    smaller = min(a.bottom - a.top, b.bottom - b.top)
    return smaller > 0 and overlap / smaller >= MIN_SAME_LINE_OVERLAP


def paragraphs(lines: list[OcrLine]) -> list[str]:
    """Join recognised lines into paragraphs: boxes on one line, then lines separated by small gaps.

    Vertical text (a box much taller than wide) stays a paragraph of its own.
    """
    rows: list[list[OcrLine]] = []
    for line in lines:
        if rows and _same_line(rows[-1][-1], line) and not (_vertical(line) or _vertical(rows[-1][-1])):
            rows[-1].append(line)
        else:
            rows.append([line])
    result: list[str] = []
    current = ""
    previous: list[OcrLine] | None = None
    # Where most lines end: the text's right edge, ignoring the odd margin note further right.
    ends = sorted(row[-1].right for row in rows)
    right_edge = ends[(len(ends) - 1) * 3 // 4] if ends else 0.0
    for row in rows:
        text = _row_text(row)
        if previous is not None and current and _continues(previous, row, right_edge):
            current = _join_words([current, text])
        else:
            if current:
                result.append(current)
            current = text
        previous = row
    if current:
        result.append(current)
    return result


def _vertical(line: OcrLine) -> bool:
    return line.bottom - line.top > 2 * (line.right - line.left)


def _row_text(row: list[OcrLine]) -> str:
    """Boxes on one line; boxes far apart (columns, table cells) stay apart even in Chinese."""
    text = row[0].text
    for before, after in itertools.pairwise(row):
        if after.left - before.right > min(before.bottom - before.top, after.bottom - after.top):
            text += " " + after.text
        else:
            text = _join_words([text, after.text])
    return text


def _continues(previous: list[OcrLine], row: list[OcrLine], right_edge: float) -> bool:
    height = max(line.bottom - line.top for line in previous)
    if any(_vertical(line) for line in previous + row):
        return False
    gap = min(line.top for line in row) - max(line.bottom for line in previous)
    if gap >= MAX_PARAGRAPH_LINE_GAP * height:
        return False
    if row[0].left > previous[0].left + height:  # an indented first line
        return False
    return previous[-1].right >= right_edge - MAX_WRAPPED_LINE_SHORTFALL * height


def is_cjk(ch: str) -> bool:
    """True for a CJK ideograph or a full-width punctuation mark, which join without spaces."""
    return (
        "\u4e00" <= ch <= "\u9fff"
        or "\u3400" <= ch <= "\u4dbf"
        or "\u3000" <= ch <= "\u303f"
        or "\uff00" <= ch <= "\uffef"
    )


def _join_words(parts: list[str]) -> str:
    """Join text pieces with a space, except where either side is Chinese."""
    joined = ""
    for part in parts:
        if joined and not (is_cjk(joined[-1]) or is_cjk(part[0])):
            joined += " "
        joined += part
    return joined
