"""Token counting with the cl100k encoding bundled with litellm (no download, no litellm import)."""

from __future__ import annotations

import base64
import importlib.util
import json
import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from summarizer.images import data_url_size

TOKENS_PER_MESSAGE = 3
"""Fixed framing cost of one chat message (role and separators), as OpenAI documents for cl100k."""

TOKENS_PER_NAME = 1
"""Extra framing cost when a message carries a `name`."""

TOKENS_PER_TOOL_CALL = 3
"""Framing cost of one tool call on top of its name and arguments."""

IMAGE_BASE_TOKENS = 85
"""What every image costs (OpenAI's rule for GPT-4o-class models); a `low` detail one costs
only this, whatever its size."""

IMAGE_TILE_TOKENS = 170
"""What each 512x512 tile of a `high` or `auto` detail image adds."""

IMAGE_TILE_SIDE = 512
"""The side of a tile, in pixels."""

IMAGE_MAX_SIDE = 2048
"""A larger image is first scaled down to fit a square of this side."""

IMAGE_SHORT_SIDE = 768
"""Then scaled down until its shortest side is at most this."""

IMAGE_UNKNOWN_SIZE_TOKENS = IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * (
    math.ceil(IMAGE_SHORT_SIDE / IMAGE_TILE_SIDE) * math.ceil(IMAGE_MAX_SIDE / IMAGE_TILE_SIDE)
)
"""The most a `high` detail image can cost (768x2048 after scaling: 8 tiles, 1,445 tokens):
an image whose size is not read counts this, so a budget never undercounts it."""

IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
"""Content part types counted by the image rule instead of as text."""

_CL100K_FILE = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

_O200K_FILE = "fb374d419588a4632f3f557e76b4b70aebbca790"
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)  # fmt: skip
"""o200k's split pattern, as tiktoken defines it (the GPT-4o and later models' encoding)."""


def _bundled_tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("litellm is not installed: its bundled cl100k encoding is needed")
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


@cache
def encoding() -> tiktoken.Encoding:
    """The cl100k encoding, read from the file litellm ships, so nothing is downloaded."""
    path = _bundled_tokenizer_dir() / _CL100K_FILE
    ranks = _read_ranks(path)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    )


@cache
def o200k_encoding() -> tiktoken.Encoding:
    """The o200k encoding (GPT-4o and later), read from the file litellm ships."""
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=_O200K_PATTERN,
        mergeable_ranks=_read_ranks(_bundled_tokenizer_dir() / _O200K_FILE),
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    )


def _read_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def count_text(text: str) -> int:
    """Tokens of a plain string (special-token text is counted as ordinary text)."""
    if not text:
        return 0
    return len(encoding().encode_ordinary(text))


def _as_text(value: object) -> str:
    """A value of no shape the counting knows, as the JSON a model would be sent."""
    return json.dumps(value, ensure_ascii=False, default=str)


def count_content(content: object) -> int:
    """Tokens of an OpenAI `content` value: a string, a list of content parts, or None (any
    other value, a proxied request's to judge, counted as its JSON)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text(content)
    if not isinstance(content, list):
        return count_text(_as_text(content))
    total = 0
    for part in content:
        if not isinstance(part, Mapping):
            total += count_text(_as_text(part))
            continue
        kind = part.get("type")
        if kind == "text":
            total += count_text(str(part.get("text") or ""))
        elif kind in IMAGE_PARTS:
            total += count_image(part)
        else:
            total += count_text(_as_text(part))
    return total


def count_image(part: Mapping[str, Any]) -> int:
    """Tokens of an image content part by OpenAI's rule for GPT-4o-class models (what cl100k
    counting stands for): `low` detail costs 85; `high`, `auto` or none is scaled to fit
    2048x2048, then until its shortest side is at most 768 (never up), and costs 170 per
    512x512 tile plus 85. The size is read from the header of a base64 `data:` URL; a remote
    URL, a `file_id` or an unreadable header counts the most a `high` image can cost.

    Takes chat parts (`image_url` an object with `url` and `detail`, or a plain string) and
    Responses `input_image` parts (`image_url` a string, `detail` beside it)."""
    image = part.get("image_url")
    if isinstance(image, Mapping):
        url, detail = image.get("url"), image.get("detail")
    else:
        url, detail = image, part.get("detail")
    if detail == "low":
        return IMAGE_BASE_TOKENS
    size = data_url_size(url) if isinstance(url, str) else None
    return IMAGE_UNKNOWN_SIZE_TOKENS if size is None else _high_detail_tokens(*size)


@lru_cache(maxsize=1024)
def _high_detail_tokens(width: int, height: int) -> int:
    # exact fractions: a float landing a hair over a tile's edge would add a row of tiles
    scale = min(Fraction(1), Fraction(IMAGE_MAX_SIDE, max(width, height)))
    scale *= min(Fraction(1), Fraction(IMAGE_SHORT_SIDE) / (min(width, height) * scale))
    columns = math.ceil(width * scale / IMAGE_TILE_SIDE)
    rows = math.ceil(height * scale / IMAGE_TILE_SIDE)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * columns * rows


def count_tool_calls(tool_calls: object) -> int:
    """Tokens of an assistant message's `tool_calls` (function names and raw arguments; any
    other shape counted as its JSON)."""
    if not tool_calls:
        return 0
    if not isinstance(tool_calls, list):
        return count_text(_as_text(tool_calls))
    total = 0
    for call in tool_calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            total += TOKENS_PER_TOOL_CALL + count_text(_as_text(call))
            continue
        total += TOKENS_PER_TOOL_CALL
        total += count_text(str(function.get("name") or ""))
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = _as_text(arguments)
        total += count_text(arguments or "")
    return total


def count_message(message: Mapping[str, Any]) -> int:
    """Prompt tokens of one chat message: content, parts, tool calls, name and framing."""
    total = TOKENS_PER_MESSAGE + count_content(message.get("content"))
    if message.get("name"):
        total += TOKENS_PER_NAME + count_text(str(message["name"]))
    total += count_tool_calls(message.get("tool_calls"))
    if message.get("tool_call_id"):
        total += count_text(str(message["tool_call_id"]))
    return total


def count_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens of a list of chat messages."""
    return sum(count_message(message) for message in messages)
