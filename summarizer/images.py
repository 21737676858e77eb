"""An image's pixel size read from the header of a base64 `data:` URL, without decoding it.

Token counting runs on every append, so only a bounded prefix of the payload is decoded and
only the few header bytes of PNG, JPEG, GIF and WebP are read: no image library, no pixels.
"""

from __future__ import annotations

import binascii
import struct
from base64 import b64decode

DATA_URL_HEADER_CHARS = 256
"""How far into a `data:` URL its `;base64,` separator may be: longer media types are refused."""

SNIFF_BYTES = 32
"""Decoded bytes that hold the size of a PNG, GIF or WebP (and tell a JPEG apart)."""

JPEG_FIRST_SCAN_BYTES = 4 * 1024
"""Decoded bytes first searched for a JPEG's frame header: enough for one without EXIF data."""

JPEG_SCAN_BYTES = 64 * 1024
"""Decoded bytes searched for a JPEG's frame header at most: EXIF data and thumbnails come
first and can take tens of KB; a frame header further in is given up on (size unknown)."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SOI = b"\xff\xd8"
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""Start-of-frame markers (every coding process); C4, C8 and CC are other segments."""
_JPEG_LENGTHLESS_MARKERS = frozenset({0x01, *range(0xD0, 0xD8)})


def data_url_size(url: str) -> tuple[int, int] | None:
    """Width and height of the image a base64 `data:` URL carries; None when the URL is not one,
    or its header is truncated, unreadable or of another format."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, DATA_URL_HEADER_CHARS)
    if comma < 0 or not url[:comma].endswith(";base64"):
        return None
    start = comma + 1
    head = _decoded_prefix(url, start, SNIFF_BYTES)
    if not head.startswith(_JPEG_SOI):
        return _png_size(head) or _gif_size(head) or _webp_size(head)
    for bound in (JPEG_FIRST_SCAN_BYTES, JPEG_SCAN_BYTES):
        size = _jpeg_size(_decoded_prefix(url, start, bound))
        if size is not None:
            return size
    return None


def _decoded_prefix(url: str, start: int, size: int) -> bytes:
    """The first `size` bytes (or fewer) of the base64 payload at `url[start:]`."""
    chars = url[start : start + (size + 2) // 3 * 4]
    chars = chars[: len(chars) // 4 * 4]
    try:
        return b64decode(chars)
    except (binascii.Error, ValueError):
        return b""


def _checked(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return _checked(width, height)


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 10 or data[:6] not in (b"GIF87a", b"GIF89a"):
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return _checked(width, height)


def _webp_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 30 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    chunk = data[12:16]
    if chunk == b"VP8X":
        # canvas width and height minus one, 24-bit little-endian, after 4 bytes of flags
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _checked(width, height)
    if chunk == b"VP8L" and data[20] == 0x2F:
        # 14 bits of width minus one, then 14 bits of height minus one
        bits = int.from_bytes(data[21:25], "little")
        return _checked((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        # the key frame's start code, then 14-bit width and height (the top 2 bits scale)
        width, height = struct.unpack("<HH", data[26:30])
        return _checked(width & 0x3FFF, height & 0x3FFF)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The size in the first start-of-frame segment, walking the segments from the start."""
    position = len(_JPEG_SOI)
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # a fill byte before the marker
            position += 1
            continue
        if marker in _JPEG_LENGTHLESS_MARKERS:
            position += 2
            continue
        if marker in (0xD9, 0xDA):  # the image ends or its data starts: no frame header came
            return None
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if marker in _JPEG_SOF_MARKERS:
            if position + 9 > len(data) or length < 7:
                return None
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return _checked(width, height)
        if length < 2:
            return None
        position += 2 + length
    return None
