"""TIFF files written by hand, so that a frame can declare any size without the writer allocating it:
what the parsing-budget tests and the fault suite (tests/chaos) upload as decompression bombs."""

from __future__ import annotations

import struct
import zlib

MIB = 1024 * 1024


def tiff(frames: list[tuple[int, int, bytes]]) -> bytes:
    """A little-endian TIFF of 8-bit grey frames (width, height, deflate-compressed pixels)."""
    out = bytearray(b"II*\x00\x00\x00\x00\x00")
    next_offset_at = 4
    for width, height, pixels in frames:
        pixels_at = len(out)
        out += pixels + b"\x00" * (len(pixels) % 2)
        struct.pack_into("<I", out, next_offset_at, len(out))
        entries = [  # (tag, type: 3 short / 4 long, value)
            (256, 4, width),
            (257, 4, height),
            (258, 3, 8),  # bits per sample
            (259, 3, 8),  # deflate
            (262, 3, 1),  # black is zero
            (273, 4, pixels_at),
            (277, 3, 1),  # samples per pixel
            (278, 4, height),  # rows per strip: one strip
            (279, 4, len(pixels)),
        ]
        out += struct.pack("<H", len(entries))
        for tag, kind, value in entries:
            packed = struct.pack("<HH", value, 0) if kind == 3 else struct.pack("<I", value)
            out += struct.pack("<HHI", tag, kind, 1) + packed
        next_offset_at = len(out)
        out += b"\x00\x00\x00\x00"
    return bytes(out)


def deflated_zeros(size: int) -> bytes:
    """``size`` zero bytes, deflated a mebibyte at a time (kilobytes on disk)."""
    compressor = zlib.compressobj(9)
    chunk = bytes(MIB)
    parts = [compressor.compress(chunk) for _ in range(size // MIB)]
    return b"".join([*parts, compressor.compress(bytes(size % MIB)), compressor.flush()])
