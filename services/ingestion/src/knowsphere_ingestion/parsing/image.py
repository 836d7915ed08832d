"""Image parser: one ``image`` block per frame holding the text OCR reads in it (PNG, JPEG, BMP, TIFF, WebP).

Every frame's size is checked before its pixels are decoded, the first one from the header alone, so a
decompression bomb (a small file declaring a huge canvas, or a TIFF whose second frame is one behind a
small first) is refused without allocating it. An image with more frames than
``ParseLimits.max_ocr_pages`` is refused before OCR starts. A description of the picture itself is added
later in the ingestion workflow by a vision model. Without an OCR engine the blocks are kept with empty
text and ``metadata["ocr_missing_pages"]`` lists their frames.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, UnidentifiedImageError

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing import ocr
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language
from knowsphere_ingestion.parsing.limits import ParseLimits, setting

# The default pixel limit of one frame (``ParseLimits.max_image_pixels``, Pillow's own default).
MAX_IMAGE_PIXELS = ParseLimits().max_image_pixels
# Frames read from a multi-page image (TIFF, animated WebP); later frames are ignored.
MAX_IMAGE_FRAMES = 100


def parse_image(data: bytes, file_name: str, limits: ParseLimits | None = None) -> ParsedDocument:
    limits = ParseLimits() if limits is None else limits
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _bomb(f"{file_name} is too large", limits) from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ParseError(
            f"{file_name} is not a readable image: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc

    with image:
        width, height = image.size
        try:
            frame_count = min(getattr(image, "n_frames", 1), MAX_IMAGE_FRAMES)
        except (OSError, ValueError, EOFError) as exc:
            raise _truncated(file_name, exc) from exc
        if frame_count > limits.max_ocr_pages and ocr.ocr_available():
            raise ParseError(
                f"{file_name} has {frame_count} frames to read by OCR, over the limit of "
                f"{limits.max_ocr_pages} pages per document ({setting('max_ocr_pages')})",
                code=ParseErrorCode.TOO_MANY_OCR_PAGES,
            )
        # Every frame's size before any frame is decoded or read by OCR (seeking a TIFF frame reads only
        # its header), so a bomb behind good frames fails at once.
        for frame in range(frame_count):
            _check_frame(image, frame, frame_count, file_name, limits)
        blocks: list[Block] = []
        missing: list[int] = []
        for frame in range(frame_count):
            text = _read_frame(image, frame, frame_count, file_name, limits)
            if text is None:
                missing.append(frame + 1)
                text = ""
            blocks.append(Block(kind="image", text=text, page=frame + 1 if frame_count > 1 else 0))
        image_format = (image.format or "").lower()

    metadata = {"format": image_format or "image", "width": str(width), "height": str(height)}
    if missing:
        metadata["ocr_missing_pages"] = ",".join(map(str, missing))
    full_text = "\n".join(block.text for block in blocks)
    return ParsedDocument(
        blocks=blocks,
        page_count=frame_count if frame_count > 1 else 0,
        language=guess_language(full_text),
        metadata=metadata,
    )


def _too_large(frame: int, frame_count: int, file_name: str) -> str:
    return f"{file_name} is too large" + (f": frame {frame + 1}" if frame_count > 1 else "")


def _check_frame(
    image: Image.Image, frame: int, frame_count: int, file_name: str, limits: ParseLimits
) -> None:
    """Refuse a frame over the pixel limit from its declared size."""
    try:
        image.seek(frame)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _bomb(_too_large(frame, frame_count, file_name), limits) from exc
    except (OSError, ValueError, EOFError) as exc:
        raise _truncated(file_name, exc) from exc
    width, height = image.size
    if width * height > limits.max_image_pixels:
        separator = " is " if frame_count > 1 else ": "
        what = _too_large(frame, frame_count, file_name)
        raise _bomb(f"{what}{separator}{width}x{height} = {width * height} pixels", limits)


def _read_frame(
    image: Image.Image, frame: int, frame_count: int, file_name: str, limits: ParseLimits
) -> str | None:
    """Decode one frame (its size checked already) and read its text."""
    try:
        image.seek(frame)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _bomb(_too_large(frame, frame_count, file_name), limits) from exc
    except (OSError, ValueError, EOFError) as exc:
        raise _truncated(file_name, exc) from exc
    try:
        return _recognise(image)
    except Image.DecompressionBombError as exc:  # OCR's own check (ocr.recognize), should the limits differ
        raise _bomb(_too_large(frame, frame_count, file_name), limits) from exc


def _bomb(what: str, limits: ParseLimits) -> ParseError:
    return ParseError(
        f"{what}, over the limit of {limits.max_image_pixels} pixels ({setting('max_image_pixels')}); "
        "refused as a likely decompression bomb before its pixels were decoded",
        code=ParseErrorCode.DECOMPRESSION_BOMB,
    )


def _truncated(file_name: str, exc: Exception) -> ParseError:
    return ParseError(f"{file_name} is corrupt or truncated: {exc}", code=ParseErrorCode.CORRUPT_FILE)


def _recognise(image: Image.Image) -> str | None:
    """The image's text, paragraphs separated by blank lines; None when OCR is not available here."""
    if not ocr.ocr_available():
        return None
    try:
        return "\n\n".join(ocr.paragraphs(ocr.recognize(image)))
    except ocr.OcrUnavailable:
        return None
