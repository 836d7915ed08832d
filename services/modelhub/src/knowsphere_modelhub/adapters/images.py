"""Chat images as inline base64, for providers that take no image URLs (and for data: URLs).

An image arrives as bytes, a ``data:`` URL or an http(s) URL. For providers whose table row says
``ImageInputFormat.BASE64_ONLY`` the URL is downloaded here (size cap, timeout, public hosts only); a
URL that cannot be fetched fails with IMAGE_URL_UNREACHABLE naming the message part
(``messages[1].content[0]``).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from knowsphere.modelhub.v1 import modelhub_pb2 as pb
from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere_modelhub.adapters.http import DownloadError, ProviderHttp
from knowsphere_modelhub.domain.errors import ModelError, invalid_input


@dataclass(frozen=True)
class InlineImage:
    mime_type: str
    data_b64: str

    @property
    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.data_b64}"


def sniff_image_type(data: bytes) -> str | None:
    """The MIME type from an image's first bytes (the formats vision models accept)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"BM"):
        return "image/bmp"
    return None


def _too_large(field: str, size: int | None, max_bytes: int) -> ModelError:
    shown = f"{size} bytes" if size is not None else "the image"
    return invalid_input(field, f"{shown} is over the image limit of {max_bytes} bytes")


def parse_data_url(url: str, *, field: str, max_bytes: int) -> InlineImage:
    header, sep, payload = url.partition(",")
    if not sep or not header.startswith("data:") or not header.endswith(";base64"):
        raise invalid_input(field, "a data: URL must be data:<mime>;base64,<data>")
    mime = header.removeprefix("data:").removesuffix(";base64")
    if len(payload) * 3 // 4 > max_bytes:
        raise _too_large(field, len(payload) * 3 // 4, max_bytes)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid_input(field, "the data: URL is not valid base64") from exc
    mime = mime or sniff_image_type(raw) or ""
    if not mime.startswith("image/"):
        raise invalid_input(field, f"not an image type: {mime or 'unknown'}")
    return InlineImage(mime, payload)


def from_bytes(data: bytes, mime_type: str, *, field: str, max_bytes: int) -> InlineImage:
    if len(data) > max_bytes:
        raise _too_large(field, len(data), max_bytes)
    mime = mime_type or sniff_image_type(data)
    if not mime:
        raise invalid_input(field, "mime_type is required with image bytes of an unknown format")
    return InlineImage(mime, base64.b64encode(data).decode("ascii"))


async def inline_image(
    http: ProviderHttp, image: pb.ImageInput, *, field: str, max_bytes: int
) -> InlineImage:
    """The image as base64, downloading an http(s) URL first."""
    source = image.WhichOneof("source")
    if source == "data":
        return from_bytes(image.data, image.mime_type, field=field, max_bytes=max_bytes)
    if source != "url" or not image.url:
        raise invalid_input(field, "an image needs a url or data")
    url = image.url
    if url.startswith("data:"):
        return parse_data_url(url, field=field, max_bytes=max_bytes)
    if not url.startswith(("http://", "https://")):
        raise invalid_input(field, "an image URL must be http(s) or data:")
    try:
        body, content_type = await http.download(url, max_bytes=max_bytes)
    except DownloadError as exc:
        if exc.too_large:
            raise _too_large(field, None, max_bytes) from exc
        raise ModelError(ModelErrorCode.IMAGE_URL_UNREACHABLE, exc.reason, field=field) from exc
    declared = content_type.split(";")[0].strip().lower()
    mime = declared if declared.startswith("image/") else sniff_image_type(body)
    if not mime:
        raise ModelError(
            ModelErrorCode.IMAGE_URL_UNREACHABLE,
            f"{url[:200]} did not return an image (Content-Type {declared or 'none'})",
            field=field,
        )
    return InlineImage(mime, base64.b64encode(body).decode("ascii"))
