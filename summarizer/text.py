"""Clipping text by characters or tokens, never inside a character.

Python strings hold code points, so a UTF-8 sequence cannot be split by slicing; what
can still go wrong is splitting a surrogate pair (strings decoded with `surrogatepass`)
or tearing a combining mark off its base letter. Every cut here goes through
`safe_boundary`, and token cuts decode only whole UTF-8 sequences.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from summarizer.tokens import count_text, encoding

ELLIPSIS = "…"
"""Marker appended where a preview was cut."""

MIDDLE_MARKER = " […] "
"""Marker put where the middle of a message was cut out by forced truncation."""

_FIT_ATTEMPTS = 4
"""Re-tokenizing a clipped string may merge tokens at the seam; shrink at most this often."""


def _is_high_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


def _is_low_surrogate(char: str) -> bool:
    return "\udc00" <= char <= "\udfff"


def _joins_previous(char: str) -> bool:
    return _is_low_surrogate(char) or unicodedata.combining(char) != 0 or char in "\u200d\ufe0f"


def safe_boundary(text: str, index: int) -> int:
    """The nearest index at or before `index` where `text` may be cut."""
    index = max(0, min(index, len(text)))
    while 0 < index < len(text) and (
        _joins_previous(text[index]) or _is_high_surrogate(text[index - 1])
    ):
        index -= 1
    return index


def safe_boundary_forward(text: str, index: int) -> int:
    """The nearest index at or after `index` where `text` may be cut."""
    index = max(0, min(index, len(text)))
    while 0 < index < len(text) and (
        _joins_previous(text[index]) or _is_high_surrogate(text[index - 1])
    ):
        index += 1
    return index


def clip_chars(text: str, max_chars: int, marker: str = ELLIPSIS) -> str:
    """`text` cut to at most `max_chars` characters (marker included) on a safe boundary."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(marker))
    return text[: safe_boundary(text, keep)] + marker


def utf8_safe(text: str) -> str:
    """`text` with lone surrogates replaced, so it encodes as UTF-8 like tiktoken sees it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _head(text: str, tokens: list[int], count: int) -> str:
    if count <= 0:
        return ""
    prefix = encoding().decode_bytes(tokens[:count]).decode("utf-8", "ignore")
    return text[: safe_boundary(text, len(prefix))]


def _tail(text: str, tokens: list[int], count: int) -> str:
    if count <= 0:
        return ""
    suffix = encoding().decode_bytes(tokens[-count:]).decode("utf-8", "ignore")
    return text[safe_boundary_forward(text, len(text) - len(suffix)) :]


def clip_tokens(text: str, max_tokens: int, marker: str = ELLIPSIS) -> str:
    """`text` cut to at most `max_tokens` tokens (marker included), keeping the head."""
    text = utf8_safe(text)
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max_tokens - count_text(marker)
    for _ in range(_FIT_ATTEMPTS):
        if keep <= 0:
            break
        clipped = _head(text, tokens, keep).rstrip() + marker
        excess = count_text(clipped) - max_tokens
        if excess <= 0:
            return clipped
        keep -= excess
    return _head(text, tokens, max_tokens)


def clip_middle(text: str, max_tokens: int, marker: str = MIDDLE_MARKER) -> str:
    """`text` cut to at most `max_tokens` tokens by removing its middle, head and tail kept."""
    text = utf8_safe(text)
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max_tokens - count_text(marker)
    for _ in range(_FIT_ATTEMPTS):
        if keep < 2:
            break
        head_count = (keep + 1) // 2
        clipped = _head(text, tokens, head_count) + marker + _tail(text, tokens, keep - head_count)
        excess = count_text(clipped) - max_tokens
        if excess <= 0:
            return clipped
        keep -= excess
    return _head(text, tokens, max_tokens)


OFFLOAD_CHARS = 65_536
"""Text work on more characters than this (token counting, rendering, the local model) runs in
a worker thread: counting runs at a few MB/s, so on the event loop a large input would stall
every other request. Smaller work stays on the loop, where it is done sooner than a thread
hop (and GIL contention with the loop) would allow."""


def text_chars(messages: Sequence[Mapping[str, Any]]) -> int:
    """The characters of the messages' contents: what decides whether to offload."""
    return sum(len(str(message.get("content") or "")) for message in messages)
