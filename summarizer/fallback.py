"""The deterministic summary used when the model stays unreachable, so the caller can go on.

It is the local extractive summary (who asked what, decisions, facts, tools used and
message counts) under a note saying no model wrote it; the engine marks it truncated.
"""

from __future__ import annotations

from collections.abc import Sequence

from summarizer.local import merge_texts, summarize_transcript
from summarizer.text import clip_tokens
from summarizer.tokens import count_text

FALLBACK_NOTE = "[Fallback summary: the summarizer model was unavailable; key lines extracted.]"
"""First line of every fallback summary."""


def _with_note(body_budget_text: str, target_tokens: int) -> str:
    return clip_tokens(f"{FALLBACK_NOTE}\n{body_budget_text}".rstrip(), target_tokens)


def _body_budget(target_tokens: int) -> int:
    return max(0, target_tokens - count_text(FALLBACK_NOTE + "\n"))


def fallback_summary(transcript: str, target_tokens: int, previous: str | None = None) -> str:
    """A summary of a rendered transcript written without the model."""
    body = summarize_transcript(transcript, _body_budget(target_tokens), previous)
    return _with_note(body, target_tokens)


def fallback_merge(texts: Sequence[str], target_tokens: int) -> str:
    """Consecutive summaries merged without the model."""
    return _with_note(merge_texts(texts, _body_budget(target_tokens)), target_tokens)
