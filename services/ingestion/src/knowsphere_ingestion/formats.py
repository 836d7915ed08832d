"""The file types uploads accept, and a check that the bytes are what the extension says.

The extension decides how a file is parsed. Before anything is stored, the first bytes are compared
with the extension, so a PDF renamed to .docx or an executable renamed to .txt is refused at upload
with a message naming both, instead of failing later in the parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"})
AUDIO_EXTENSIONS = frozenset({".mp3", ".wav", ".m4a", ".ogg", ".flac", ".webm"})


@dataclass(frozen=True)
class FileType:
    extension: str  # with the dot
    content_types: tuple[str, ...]
    needs: str = ""  # optional component: "ocr", "asr"
    magic: str = ""  # family of leading bytes expected: "pdf", "zip", "text", "image", "audio"


_OOXML = "application/vnd.openxmlformats-officedocument."
FILE_TYPES: tuple[FileType, ...] = (
    FileType(".pdf", ("application/pdf",), magic="pdf"),
    FileType(".docx", (_OOXML + "wordprocessingml.document",), magic="zip"),
    FileType(".pptx", (_OOXML + "presentationml.presentation",), magic="zip"),
    FileType(".xlsx", (_OOXML + "spreadsheetml.sheet",), magic="zip"),
    FileType(".csv", ("text/csv",), magic="text"),
    FileType(".txt", ("text/plain",), magic="text"),
    FileType(".text", ("text/plain",), magic="text"),
    FileType(".md", ("text/markdown", "text/x-markdown"), magic="text"),
    FileType(".markdown", ("text/markdown", "text/x-markdown"), magic="text"),
    FileType(".html", ("text/html",), magic="text"),
    FileType(".htm", ("text/html",), magic="text"),
    FileType(".png", ("image/png",), needs="ocr", magic="image"),
    FileType(".jpg", ("image/jpeg",), needs="ocr", magic="image"),
    FileType(".jpeg", ("image/jpeg",), needs="ocr", magic="image"),
    FileType(".bmp", ("image/bmp",), needs="ocr", magic="image"),
    FileType(".tif", ("image/tiff",), needs="ocr", magic="image"),
    FileType(".tiff", ("image/tiff",), needs="ocr", magic="image"),
    FileType(".webp", ("image/webp",), needs="ocr", magic="image"),
    FileType(".mp3", ("audio/mpeg",), needs="asr", magic="audio"),
    FileType(".wav", ("audio/wav", "audio/x-wav"), needs="asr", magic="audio"),
    FileType(".m4a", ("audio/mp4", "audio/x-m4a"), needs="asr", magic="audio"),
    FileType(".ogg", ("audio/ogg",), needs="asr", magic="audio"),
    FileType(".flac", ("audio/flac",), needs="asr", magic="audio"),
    FileType(".webm", ("audio/webm",), needs="asr", magic="audio"),
)
BY_EXTENSION = {t.extension: t for t in FILE_TYPES}

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF"),
    (b"PK\x03\x04", "a zip archive (Office file)"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"BM", "a BMP image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"ID3", "an MP3 file"),
    (b"fLaC", "a FLAC file"),
    (b"OggS", "an Ogg file"),
    (b"\x1aE\xdf\xa3", "a WebM file"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"MZ", "an executable (Windows)"),
    (b"\xd0\xcf\x11\xe0", "a legacy Office file (.doc/.xls/.ppt)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf", "a 7-Zip archive"),
)
_ALLOWED: dict[str, frozenset[str]] = {
    "pdf": frozenset({"a PDF"}),
    "zip": frozenset({"a zip archive (Office file)"}),
    "image": frozenset({"a PNG image", "a JPEG image", "a BMP image", "a TIFF image", "a GIF image"}),
    "audio": frozenset({"an MP3 file", "a FLAC file", "an Ogg file", "a WebM file"}),
}


def extension_of(file_name: str) -> str:
    return PurePath(file_name).suffix.lower()


def sniff(head: bytes) -> str:
    """What the leading bytes are, in words; "" when they match no known signature."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "a WAV file"
    if head[4:8] == b"ftyp":
        return "an MP4/M4A file"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[:3] != b"\xff\xd8\xff":
        return "an MP3 file"
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return name
    return ""


def check_content(file_name: str, head: bytes) -> str | None:
    """None when ``head`` (the first bytes) fits the extension; else why not, for the user."""
    file_type = BY_EXTENSION.get(extension_of(file_name))
    if file_type is None:
        return None
    found = sniff(head)
    if file_type.magic == "text":
        if found and found not in ("a BMP image", "an MP3 file"):  # "BM"/frame-sync-like text is possible
            return (
                f"{file_name}: the content is {found}, not text as the extension {file_type.extension} says"
            )
        if b"\x00" in head[:4096] and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
            return f"{file_name}: the content is binary, not text as the extension {file_type.extension} says"
        return None
    allowed = set(_ALLOWED.get(file_type.magic, frozenset()))
    if file_type.magic == "image":
        allowed.add("a WebP image")
    if file_type.magic == "audio":
        allowed.update({"a WAV file", "an MP4/M4A file"})
    if found in allowed:
        return None
    described = found or "not recognisable"
    return f"{file_name}: the content is {described}, not what the extension {file_type.extension} says"
