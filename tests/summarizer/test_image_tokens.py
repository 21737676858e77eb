"""Image parts count by OpenAI's tile rule, with the size read from the header of a data URL."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import pytest

from summarizer import images
from summarizer.images import JPEG_SCAN_BYTES, SNIFF_BYTES, data_url_size
from summarizer.tokens import (
    IMAGE_BASE_TOKENS,
    IMAGE_UNKNOWN_SIZE_TOKENS,
    count_content,
    count_image,
    count_message,
)

REMOTE_URL = "https://example.com/cat.png"


def png(width: int, height: int) -> bytes:
    """A complete 1-bit grayscale PNG, all black (its zero rows compress to almost nothing)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    rows = (b"\x00" * (1 + (width + 7) // 8)) * height
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def gif(width: int, height: int) -> bytes:
    """A GIF89a with a two-colour table and one 1x1 image in its top-left corner."""
    screen = b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0)
    colours = b"\x00\x00\x00\xff\xff\xff"
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return screen + colours + image + b"\x3b"


def segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload


def _chunked(total: int, most: int) -> list[int]:
    return [min(most, total - start) for start in range(0, total, most)]


def jpeg(width: int, height: int, *, sof: int = 0xC0, exif_bytes: int = 0) -> bytes:
    """A JPEG's segments up to the scan: JFIF, optional EXIF padding, tables, the frame header."""
    frame = struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return (
        b"\xff\xd8"
        + segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
        + b"".join(segment(0xE1, b"\x00" * size) for size in _chunked(exif_bytes, 60_000))
        + segment(0xDB, b"\x00" + bytes(range(1, 65)))
        + b"\xff"  # a fill byte before a marker is allowed
        + segment(sof, frame)
        + segment(0xC4, b"\x00" + b"\x01" + b"\x00" * 15 + b"\x00")
        + segment(0xDA, b"\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00")
        + b"\x00\xff\xd9"
    )


def webp_vp8x(width: int, height: int) -> bytes:
    """An extended WebP: the VP8X chunk carries the canvas size minus one."""
    body = (
        b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )
    chunk = b"VP8X" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def webp_vp8l(width: int, height: int) -> bytes:
    """A lossless WebP header: signature 0x2f, then 14-bit width and height minus one."""
    bits = (width - 1) | (height - 1) << 14
    body = b"\x2f" + bits.to_bytes(4, "little") + b"\x00" * 5
    chunk = b"VP8L" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def webp_vp8(width: int, height: int) -> bytes:
    """A lossy WebP header: a key frame's tag, start code and 14-bit width and height."""
    body = b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\x00" * 4
    chunk = b"VP8 " + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def data_url(image: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(image).decode()}"


def chat_part(url: str, detail: str | None = None) -> dict[str, Any]:
    image: dict[str, Any] = {"url": url} if detail is None else {"url": url, "detail": detail}
    return {"type": "image_url", "image_url": image}


@pytest.mark.parametrize(
    ("image", "size"),
    [
        (png(3, 2), (3, 2)),
        (gif(300, 200), (300, 200)),
        (jpeg(640, 480), (640, 480)),
        (jpeg(1920, 1080, sof=0xC2), (1920, 1080)),
        (jpeg(800, 600, sof=0xC1, exif_bytes=8000), (800, 600)),
        (webp_vp8x(5000, 70), (5000, 70)),
        (webp_vp8l(16383, 1), (16383, 1)),
        (webp_vp8(1024, 768), (1024, 768)),
    ],
    ids=["png", "gif", "jpeg-sof0", "jpeg-sof2", "jpeg-sof1-after-exif", "vp8x", "vp8l", "vp8"],
)
def test_the_size_is_read_from_the_header_of_each_format(
    image: bytes, size: tuple[int, int]
) -> None:
    assert data_url_size(data_url(image)) == size


def test_the_format_is_read_from_the_bytes_not_the_media_type() -> None:
    assert data_url_size(data_url(png(640, 480), mime="image/jpeg")) == (640, 480)


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (3, 2, 255),  # small: one tile
        (512, 512, 255),
        (513, 512, 425),  # just over a tile's edge: two tiles
        (1024, 1024, 765),  # shortest side to 768: 2x2 tiles
        (2048, 4096, 1105),  # fit to 1024x2048, then 768x1536: 2x3 tiles
        (768, 2048, 1445),  # the most an image can cost: 2x4 tiles
        (10000, 1, 765),  # a strip: 2048 wide, 4 tiles
    ],
)
def test_a_high_detail_image_costs_170_per_tile_plus_85(
    width: int, height: int, tokens: int
) -> None:
    assert count_image(chat_part(data_url(png(width, height)), "high")) == tokens


