"""Errors of the summarizer.

An `LLMClient` raises these for one failed attempt; the summarizer retries the transient
ones, bisects on `ContextWindowError`, and turns everything else into a fallback summary,
so `summarize()` itself never raises for an LLM fault.
"""

from __future__ import annotations


class SummarizerError(Exception):
    """Base of every error the summarizer raises."""


class LLMError(SummarizerError):
    """One call to the summarizer model failed."""


class ContextWindowError(LLMError):
    """The prompt (plus the reserved answer) is larger than the model's context window.

    `window_tokens` and `prompt_tokens` carry what the provider reported, when it did.
    """

    def __init__(
        self, message: str, *, window_tokens: int | None = None, prompt_tokens: int | None = None
    ) -> None:
        super().__init__(message)
        self.window_tokens = window_tokens
        self.prompt_tokens = prompt_tokens


class TransientLLMError(LLMError):
    """A failure worth retrying: timeout, connection error, 429 or 5xx."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMRequestError(LLMError):
    """The provider rejected the request for a reason retrying cannot fix (a 4xx)."""


class DegenerateAnswerError(LLMError):
    """The model answered, but with nothing usable: empty, only "NONE", or an echo of its input."""


class LLMUnavailableError(LLMError):
    """No usable answer after every retry: the model is down, overloaded or degenerate."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts
