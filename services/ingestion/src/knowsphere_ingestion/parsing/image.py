"""Image parser: one ``image`` block per frame holding the text OCR reads in it (PNG, JPEG, BMP, TIFF, WebP).

Pillow reads only the header before the size check, so a decompression bomb (a small file declaring a huge
canvas) is refused before its pixels are decoded. A description of the picture itself is added later in
the ingestion workflow by a vision model. Without an OCR engine the blocks are kept with empty text and
``metadata["ocr_missing_pages"]`` lists their frames.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, UnidentifiedImageError

from knowsphere_ingestion.domain.document import Block, ParsedDocument
from knowsphere_ingestion.parsing import ocr
from knowsphere_ingestion.parsing.errors import ParseError, ParseErrorCode
from knowsphere_ingestion.parsing.language import guess_language

# Pillow's own default: an image with more pixels than this is refused as a likely decompression bomb.
MAX_IMAGE_PIXELS = 89_478_485
# Frames read from a multi-page image (TIFF, animated WebP); later frames are ignored.
MAX_IMAGE_FRAMES = 100


def parse_image(data: bytes, file_name: str) -> ParsedDocument:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ParseError(
            f"{file_name} is too large: over the limit of {MAX_IMAGE_PIXELS} pixels",
            code=ParseErrorCode.DOCUMENT_TOO_LARGE,
        ) from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ParseError(
            f"{file_name} is not a readable image: {exc}", code=ParseErrorCode.CORRUPT_FILE
        ) from exc

    with image:
        width, height = image.size
        if width * height > MAX_IMAGE_PIXELS:
            raise ParseError(
                f"{file_name} is too large: {width}x{height} = {width * height} pixels, "
                f"over the limit of {MAX_IMAGE_PIXELS} pixels",
                code=ParseErrorCode.DOCUMENT_TOO_LARGE,
            )
        frame_count = min(getattr(image, "n_frames", 1), MAX_IMAGE_FRAMES)
        blocks: list[Block] = []
        missing: list[int] = []
        for frame in range(frame_count):
            try:
                image.seek(frame)
                image.load()
            except (OSError, ValueError, EOFError) as exc:
                raise ParseError(
                    f"{file_name} is corrupt or truncated: {exc}", code=ParseErrorCode.CORRUPT_FILE
                ) from exc
            text = _recognise(image)
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


def _recognise(image: Image.Image) -> str | None:
    """The image's text, paragraphs separated by blank lines; None when OCR is not available here."""
    if not ocr.ocr_available():
        return None
    try:
        return "\n\n".join(ocr.paragraphs(ocr.recognize(image)))
    except ocr.OcrUnavailable:
        return None
