"""Prompt versioning: the prompt texts cannot change without a new PROMPT_VERSION."""

from __future__ import annotations

import hashlib
import json

from summarizer.prompts import PROMPT_VERSION, merge_request, summary_request

PINNED = ("2026-11.3", "5cc57a68009713edbb2fffa4b5e523f25c1e692e9e77cc708313632ea7fbcb83")
"""(PROMPT_VERSION, sha256 of every request the prompts module builds) when last reviewed."""


def prompts_digest() -> str:
    """sha256 of the system prompts and their framing, rendered with fixed placeholders."""
    requests = [
        summary_request("{transcript}", 800),
        summary_request("{transcript}", 800, "{previous_summary}"),
        merge_request(["{first}", "{second}"], 1200),
        merge_request(["{first}", "{second}", "{third}"], 1200),
        summary_request("{transcript}", 800, None, "{instructions}"),
        summary_request("{transcript}", 800, "{previous_summary}", "{instructions}"),
        merge_request(["{first}", "{second}"], 1200, "{instructions}"),
    ]
    return hashlib.sha256(json.dumps(requests, sort_keys=True).encode()).hexdigest()


def test_prompt_texts_match_the_pinned_version() -> None:
    digest = prompts_digest()
    assert (PROMPT_VERSION, digest) == PINNED, (
        f"summarizer/prompts.py gives ({PROMPT_VERSION!r}, {digest!r}), not the pinned pair. "
        "A prompt text changed: bump PROMPT_VERSION (every summary's metadata records it) and "
        f"set PINNED in tests/summarizer/test_prompts.py to (the new version, {digest!r})."
    )