@pytest.mark.parametrize("detail", [None, "auto", "high"])
def test_auto_and_absent_detail_count_as_high(detail: str | None) -> None:
    assert count_image(chat_part(data_url(png(2048, 4096)), detail)) == 1105


@pytest.mark.parametrize("url", [data_url(png(2048, 4096)), REMOTE_URL])
def test_a_low_detail_image_costs_85_whatever_its_size(url: str) -> None:
    assert count_image(chat_part(url, "low")) == IMAGE_BASE_TOKENS == 85


def test_a_remote_image_counts_the_most_a_high_detail_image_can_cost() -> None:
    assert IMAGE_UNKNOWN_SIZE_TOKENS == 1445
    assert count_image(chat_part(REMOTE_URL)) == IMAGE_UNKNOWN_SIZE_TOKENS


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,",
        "data:image/png;base64,iVBORw0KGgo",  # a PNG cut inside its signature
        data_url(png(640, 480))[:40],  # cut before the size
        "data:image/png;base64,!!!!%%%%",
        "data:image/png;base64,====",
        "data:image/png," + "%89PNG",  # not base64
        "data:" + "x" * 300 + ";base64," + base64.b64encode(png(1, 1)).decode(),
        data_url(b"\x00" * 64),  # no known format
        data_url(b"BM" + b"\x00" * 64, mime="image/bmp"),
        data_url(png(0, 10)),
        data_url(jpeg(640, 0)),  # the height comes later, in a DNL segment
        data_url(jpeg(640, 480)[:30]),  # cut before the frame header
        data_url(b"\xff\xd8\xff\xda\x00\x02" + b"\x00" * 64),  # a scan before any frame
        data_url(b"\xff\xd8\xff\xe0\x00\x01" + b"\x00" * 64),  # a segment length below 2
        data_url(jpeg(640, 480, exif_bytes=JPEG_SCAN_BYTES)),  # the frame header is too far in
    ],
)
def test_an_unreadable_data_url_counts_as_unknown_size(url: str) -> None:
    assert count_image(chat_part(url)) == IMAGE_UNKNOWN_SIZE_TOKENS


@pytest.mark.parametrize(
    ("image", "bound"),
    [(png(1024, 1024), SNIFF_BYTES), (jpeg(1024, 1024, exif_bytes=200_000), JPEG_SCAN_BYTES)],
    ids=["png", "jpeg"],
)
def test_only_a_bounded_prefix_of_a_large_data_url_is_decoded(
    image: bytes, bound: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[int] = []

    def spy(chars: str) -> bytes:
        data = base64.b64decode(chars)
        decoded.append(len(data))
        return data

    monkeypatch.setattr(images, "b64decode", spy)
    count_image(chat_part(data_url(image + b"\x00" * 1_000_000)))
    assert decoded and max(decoded) <= bound + 2  # base64 decodes whole 3-byte groups


def test_a_plain_string_image_url_is_read_like_an_object() -> None:
    part = {"type": "image_url", "image_url": data_url(png(1024, 1024))}
    assert count_image(part) == 765


def test_a_responses_input_image_reads_its_url_and_detail() -> None:
    url = data_url(png(1024, 1024))
    assert count_image({"type": "input_image", "image_url": url}) == 765
    assert count_image({"type": "input_image", "image_url": url, "detail": "auto"}) == 765
    assert count_image({"type": "input_image", "image_url": url, "detail": "low"}) == 85


def test_an_input_image_by_file_id_counts_as_unknown_size() -> None:
    part = {"type": "input_image", "file_id": "file-abc", "detail": "high"}
    assert count_image(part) == IMAGE_UNKNOWN_SIZE_TOKENS


def test_a_bare_image_part_counts_as_unknown_size() -> None:
    assert count_image({"type": "image"}) == IMAGE_UNKNOWN_SIZE_TOKENS


def test_content_adds_each_image_to_its_text() -> None:
    text = {"type": "text", "text": "which is larger?"}
    small, large = chat_part(data_url(gif(100, 100))), chat_part(data_url(jpeg(2048, 4096)))
    assert count_content([text, small, large]) == count_content([text]) + 255 + 1105


def test_a_message_counts_its_images_by_the_rule() -> None:
    text = {"type": "text", "text": "what is this?"}
    with_image = {"role": "user", "content": [text, chat_part(data_url(webp_vp8x(1024, 1024)))]}
    assert count_message(with_image) - count_message({"role": "user", "content": [text]}) == 765
