"""Images in a chat message: found in the text (image links and ``data:image/…`` URLs) or given
beside it, and turned into the model's image parts.

An image link is an http(s) URL whose path ends in an image extension; a data URL must be base64 and
an image MIME type. The text keeps its words with the images taken out ("analyse this
http://x/a.png" → "analyse this"). Images are passed on by reference (URL or data URL): modelhub
fetches or decodes them, through the egress guard, when a model needs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from knowsphere.modelhub.v1 import modelhub_pb2 as mpb

IMAGE_EXTENSIONS: Final = ("png", "jpg", "jpeg", "gif", "webp", "bmp", "tif", "tiff")
_LINK = re.compile(
    r"https?://[^\s<>\"'()\[\]]+?\.(?:"
    + "|".join(IMAGE_EXTENSIONS)
    + r")(?:\?[^\s<>\"'()\[\]]*?)?(?=$|[\s)\]>\"',，。])",
    re.IGNORECASE,
)
_DATA = re.compile(r"data:(image/[a-z0-9.+-]+);base64,([A-Za-z0-9+/=]+)", re.IGNORECASE)


@dataclass(frozen=True)
class ImageRef:
    """An image of a message: a URL, or a data URL's MIME type and base64 payload."""

    url: str = ""
    mime_type: str = ""
    base64: str = ""

    @property
    def as_text(self) -> str:
        """How the image is kept in the message history (a data URL's bytes are not)."""
        return self.url or f"[image {self.mime_type}]"

    def to_input(self) -> mpb.ImageInput:
        if self.url:
            return mpb.ImageInput(url=self.url)
        return mpb.ImageInput(url=f"data:{self.mime_type};base64,{self.base64}")


def parse_image(value: str) -> ImageRef:
    """One image given beside the message (a URL or a data URL); ValueError saying what is wrong."""
    data = _DATA.fullmatch(value.strip())
    if data:
        return ImageRef(mime_type=data.group(1).lower(), base64=data.group(2))
    if re.fullmatch(r"https?://\S+", value.strip()):
        return ImageRef(url=value.strip())
    raise ValueError("an image is an http(s) URL or a data:image/…;base64 URL")


def split_images(text: str) -> tuple[str, list[ImageRef]]:
    """The message's text without its image links and data URLs, and the images, in order."""
    found: list[tuple[int, ImageRef]] = []
    for match in _DATA.finditer(text):
        found.append((match.start(), ImageRef(mime_type=match.group(1).lower(), base64=match.group(2))))
    for match in _LINK.finditer(text):
        found.append((match.start(), ImageRef(url=match.group(0))))
    cleaned = " ".join(_LINK.sub(" ", _DATA.sub(" ", text)).split())
    return cleaned, [ref for _, ref in sorted(found, key=lambda item: item[0])]


__all__ = ["IMAGE_EXTENSIONS", "ImageRef", "parse_image", "split_images"]
