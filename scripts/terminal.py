"""Text for a terminal, shared by the operator tools: display widths, clipping, UTC times."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime


def display_width(text: str) -> int:
    """Columns a string takes on a terminal: CJK wide characters take two."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def one_line(text: str) -> str:
    return " ".join(text.split())


def clip(text: str, width: int) -> str:
    """`text` on one line, cut to `width` columns with an ellipsis."""
    flat = one_line(text)
    if display_width(flat) <= width:
        return flat
    kept: list[str] = []
    used = 0
    for char in flat:
        char_width = display_width(char)
        if used + char_width > width - 1:
            break
        kept.append(char)
        used += char_width
    return "".join(kept) + "…"


def pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def timestamp(value: datetime) -> datetime:
    """Stored timestamps are UTC; SQLite hands them back without a time zone."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def short_time(value: datetime) -> str:
    return timestamp(value).strftime("%Y-%m-%d %H:%M:%S")


def optional_time(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value).isoformat()
