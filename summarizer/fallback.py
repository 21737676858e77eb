"""The deterministic summary used when the model stays unreachable, so the caller can go on.

It is the local extractive summary (who asked what, decisions, facts, tools used and
message counts) under a note saying why no model wrote it; the summarizer marks it truncated,
stores it as model "fallback", and the service repairs it once the model answers again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from summarizer.local import merge_texts, summarize_transcript
from summarizer.tokens import count_text
from summarizer.transcript import TranscriptEntry

FALLBACK_PREFIX = "[Fallback summary: "
"""Start of the note heading every fallback summary that has room for it."""

FALLBACK_REASONS = {
    "llm_unavailable": "the summarizer model could not be reached or refused the request",
    "context_window": "the material did not fit the summarizer model's context window",
    "degenerate_answer": "the summarizer model's answers were unusable",
}
"""`fallback_reason` values and what the note says of each."""


def fallback_note(reason: str) -> str:
    """The first line of a fallback summary made for `reason`."""
    return f"{FALLBACK_PREFIX}{FALLBACK_REASONS[reason]}; key lines extracted.]"


NOTE_MAX_SHARE = 0.25
"""The note is left out when it would take more than this share of a small budget."""


def _noted(write: Callable[[int], str], max_tokens: int, reason: str) -> str:
    note = fallback_note(reason)
    note_tokens = count_text(note + "\n")
    if note_tokens > max_tokens * NOTE_MAX_SHARE:
        return write(max_tokens)
    return f"{note}\n{write(max_tokens - note_tokens)}".rstrip()


def fallback_summary(
    entries: Sequence[TranscriptEntry],
    max_tokens: int,
    reason: str,
    previous: str | None = None,
    instructions: str | None = None,
) -> str:
    """A summary of transcript entries written without the model (as `instructions` ask,
    the way the local model follows them)."""
    return _noted(
        lambda budget: summarize_transcript(entries, budget, previous, instructions),
        max_tokens,
        reason,
    )


def fallback_merge(
    texts: Sequence[str], max_tokens: int, reason: str, instructions: str | None = None
) -> str:
    """Consecutive summaries merged without the model."""
    return _noted(lambda budget: merge_texts(texts, budget, instructions), max_tokens, reason)
