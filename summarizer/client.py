"""The one interface every summarizer model implements: litellm, the local model, test doubles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from summarizer.transcript import TranscriptEntry


@dataclass(frozen=True)
class Completion:
    """One model answer and the tokens it cost."""

    text: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class SummaryTask:
    """Summarize the messages of `transcript`, continuing `previous_summary` when given, as
    `instructions` ask when given."""

    transcript: tuple[TranscriptEntry, ...]
    """The entries as the prompt shows them (cut ones as cut)."""
    previous_summary: str | None = None
    instructions: str | None = None
    """What the summary must keep (`SummarizerSettings.instructions`)."""


@dataclass(frozen=True)
class MergeTask:
    """Merge summaries of consecutive parts of one chat, oldest first, into one, as
    `instructions` ask when given."""

    summaries: tuple[str, ...]
    instructions: str | None = None
    """What the summary must keep (`SummarizerSettings.instructions`)."""


@dataclass(frozen=True)
class CompletionRequest:
    """One model call: the rendered prompt, and what it asks for as data.

    A chat model answers `messages`, which state the task and the target in words. The
    offline model reads `task` and `target_tokens` instead, never the prompt's text.
    """

    messages: list[dict[str, Any]]
    max_tokens: int
    """The answer's hard cap (a little above the target, to end a sentence)."""
    target_tokens: int
    """The answer length the prompt asks for."""
    task: SummaryTask | MergeTask


class LLMClient(Protocol):
    """A chat model the summarizer can ask for one completion.

    `complete` makes ONE attempt (the summarizer owns retries) and raises only
    `summarizer.errors` exceptions: `ContextWindowError` when the prompt does not fit,
    `TransientLLMError` for what a retry may fix, `LLMRequestError` for the rest.
    """

    async def complete(self, request: CompletionRequest) -> Completion:
        """Answer `request` in at most `request.max_tokens` tokens."""
        ...
