"""The deterministic summary used when the model stays unreachable, so the caller can go on.

It is the local extractive summary (who asked what, decisions, facts, tools used and
message counts) under a note saying no model wrote it; the engine marks it truncated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from summarizer.local import merge_texts, summarize_transcript
from summarizer.tokens import count_text

FALLBACK_NOTE = "[Fallback summary: the summarizer model was unavailable; key lines extracted.]"
"""First line of every fallback summary that has room for it."""

NOTE_MAX_SHARE = 0.25
"""The note is left out when it would take more than this share of a small budget."""


def _noted(write: Callable[[int], str], max_tokens: int) -> str:
    note_tokens = count_text(FALLBACK_NOTE + "\n")
    if note_tokens > max_tokens * NOTE_MAX_SHARE:
        return write(max_tokens)
    return f"{FALLBACK_NOTE}\n{write(max_tokens - note_tokens)}".rstrip()


def fallback_summary(transcript: str, max_tokens: int, previous: str | None = None) -> str:
    """A summary of a rendered transcript written without the model."""
    return _noted(lambda budget: summarize_transcript(transcript, budget, previous), max_tokens)


def fallback_merge(texts: Sequence[str], max_tokens: int) -> str:
    """Consecutive summaries merged without the model."""
    return _noted(lambda budget: merge_texts(texts, budget), max_tokens)
