"""One model call with retries: tenacity, exponential backoff with jitter, honouring Retry-After.

Transient errors and degenerate answers are retried, up to a number of attempts and a
total time; context-window errors and other rejections are raised at once. Every
attempt is counted in `CallStats`, failed ones too.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)

from summarizer.client import Completion, CompletionRequest, LLMClient
from summarizer.echo import is_echo
from summarizer.errors import (
    ContextWindowError,
    DegenerateAnswerError,
    LLMError,
    LLMUnavailableError,
    TransientLLMError,
)

logger = logging.getLogger("precis.summarizer")

DETAIL_MAX_CHARS = 300
"""Longest error description kept in a log line or a fallback's `fallback_detail`."""

_SECRETS = re.compile(r"(?i)\b(?:sk|pk|key|token)-[A-Za-z0-9_\-]{6,}|bearer\s+\S+")

NON_ANSWERS = frozenset({"", "NONE", "N/A", "NA", "NULL", "NIL", "-", "...", "…"})
"""Answers (stripped, upper-cased, without final period) that say nothing."""


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one call."""

    max_attempts: int = 4
    max_seconds: float = 120.0
    initial_backoff: float = 0.5
    max_backoff: float = 20.0


@dataclass
class CallStats:
    """What the calls of one summarizer run cost."""

    calls: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    """Failed calls by `failure_reason`."""


def failure_reason(error: LLMError) -> str:
    """The metrics label of one failed call."""
    if isinstance(error, ContextWindowError):
        return "context_window"
    if isinstance(error, DegenerateAnswerError):
        return "degenerate_answer"
    if isinstance(error, TransientLLMError):
        return "transient"
    return "rejected"


def describe(error: BaseException, secret: str | None = None) -> str:
    """One line naming an error: its class and message, without credentials."""
    message = " ".join(str(error).split())
    if secret:
        message = message.replace(secret, "***")
    message = _SECRETS.sub("***", message)
    return f"{type(error).__name__}: {message}"[:DETAIL_MAX_CHARS]


def check_answer(answer: str, source: str | None) -> None:
    """Raise `DegenerateAnswerError` for an empty answer, a non-answer or an echo of `source`.

    With no source (the extractive local model, or a merge whose inputs fit its target),
    only empty answers and non-answers are rejected.
    """
    normalized = " ".join(answer.split())
    if normalized.rstrip(".").upper() in NON_ANSWERS:
        raise DegenerateAnswerError(f"non-answer {normalized[:20]!r}")
    if source is not None and is_echo(answer, source):
        raise DegenerateAnswerError("the answer repeats its input")


class _Backoff:
    """Exponential backoff with jitter, or the server's Retry-After when that is longer."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._exponential = wait_exponential_jitter(
            multiplier=policy.initial_backoff,
            max=policy.max_backoff,
            jitter=policy.initial_backoff,
        )
        self._cap = policy.max_seconds

    def __call__(self, state: RetryCallState) -> float:
        wait = self._exponential(state)
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, TransientLLMError) and error.retry_after is not None:
            wait = max(wait, min(error.retry_after, self._cap))
        return wait


async def complete_with_retry(
    client: LLMClient,
    request: CompletionRequest,
    *,
    echo_source: str | None,
    policy: RetryPolicy,
    stats: CallStats,
    limiter: asyncio.Semaphore,
    secret: str | None = None,
) -> Completion:
    """A usable completion, or `LLMUnavailableError` once retries are spent.

    An empty answer, a non-answer, or (when `echo_source` is given) an answer repeating
    it counts as a failed attempt and is retried like a transient error.
    `ContextWindowError` and `LLMRequestError` pass through unretried. `limiter` bounds
    concurrent attempts; it is not held while backing off. Every failed attempt is logged
    at WARNING with its cause (`secret`, the API key, is never written).
    """
    retrying = AsyncRetrying(
        retry=retry_if_exception_type((TransientLLMError, DegenerateAnswerError)),
        stop=stop_after_attempt(policy.max_attempts) | stop_before_delay(policy.max_seconds),
        wait=_Backoff(policy),
        reraise=True,
    )
    attempts = 0
    try:
        async for attempt in retrying:
            with attempt:
                attempts += 1
                async with limiter:
                    stats.calls += 1
                    try:
                        completion = await client.complete(request)
                        check_answer(completion.text, echo_source)
                    except LLMError as error:
                        stats.failed += 1
                        stats.failures[failure_reason(error)] += 1
                        logger.warning(
                            "summarizer LLM call failed (attempt %d of %d): %s",
                            attempts,
                            policy.max_attempts,
                            describe(error, secret),
                        )
                        raise
                stats.input_tokens += completion.input_tokens
                stats.output_tokens += completion.output_tokens
                return completion
    except (TransientLLMError, DegenerateAnswerError) as exc:
        raise LLMUnavailableError(
            f"no usable answer after {attempts} attempts: {exc}", attempts=attempts
        ) from exc
    raise AssertionError("unreachable: tenacity either returns or raises")
