"""What a summarization run is given: its plain settings, the client they name, its window."""

from __future__ import annotations

from dataclasses import dataclass, field

from summarizer.client import LLMClient
from summarizer.local import LOCAL_MODEL, LocalSummarizer
from summarizer.retry import RetryPolicy
from summarizer.transcript import TranscriptOptions


@dataclass(frozen=True)
class SummarizerSettings:
    """Everything the summarizer needs to know, as plain values (no service settings object)."""

    target_tokens: int = 800
    merge_target_tokens: int = 1200
    model: str = LOCAL_MODEL
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.3
    model_context_tokens: int | None = None
    bisect_enabled: bool = True
    bisect_max_depth: int = 6
    bisect_min_messages: int = 2
    keep_last_n: int = 0
    previous_summary: str | None = None
    instructions: str | None = None
    """What the summary must keep, in the words of whoever asked for it (a session's
    `summary_instructions`, a compact's `instructions`); set per run, like `previous_summary`."""
    timeout_seconds: float = 60.0
    max_attempts: int = 4
    max_retry_seconds: float = 120.0
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 20.0
    max_concurrency: int = 4
    tool_result_preview_chars: int = TranscriptOptions.tool_result_chars
    tool_args_preview_chars: int = TranscriptOptions.tool_args_chars

    def __post_init__(self) -> None:
        positive = {
            "target_tokens": self.target_tokens,
            "merge_target_tokens": self.merge_target_tokens,
            "bisect_min_messages": self.bisect_min_messages,
            "timeout_seconds": self.timeout_seconds,
            "max_attempts": self.max_attempts,
            "max_concurrency": self.max_concurrency,
            "tool_result_preview_chars": self.tool_result_preview_chars,
            "tool_args_preview_chars": self.tool_args_preview_chars,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name, value in {
            "bisect_max_depth": self.bisect_max_depth,
            "keep_last_n": self.keep_last_n,
            "max_retry_seconds": self.max_retry_seconds,
            "backoff_initial_seconds": self.backoff_initial_seconds,
            "backoff_max_seconds": self.backoff_max_seconds,
        }.items():
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if self.model_context_tokens is not None and self.model_context_tokens <= 0:
            raise ValueError("model_context_tokens must be positive or None")

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            max_seconds=self.max_retry_seconds,
            initial_backoff=self.backoff_initial_seconds,
            max_backoff=self.backoff_max_seconds,
        )


def build_client(settings: SummarizerSettings) -> LLMClient:
    """The client `settings.model` names: the local model, or litellm."""
    if settings.model == LOCAL_MODEL:
        return LocalSummarizer()
    from summarizer.llm import LiteLLMClient

    return LiteLLMClient(
        settings.model,
        api_base=settings.api_base,
        api_key=settings.api_key,
        temperature=settings.temperature,
        timeout_seconds=settings.timeout_seconds,
    )


async def resolve_window(settings: SummarizerSettings) -> int | None:
    """The model's context window: the setting, else litellm's model map, else None."""
    if settings.model_context_tokens is not None:
        return settings.model_context_tokens
    if settings.model == LOCAL_MODEL:
        return None
    from summarizer.llm import model_context_window

    return await model_context_window(settings.model)
